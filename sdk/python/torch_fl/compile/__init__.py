"""Graph mode: ``torch.compile(model, backend="torchfl")``.

Dynamo and AOTAutograd capture ATen graphs; torch-fl removes dead code,
fuses chains of elementwise ops into regions, offers each region to the
plugin's graph compiler (TFL_GraphApi, sdk/include/torch_fl/graph.h), plans
memory by liveness, and runs what the plugin declined eagerly through the
bridge ("mixed execution").

Options: ``torch.compile(model, backend="torchfl", options={...})`` with the
fields of CompileOptions. ``TORCH_FL_LOG=debug`` logs each graph's partition
(logger "torch_fl.compile"); ``reports()`` returns the same as data.

This module stays light: it imports Dynamo only when a graph is compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.fx

    from torch_fl.compile.backend import CompileOptions, GraphReport

__all__ = [
    "BACKEND_NAME",
    "CompileOptions",
    "GraphReport",
    "clear_reports",
    "graph_compiler_available",
    "reports",
    "torchfl_backend",
]

BACKEND_NAME = "torchfl"


def torchfl_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
) -> Callable[..., Any]:
    """The Dynamo backend behind ``backend="torchfl"``."""
    from torch_fl.compile.backend import torchfl_backend as compile_graph

    return compile_graph(gm, example_inputs, **kwargs)


def graph_compiler_available() -> bool:
    """Whether the registered plugin has a graph compiler (the graph group)."""
    from torch_fl import _C

    return bool(_C.has_plugin() and _C.graph_available())


def reports() -> list[GraphReport]:
    """What compiling each graph did: regions, declines, eager ops, memory plan."""
    from torch_fl.compile.backend import reports as _reports

    return _reports()


def clear_reports() -> None:
    from torch_fl.compile.backend import clear_reports as _clear

    _clear()


def __getattr__(name: str) -> Any:
    if name in ("CompileOptions", "GraphReport"):
        from torch_fl.compile import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'torch_fl.compile' has no attribute {name!r}")
