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
    "drop_detaches",
    "eliminate_dead_code",
    "has_device_kernel",
    "in_place_updates",
    "partition",
    "schedule",
    "unread_running_stats",
]

aten = torch.ops.aten

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


def unread_running_stats(graph: torch.fx.Graph) -> int:
    """Drops the running statistics from training-mode batch-norm backwards
    in a joint forward-backward graph, before it is partitioned.

    native_batch_norm_backward(..., running_mean, running_var, save_mean,
    save_invstd, train=True, ...) normalizes with the batch statistics it
    saved and never reads the running ones (the optional arguments exist for
    eval mode). Left in, they are values the backward takes from the forward:
    the forward then returns a copy of each updated statistic (the next
    forward updates the statistics in place) and AOTAutograd saves it, two
    copies and two saved tensors per batch norm and step. Returns how many
    backwards were rewritten."""
    rewritten = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not aten.native_batch_norm_backward.default:
            continue
        args = list(node.args)
        if len(args) < 8 or args[7] is not True or (args[3] is None and args[4] is None):
            continue
        args[3] = args[4] = None
        node.args = tuple(args)
        rewritten += 1
    return rewritten


def drop_detaches(graph: torch.fx.Graph) -> int:
    """Reads through detach(x) to x. AOTAutograd's graphs run without
    autograd, where detach only makes another view of all of x, and each
    one is a call through the dispatcher (the backward of a ResNet-18 has
    32, detaches of detaches of saved activations). A detach the graph
    returns stays: AOTAutograd tracked that output as its own tensor.
    Returns how many were removed."""
    removed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.detach.default:
            continue
        (src,) = node.args
        if not isinstance(src, torch.fx.Node) or any(u.op == "output" for u in node.users):
            continue
        node.replace_all_uses_with(src)
        graph.erase_node(node)
        removed += 1
    return removed


def _written_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes whose tensors `node` writes in place (its mutable arguments)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return []
    schema = node.target._schema
    if not schema.is_mutable:
        return []
    written = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, torch.fx.Node):
            written.append(value)
    return written


def has_device_kernel(op: torch._ops.OpOverload) -> bool:
    """Whether the plugin registered a kernel for op (not only a composite or
    the CPU fallback)."""
    from torch_fl import _C

    _C.install_deferred()  # the dispatcher's tables before the device's first use
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1")


def _in_place_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """add.Tensor -> add_.Tensor: the overload that writes its self argument
    and otherwise takes the same arguments; None when there is none."""
    packet = getattr(aten, op.overloadpacket.__name__ + "_", None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    if overload is None:
        return None
    want = [(a.name, str(a.type)) for a in op._schema.arguments]
    args = overload._schema.arguments
    if [(a.name, str(a.type)) for a in args] != want or not args or args[0].alias_info is None:
        return None
    return overload


def _same_layout(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    ta, tb = tensor_val(a), tensor_val(b)
    return (ta is not None and tb is not None and ta.dtype == tb.dtype and ta.shape == tb.shape
            and ta.stride() == tb.stride())


def in_place_updates(graph: torch.fx.Graph, device_type: str | None) -> int:
    """Input updates written where they are computed instead of copied in at
    the end: AOTAutograd keeps a graph input's mutation (batch norm's running
    stats, its batch counter) as copy_(input, new value). Where nothing else
    reads the input, the op that computes the new value writes the input
    itself:

    - _native_batch_norm_legit_functional and the copy_ of its new running
      mean and variance become _native_batch_norm_legit, which updates them;
    - copy_(x, op(x, ...)) becomes op_(x, ...) (the batch counter's add_),
      where x is only the op's self and nothing but the copy uses op's value.

    Only device ops the plugin runs natively are rewritten. Returns how many
    copy_ nodes were removed."""
    if device_type is None:
        return 0
    removed = 0
    copies = [n for n in graph.nodes
              if n.op == "call_function" and n.target is aten.copy_.default and not n.users
              and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"
              and isinstance(n.args[1], torch.fx.Node)]
    by_bn: dict[torch.fx.Node, dict[int, torch.fx.Node]] = {}
    for c in copies:
        dst, src = c.args[0], c.args[1]
        t = tensor_val(dst)
        if t is None or t.device.type != device_type or not _same_layout(dst, src):
            continue
        if src.target is operator.getitem:
            bn, k = src.args
            # The graph may also return the new stats (saved for the backward,
            # which takes them): it then returns a copy of the updated input,
            # as a saved input would be modified by the next forward.
            if (isinstance(bn, torch.fx.Node) and bn.target is aten._native_batch_norm_legit_functional.default
                    and k in (3, 4) and bn.args[5] is True and bn.args[k] is dst
                    and all(u is c or u.op == "output" for u in src.users)
                    and set(dst.users) <= {bn, c}):
                by_bn.setdefault(bn, {})[k] = c
            continue
        op = src.target
        if not isinstance(op, torch._ops.OpOverload) or not src.args or src.args[0] is not dst:
            continue
        # x is only the op's self: mul_(x, x) would read what it writes.
        others: list[torch.fx.Node] = []
        torch.fx.node.map_arg((src.args[1:], src.kwargs), others.append)
        if any(o is dst for o in others):
            continue
        # The new value is used by the copy alone: as x itself, a later read,
        # a returned or saved value would change with x's next update.
        inplace = _in_place_variant(op)
        if inplace is None or set(src.users) != {c} or set(dst.users) != {src, c} or not has_device_kernel(inplace):
            continue
        src.target = inplace
        graph.erase_node(c)
        removed += 1
    legit = aten._native_batch_norm_legit.default
    if not has_device_kernel(legit):
        return removed
    for bn, found in by_bn.items():
        if set(found) != {3, 4}:
            continue
        with graph.inserting_before(bn):
            new = graph.call_function(legit, bn.args, bn.kwargs)
        new.meta = dict(bn.meta)
        new.meta["val"] = tuple(bn.meta["val"][:3])
        for user in list(bn.users):
            if user.args[1] in (3, 4):
                continue
            user.args = (new, user.args[1])
        for k in (3, 4):
            c = found[k]
            getter, updated = c.args[1], c.args[0]
            graph.erase_node(c)
            if getter.users:
                with graph.inserting_after(new):
                    saved = graph.call_function(aten.clone.default, (updated,))
                saved.meta = dict(getter.meta)
                getter.replace_all_uses_with(saved)
            graph.erase_node(getter)
            removed += 1
        graph.erase_node(bn)
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

    def after(first: int, then: int) -> None:
        if first != then:
            deps[then].add(first)
            users[first].add(then)

    for u, step in enumerate(units):
        for n in step.nodes:
            for a in n.all_input_nodes:
                p = unit_of.get(a)
                if p is not None:
                    after(p, u)
    # A write into a tensor (an input's update) keeps its place among the
    # tensor's other readers and writers.
    for n in nodes:
        for target in _written_inputs(n):
            for other in target.users:
                if other is n or other not in unit_of:
                    continue
                if index[other] < index[n]:
                    after(unit_of[other], unit_of[n])
                else:
                    after(unit_of[n], unit_of[other])
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
