"""A fused region in the plugin's graph IR (sdk/include/torch_fl/graph.h).

Values are the region's inputs, the values its nodes produce, and which of
those leave the region; nodes name their ATen op by schema name
("aten::add.Tensor") and pass every schema argument in order, tensors as
references to values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from torch_fl.compile.fusion import Region, tensor_val

__all__ = ["RegionIR", "UnsupportedArgument", "build_region_ir", "schema_name"]

# TFL_GraphValueKind
_INPUT = 0
_OUTPUT = 1
_INTERMEDIATE = 2

_MEMORY_FORMATS = {
    torch.preserve_format: 0,  # TFL_MEMORY_FORMAT_ANY
    torch.contiguous_format: 1,
    torch.channels_last: 2,
}


class UnsupportedArgument(ValueError):
    """An argument the graph IR cannot carry."""

    node: torch.fx.Node | None = None


def schema_name(op: torch._ops.OpOverload) -> str:
    """ "aten::add.Tensor" for aten.add.Tensor; no suffix for .default."""
    name = op._schema.name
    overload = op._schema.overload_name
    return f"{name}.{overload}" if overload else name


@dataclass
class RegionIR:
    """The arguments of torch_fl._C.graph_compile, and what they mean."""

    device: int
    values: list[tuple[int, torch.dtype, list[int], list[int]]]
    nodes: list[tuple[str, list[tuple[str, Any]], list[int]]]
    inputs: list[int]
    outputs: list[int]
    input_nodes: list[torch.fx.Node]
    output_nodes: list[torch.fx.Node]
    region_nodes: list[torch.fx.Node]


def _encode(arg: Any, ref: dict[torch.fx.Node, int], device: torch.device) -> tuple[str, Any]:
    if isinstance(arg, torch.fx.Node):
        return ("ref", ref[arg])
    if arg is None:
        return ("none", None)
    if isinstance(arg, bool):
        return ("bool", arg)
    if isinstance(arg, int):
        return ("int", arg)
    if isinstance(arg, float):
        return ("double", arg)
    if isinstance(arg, str):
        return ("str", arg)
    if isinstance(arg, torch.dtype):
        return ("dtype", arg)
    if isinstance(arg, torch.device):
        if arg.type != device.type:
            raise UnsupportedArgument(f"device {arg} differs from the region's {device}")
        return ("device", device.index if arg.index is None else arg.index)
    if isinstance(arg, torch.layout):
        if arg != torch.strided:
            raise UnsupportedArgument(f"layout {arg}")
        return ("layout", 0)
    if isinstance(arg, torch.memory_format):
        if arg not in _MEMORY_FORMATS:
            raise UnsupportedArgument(f"memory format {arg}")
        return ("memory_format", _MEMORY_FORMATS[arg])
    if isinstance(arg, (list, tuple)):
        if all(isinstance(x, bool) for x in arg) and arg:
            return ("bools", list(arg))
        if all(isinstance(x, int) and not isinstance(x, bool) for x in arg):
            return ("ints", list(arg))
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in arg):
            return ("doubles", [float(x) for x in arg])
    raise UnsupportedArgument(f"argument {arg!r} of type {type(arg).__name__}")


def _schema_args(node: torch.fx.Node) -> list[Any]:
    """Every schema argument of `node`, positional and keyword, defaults filled."""
    op = node.target
    assert isinstance(op, torch._ops.OpOverload)
    out: list[Any] = []
    for i, arg in enumerate(op._schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            out.append(node.args[i])
        elif arg.name in node.kwargs:
            out.append(node.kwargs[arg.name])
        elif arg.has_default_value():
            out.append(arg.default_value)
        else:
            out.append(None)
    return out


def build_region_ir(region: Region) -> RegionIR:
    """The IR for `region`. Raises UnsupportedArgument (with the node in
    `.node`) for an argument the IR cannot carry."""
    ref: dict[torch.fx.Node, int] = {}
    values: list[tuple[int, torch.dtype, list[int], list[int]]] = []

    def add_value(node: torch.fx.Node, kind: int) -> int:
        t = tensor_val(node)
        assert t is not None
        ref[node] = len(values)
        values.append((kind, t.dtype, list(t.shape), list(t.stride())))
        return ref[node]

    input_nodes = region.inputs()
    output_nodes = region.outputs()
    outs = set(output_nodes)
    inputs = [add_value(n, _INPUT) for n in input_nodes]
    nodes: list[tuple[str, list[tuple[str, Any]], list[int]]] = []
    for n in region.nodes:
        args = []
        try:
            for a in _schema_args(n):
                args.append(_encode(a, ref, region.device))
        except UnsupportedArgument as exc:
            exc.node = n
            raise
        out = add_value(n, _OUTPUT if n in outs else _INTERMEDIATE)
        nodes.append((schema_name(n.target), args, [out]))  # type: ignore[arg-type]
    outputs = [ref[n] for n in output_nodes]
    return RegionIR(
        device=region.device.index or 0,
        values=values,
        nodes=nodes,
        inputs=inputs,
        outputs=outputs,
        input_nodes=input_nodes,
        output_nodes=output_nodes,
        region_nodes=list(region.nodes),
    )
