"""The torch.compile backend "torchfl".

Dynamo captures a graph; AOTAutograd turns it into ATen forward/backward
(or inference) graphs; each of those goes through compile_aten_graph:
dead-code elimination, elementwise fusion into regions offered to the
plugin's graph compiler, scheduling, memory planning, and code generation
of one function that runs the result ("mixed execution": accepted regions
on the plugin's executables, every other op eagerly through the bridge).

Graphs with symbolic shapes are specialized per concrete shape (a bounded
number of times) and otherwise run eagerly, with the reason logged.
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.fx

from torch_fl.compile.decompositions import decomposition_table
from torch_fl.compile.executor import generate, out_overload
from torch_fl.compile.fusion import static_shape, tensor_val
from torch_fl.compile.memory_plan import MODES, plan_memory
from torch_fl.compile.passes import (
    RegionReport,
    drop_detaches,
    eliminate_dead_code,
    has_device_kernel,
    in_place_updates,
    op_counts,
    partition,
    schedule,
    unread_running_stats,
)

__all__ = ["CompileOptions", "GraphReport", "clear_reports", "reports", "torchfl_backend"]

log = logging.getLogger("torch_fl.compile")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def _configure_logging() -> None:
    value = os.environ.get("TORCH_FL_LOG", "").strip().lower()
    if not value:
        return
    level = _LEVELS.get(value)
    if level is None:
        log.warning("TORCH_FL_LOG=%r is not one of %s; ignored", value, ", ".join(_LEVELS))
        return
    log.setLevel(level)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        log.addHandler(handler)


_configure_logging()


@dataclass(frozen=True)
class CompileOptions:
    """``torch.compile(model, backend="torchfl", options={...})``."""

    memory_planning: str = "reuse"  # "reuse" | "liveness" | "none" (see memory_plan)
    fusion: bool = True  # group elementwise chains into regions
    graph_compiler: bool = True  # offer regions to the plugin's graph compiler
    dynamic_shapes: str = "specialize"  # "specialize" per concrete shape | "eager"
    max_specializations: int = 8  # concrete shapes per dynamic graph

    @staticmethod
    def from_dict(options: dict[str, Any] | None) -> CompileOptions:
        options = dict(options or {})
        known = {f.name for f in fields(CompileOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"torch.compile(backend='torchfl'): unknown option(s) {', '.join(unknown)}; "
                f"valid options are {', '.join(sorted(known))}"
            )
        opts = CompileOptions(**options)
        if opts.memory_planning not in MODES:
            raise ValueError(
                f"torch.compile(backend='torchfl'): memory_planning must be one of "
                f"{', '.join(MODES)}, got {opts.memory_planning!r}"
            )
        if opts.dynamic_shapes not in ("specialize", "eager"):
            raise ValueError(
                "torch.compile(backend='torchfl'): dynamic_shapes must be 'specialize' or "
                f"'eager', got {opts.dynamic_shapes!r}"
            )
        return opts


@dataclass
class GraphReport:
    """What compiling one ATen graph did (torch_fl.compile.reports())."""

    name: str
    kind: str  # "forward" | "backward" | "inference"
    nodes: int
    dead_code_removed: int = 0
    updates_in_place: int = 0  # input updates written in place instead of copied in (in_place_updates)
    detaches_removed: int = 0  # read through to their input (drop_detaches)
    regions: list[RegionReport] = field(default_factory=list)
    eager_ops: dict[str, int] = field(default_factory=dict)
    memory: str = ""
    planned_bytes: int = 0
    unplanned_bytes: int = 0
    fallback_reason: str = ""  # set when the whole graph runs eagerly
    source: str = ""

    @property
    def accepted_regions(self) -> list[RegionReport]:
        return [r for r in self.regions if r.accepted]

    @property
    def declined_regions(self) -> list[RegionReport]:
        return [r for r in self.regions if not r.accepted]

    def describe(self) -> str:
        head = (f"{self.name} ({self.kind}): {self.nodes} nodes, "
                f"{self.dead_code_removed} removed as dead code, "
                f"{self.updates_in_place} input updates written in place, "
                f"{self.detaches_removed} detaches read through")
        lines = [head]
        if self.fallback_reason:
            lines.append(f"  runs eagerly: {self.fallback_reason}")
            return "\n".join(lines)
        for i, r in enumerate(self.regions):
            lines.append("  " + r.line(i))
        total = sum(self.eager_ops.values())
        ops = ", ".join(f"{op} x{c}" for op, c in sorted(self.eager_ops.items()))
        lines.append(f"  eager: {total} ops: {ops}")
        lines.append(f"  {self.memory}")
        return "\n".join(lines)


_reports: collections.deque[GraphReport] = collections.deque(maxlen=256)
_graph_ids = itertools.count()


def reports() -> list[GraphReport]:
    """Reports of the graphs compiled in this process, oldest first (the
    last 256)."""
    return list(_reports)


def clear_reports() -> None:
    _reports.clear()


def _device_type() -> str | None:
    from torch_fl import _C

    if not _C.has_plugin():
        return None
    return torch._C._get_privateuse1_backend_name()


def _boxed_eager(gm: torch.fx.GraphModule) -> Callable[[list[Any]], Any]:
    def run(args: list[Any]) -> Any:
        flat = list(args)
        args.clear()
        return gm(*flat)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _symbolic(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else (val,)
    for v in vals:
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(v, torch.Tensor) and not static_shape(v):
            return True
    return False


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: CompileOptions,
    kind: str,
) -> Callable[[list[Any]], Any]:
    """Compiles one AOTAutograd graph into a boxed callable."""
    name = f"{kind}_graph_{next(_graph_ids)}"
    graph = gm.graph
    report = GraphReport(name=name, kind=kind, nodes=len(graph.nodes))
    _reports.append(report)
    # Integer inputs (sizes specialized to plain ints) carry no example value.
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for n, example in zip(placeholders, example_inputs):
        if "val" not in n.meta and not isinstance(example, torch.Tensor):
            n.meta["val"] = example
    missing = [n.name for n in graph.nodes
               if n.op not in ("output", "get_attr") and "val" not in n.meta]
    symbolic = [n.name for n in graph.nodes if _symbolic(n)]
    if missing or symbolic:
        if symbolic:
            report.fallback_reason = f"symbolic shapes ({', '.join(symbolic[:5])})"
        else:
            report.fallback_reason = f"nodes without example values ({', '.join(missing[:5])})"
        log.info("%s runs eagerly: %s", name, report.fallback_reason)
        return _boxed_eager(gm)
    for n in graph.nodes:
        if n.op == "get_attr":
            n.meta["torch_fl_constant"] = operator.attrgetter(n.target)(gm)

    device_type = _device_type()
    report.updates_in_place = in_place_updates(graph, device_type)
    report.detaches_removed = drop_detaches(graph)
    report.dead_code_removed = eliminate_dead_code(graph)
    nodes = list(graph.nodes)
    part = partition(nodes, device_type, options.fusion, options.graph_compiler)
    report.regions = part.reports

    out_overloads: dict[torch.fx.Node, tuple[torch._ops.OpOverload, str]] = {}
    if device_type is not None and options.memory_planning == "reuse":
        for n in nodes:
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                continue
            t = tensor_val(n)
            if t is None or t.device.type != device_type:
                continue
            found = out_overload(n.target)
            # Only where the device writes into `out` itself: composite out=
            # kernels compute into a temporary and copy, which costs memory.
            if found is not None and has_device_kernel(found[0]):
                out_overloads[n] = found
    steps, executables = schedule(nodes, part, set(out_overloads))
    placeholders = [n for n in nodes if n.op == "placeholder"]
    (output_node,) = [n for n in nodes if n.op == "output"]
    graph_outputs = list(output_node.all_input_nodes)
    plan = plan_memory(steps, placeholders, graph_outputs, options.memory_planning,
                       device_type or "")
    report.eager_ops = dict(op_counts(steps))
    report.memory = plan.summary()
    report.planned_bytes = plan.planned_bytes
    report.unplanned_bytes = plan.unplanned_bytes
    compiled = generate(name, placeholders, steps, executables, plan, output_node.args[0],
                        out_overloads)
    report.source = compiled.source
    if log.isEnabledFor(logging.DEBUG):
        log.debug("partition of %s", report.describe())
    return compiled


def _aot_backend(options: CompileOptions) -> Callable[..., Any]:
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def forward(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return compile_aten_graph(gm, example_inputs, options, "forward")

    def backward(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return compile_aten_graph(gm, example_inputs, options, "backward")

    def inference(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return compile_aten_graph(gm, example_inputs, options, "inference")

    def split(joint: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
        if unread_running_stats(joint.graph):
            joint.recompile()
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    return aot_autograd(
        fw_compiler=forward,
        bw_compiler=backward,
        inference_compiler=inference,
        partition_fn=split,
        decompositions=decomposition_table() if options.fusion else {},
        # Mutations of inputs that need no gradient (batch norm's running
        # stats) stay in the graphs as copy_ nodes, where in_place_updates()
        # can make the op that computes the new value write it directly.
        keep_inference_input_mutations=True,
    )


def _is_dynamic(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> list[str]:
    found = []
    for i, x in enumerate(example_inputs):
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            found.append(f"input {i} is {x}")
        elif isinstance(x, torch.Tensor) and not static_shape(x):
            found.append(f"input {i} has shape {tuple(x.shape)}")
    return found


def _shape_key(args: Sequence[Any]) -> tuple[Any, ...]:
    key: list[Any] = [torch.is_grad_enabled()]
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad))
        else:
            key.append(a)
    return tuple(key)


class _ShapeSpecializer:
    """Runs a graph with symbolic shapes by compiling it again for each
    concrete shape it meets, up to options.max_specializations; beyond that,
    or when a specialization fails, the graph runs eagerly."""

    def __init__(self, gm: torch.fx.GraphModule, options: CompileOptions, why: str) -> None:
        self.gm = gm
        self.options = options
        self.why = why
        self.compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self.gave_up = ""

    def __call__(self, *args: Any) -> Any:
        if self.gave_up:
            return self.gm(*args)
        key = _shape_key(args)
        fn = self.compiled.get(key)
        if fn is None:
            if len(self.compiled) >= self.options.max_specializations:
                self.gave_up = (f"more than {self.options.max_specializations} shapes for a graph "
                                f"with dynamic shapes ({self.why})")
                log.warning("running eagerly from now on: %s", self.gave_up)
                return self.gm(*args)
            try:
                fn = _aot_backend(self.options)(self.gm, list(args))
            except Exception as exc:  # noqa: BLE001 - specializing is an optimization, never fatal
                self.gave_up = f"specializing to concrete shapes failed ({type(exc).__name__}: {exc})"
                log.warning("running eagerly: %s", self.gave_up)
                return self.gm(*args)
            self.compiled[key] = fn
            log.info("specialized a dynamic graph to shape #%d",
                     len(self.compiled))
        return fn(*args)


def torchfl_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: dict[str, Any] | None = None,
    **unused: Any,
) -> Callable[..., Any]:
    """The Dynamo backend: ``torch.compile(model, backend="torchfl")``."""
    opts = CompileOptions.from_dict(options)
    if unused.get("mode") not in (None, "default"):
        log.info("mode=%r has no effect on the torchfl backend", unused["mode"])
    dynamic = _is_dynamic(gm, example_inputs)
    if dynamic:
        why = "; ".join(dynamic[:3])
        if opts.dynamic_shapes == "eager":
            log.info("graph with dynamic shapes runs eagerly (%s)", why)
            return gm.forward
        log.info("graph with dynamic shapes (%s): specializing per shape", why)
        from torch._dynamo import disable

        return disable(_ShapeSpecializer(gm, opts, why), reason="torchfl shape specialization")
    return _aot_backend(opts)(gm, example_inputs)
