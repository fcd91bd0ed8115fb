"""The passes over one ATen graph: dead-code elimination, partitioning into
fused regions offered to the plugin's graph compiler, and scheduling."""

from __future__ import annotations

import heapq
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from torch_fl.compile.fusion import Ancestry, Region, fusable, group_regions, tensor_val
from torch_fl.compile.memory_plan import Step
from torch_fl.compile.region_ir import UnsupportedArgument, build_region_ir, schema_name

__all__ = [
    "Partition",
    "RegionReport",
    "eliminate_dead_code",
    "partition",
    "schedule",
]

# Offers per graph after declines split regions; beyond it the rest runs eagerly.
_MAX_OFFERS = 4096


def _has_side_effects(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return node.op != "get_attr"
    target = node.target
    if target is operator.getitem:
        return False
    if isinstance(target, torch._ops.OpOverload):
        # Random ops stay: dropping one would shift every later random number.
        return target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags
    return True


def eliminate_dead_code(graph: torch.fx.Graph) -> int:
    """Removes nodes whose values nothing uses and that have no effect.
    Returns how many were removed."""
    removed = 0
    for node in reversed(list(graph.nodes)):
        if node.op in ("placeholder", "output") or node.users or _has_side_effects(node):
            continue
        graph.erase_node(node)
        removed += 1
    return removed


@dataclass
class RegionReport:
    ops: list[str]
    shape: tuple[int, ...]
    dtypes: list[str]
    accepted: bool
    reason: str = ""

    def line(self, index: int) -> str:
        where = "plugin" if self.accepted else f"eager ({self.reason})"
        ops = ", ".join(self.ops)
        return (f"region {index}: {len(self.ops)} ops -> {where}; shape {list(self.shape)} "
                f"{'/'.join(self.dtypes)}: {ops}")


@dataclass
class Partition:
    accepted: list[tuple[Region, Any, list[torch.fx.Node], list[torch.fx.Node]]] = field(
        default_factory=list
    )  # (region, executable, input nodes, output nodes)
    reports: list[RegionReport] = field(default_factory=list)
    note: str = ""


def _report(region: Region, accepted: bool, reason: str = "") -> RegionReport:
    dtypes = sorted({str(tensor_val(n).dtype).replace("torch.", "") for n in region.nodes})  # type: ignore[union-attr]
    return RegionReport(
        ops=[schema_name(n.target) for n in region.nodes],  # type: ignore[arg-type]
        shape=region.shape,
        dtypes=dtypes,
        accepted=accepted,
        reason=reason,
    )


def partition(
    nodes: list[torch.fx.Node],
    device_type: str | None,
    use_fusion: bool,
    use_graph_compiler: bool,
) -> Partition:
    """Groups elementwise nodes into regions and offers each to the plugin.
    A region declined because of one node is offered again without it."""
    result = Partition()
    if device_type is None or not use_fusion:
        result.note = "fusion off" if device_type is not None else "no device plugin"
        return result
    eligible = {n for n in nodes if fusable(n, device_type)}
    if not eligible:
        return result
    ancestry = Ancestry(nodes)
    pending = group_regions(nodes, eligible, ancestry=ancestry)
    graph_ok = False
    if use_graph_compiler:
        from torch_fl import _C

        graph_ok = bool(_C.graph_available())
    if not graph_ok:
        why = "graph compiler off" if not use_graph_compiler else "the plugin has no graph compiler"
        result.reports = [_report(r, False, why) for r in pending]
        result.note = why
        return result
    from torch_fl import _C

    offers = 0
    while pending:
        region = pending.pop(0)
        offers += 1
        if offers > _MAX_OFFERS:
            result.reports.append(_report(region, False, "too many offers for one graph"))
            continue
        try:
            ir = build_region_ir(region)
        except UnsupportedArgument as exc:
            bad = exc.node
            result.reports.append(
                RegionReport([schema_name(bad.target)], region.shape, [], False,  # type: ignore[arg-type]
                             f"not expressible in the graph IR: {exc}")
            )
            rest = set(region.nodes) - {bad}
            pending[0:0] = group_regions(nodes, rest, ancestry=ancestry)
            continue
        exe, reason, declined = _C.graph_compile(ir.device, ir.values, ir.nodes, ir.inputs,
                                                 ir.outputs)
        if exe is not None:
            result.accepted.append((region, exe, ir.input_nodes, ir.output_nodes))
            result.reports.append(_report(region, True))
        elif 0 <= declined < len(region.nodes):
            bad = region.nodes[declined]
            result.reports.append(
                RegionReport([schema_name(bad.target)], region.shape,  # type: ignore[arg-type]
                             [str(tensor_val(bad).dtype).replace("torch.", "")],  # type: ignore[union-attr]
                             False, f"declined: {reason}")
            )
            rest = set(region.nodes) - {bad}
            pending[0:0] = group_regions(nodes, rest, ancestry=ancestry)
        else:
            result.reports.append(_report(region, False, f"declined: {reason}"))
    return result


def schedule(
    nodes: list[torch.fx.Node],
    part: Partition,
    plannable: set[torch.fx.Node],
) -> tuple[list[Step], dict[int, Any]]:
    """Orders accepted regions and remaining nodes into steps (a topological
    order of the condensed graph, close to the original order). Returns the
    steps and, per region step index, its executable."""
    index = {n: i for i, n in enumerate(nodes)}
    unit_of: dict[torch.fx.Node, int] = {}
    units: list[Step] = []
    unit_exe: dict[int, Any] = {}
    for region, exe, ins, outs in part.accepted:
        u = len(units)
        units.append(Step("region", list(region.nodes), list(outs), list(ins), list(outs)))
        unit_exe[u] = exe
        for n in region.nodes:
            unit_of[n] = u
    for n in nodes:
        if n.op in ("placeholder", "output") or n in unit_of:
            continue
        unit_of[n] = len(units)
        units.append(Step("eager", [n], [n], list(n.all_input_nodes),
                          [n] if n in plannable else []))
    deps: list[set[int]] = [set() for _ in units]
    users: list[set[int]] = [set() for _ in units]
    for u, step in enumerate(units):
        for n in step.nodes:
            for a in n.all_input_nodes:
                p = unit_of.get(a)
                if p is not None and p != u:
                    deps[u].add(p)
                    users[p].add(u)
    waiting = [len(d) for d in deps]
    ready = [(min(index[n] for n in units[u].nodes), u) for u in range(len(units)) if not waiting[u]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in users[u]:
            waiting[v] -= 1
            if waiting[v] == 0:
                heapq.heappush(ready, (min(index[n] for n in units[v].nodes), v))
    if len(order) != len(units):
        raise RuntimeError("torch_fl.compile: the fused regions form a cycle (a region is not convex)")
    steps = [units[u] for u in order]
    exes = {i: unit_exe[u] for i, u in enumerate(order) if u in unit_exe}
    return steps, exes


def op_counts(steps: list[Step]) -> Counter[str]:
    c: Counter[str] = Counter()
    for s in steps:
        if s.kind != "eager":
            continue
        n = s.nodes[0]
        if isinstance(n.target, torch._ops.OpOverload):
            c[schema_name(n.target)] += 1
    return c
