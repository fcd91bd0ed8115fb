"""Which nodes of an ATen graph are elementwise, and how they group into
fused regions.

A region is a set of elementwise nodes on one device whose outputs all have
the same shape (inputs may broadcast to it). Regions are convex — no path
leaves a region and comes back into it — so each one can run as a single
step between the steps around it.

A region runs once all its inputs exist, so fusing extends the lifetime of
every input produced after the region's first node ("late" inputs) to the
region's end. A sum of per-step gradients (an unrolled RNN's backward) fused
whole would keep every term alive at once; the late inputs of a region are
therefore capped at the size of one region output (LATE_INPUT_OUTPUTS).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx

__all__ = [
    "Ancestry",
    "Region",
    "device_of",
    "fusable",
    "group_regions",
    "is_getitem",
    "static_shape",
    "tensor_val",
]

aten = torch.ops.aten

# Elementwise ops PyTorch does not tag pointwise but that are elementwise
# whenever they keep the device (dtype conversion, copies).
_EXTRA_ELEMENTWISE: frozenset[torch._ops.OpOverload] = frozenset(
    {
        aten._to_copy.default,
        aten.clone.default,
        aten.where.self,
        aten.masked_fill.Scalar,
        aten.threshold_backward.default,
        aten.gelu_backward.default,
        aten.silu_backward.default,
        aten.sigmoid_backward.default,
        aten.tanh_backward.default,
    }
)


def tensor_val(node: torch.fx.Node) -> torch.Tensor | None:
    """The example tensor (FakeTensor) a node produces, when it produces one."""
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def static_shape(t: torch.Tensor) -> bool:
    """True when sizes, strides and offset are plain integers."""
    return all(type(s) is int for s in (*t.shape, *t.stride())) and type(
        t.storage_offset()
    ) is int


# Bytes of late inputs a region may hold, in multiples of one region output.
LATE_INPUT_OUTPUTS = 1


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def device_of(t: torch.Tensor) -> torch.device:
    return t.device


def _is_dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: some permutation of the dims is contiguous."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    if len(shape) > len(target):
        return False
    for s, t in zip(reversed(shape), reversed(target)):
        if s != 1 and s != t:
            return False
    return True


def _flat_args(node: torch.fx.Node) -> Iterable[object]:
    for a in (*node.args, *node.kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


def fusable(node: torch.fx.Node, device_type: str) -> bool:
    """Whether `node` is an elementwise op a fused region may hold: one dense
    tensor output of static shape on a `device_type` device, tensor inputs on
    the same device that broadcast to it, no mutation, no randomness."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    op = node.target
    tags = op.tags
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if torch.Tag.pointwise not in tags and op not in _EXTRA_ELEMENTWISE:
        return False
    schema = op._schema
    if schema.is_mutable or len(schema.returns) != 1:
        return False
    out = tensor_val(node)
    if out is None or out.device.type != device_type or not static_shape(out):
        return False
    if out.is_complex() or not _is_dense(out):
        return False
    if op is aten._to_copy.default:
        dev = node.kwargs.get("device")
        if dev is not None and torch.device(dev) != out.device:
            return False
        if node.kwargs.get("layout") not in (None, torch.strided):
            return False
    for a in _flat_args(node):
        if isinstance(a, torch.fx.Node):
            t = tensor_val(a)
            if t is None or t.device != out.device or not static_shape(t):
                return False
            if t.is_complex() or not _broadcasts_to(tuple(t.shape), tuple(out.shape)):
                return False
        elif isinstance(a, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
            return False
    return True


@dataclass
class Region:
    """Elementwise nodes fused into one step, in graph order."""

    nodes: list[torch.fx.Node]
    shape: tuple[int, ...]
    device: torch.device
    mask: int = 0  # bit i set for the node at graph position i
    members: set[torch.fx.Node] = field(default_factory=set)

    def inputs(self) -> list[torch.fx.Node]:
        """Values from outside the region that its nodes read, first use first."""
        seen: dict[torch.fx.Node, None] = {}
        for n in self.nodes:
            for a in _flat_args(n):
                if isinstance(a, torch.fx.Node) and a not in self.members:
                    seen.setdefault(a, None)
        return list(seen)

    def outputs(self) -> list[torch.fx.Node]:
        """Nodes whose values are read outside the region (or returned)."""
        return [n for n in self.nodes if any(u not in self.members for u in n.users)]


def _late_input_bytes(members: set[torch.fx.Node], index: dict[torch.fx.Node, int]) -> int:
    """Bytes of the values from outside `members` that they read and that
    are produced after the first member (in graph order)."""
    first = min(index[m] for m in members)
    seen: set[torch.fx.Node] = set()
    total = 0
    for m in members:
        for a in m.all_input_nodes:
            if a in members or a in seen or index[a] < first:
                continue
            seen.add(a)
            t = tensor_val(a)
            if t is not None:
                total += _nbytes(t)
    return total


class Ancestry:
    """Ancestor bitsets over the graph's nodes, for convexity checks."""

    def __init__(self, nodes: Sequence[torch.fx.Node]) -> None:
        self.index = {n: i for i, n in enumerate(nodes)}
        self.anc: dict[torch.fx.Node, int] = {}
        for n in nodes:
            bits = 0
            for a in n.all_input_nodes:
                bits |= self.anc[a] | (1 << self.index[a])
            self.anc[n] = bits

    def convex(self, members: set[torch.fx.Node], mask: int) -> bool:
        # A path that leaves the set and re-enters it enters through an
        # input from outside that itself descends from the set.
        for m in members:
            for a in m.all_input_nodes:
                if a not in members and self.anc[a] & mask:
                    return False
        return True


def group_regions(
    nodes: Sequence[torch.fx.Node],
    eligible: set[torch.fx.Node],
    min_size: int = 2,
    ancestry: Ancestry | None = None,
) -> list[Region]:
    """Greedy producer-consumer grouping of eligible nodes into convex
    regions of one shape and device. `nodes` is the graph in topological
    order; regions come back in graph order of their first node."""
    ancestry = ancestry or Ancestry(nodes)
    region_of: dict[torch.fx.Node, Region] = {}
    regions: list[Region] = []
    for n in nodes:
        if n not in eligible:
            continue
        out = tensor_val(n)
        assert out is not None
        shape = tuple(out.shape)
        bit = 1 << ancestry.index[n]
        late_budget = LATE_INPUT_OUTPUTS * _nbytes(out)
        candidates: list[Region] = []
        for a in n.all_input_nodes:
            r = region_of.get(a)
            if r is not None and r.shape == shape and r.device == out.device and r not in candidates:
                candidates.append(r)
        joined: Region | None = None
        # Merge with as many producer regions as convexity allows.
        for r in candidates:
            if joined is None:
                members = r.members | {n}
                mask = r.mask | bit
                if ancestry.convex(members, mask) and _late_input_bytes(
                    members, ancestry.index
                ) <= late_budget:
                    r.nodes.append(n)
                    r.members = members
                    r.mask = mask
                    joined = r
            else:
                members = joined.members | r.members
                mask = joined.mask | r.mask
                if ancestry.convex(members, mask) and _late_input_bytes(
                    members, ancestry.index
                ) <= late_budget:
                    joined.members = members
                    joined.mask = mask
                    joined.nodes.extend(r.nodes)
                    for m in r.nodes:
                        region_of[m] = joined
                    regions.remove(r)
        if joined is None:
            joined = Region(nodes=[n], shape=shape, device=out.device, mask=bit, members={n})
            regions.append(joined)
        region_of[n] = joined
    for r in regions:
        r.nodes.sort(key=ancestry.index.__getitem__)
    regions = [r for r in regions if len(r.nodes) >= min_size]
    regions.sort(key=lambda r: ancestry.index[r.nodes[0]])
    return regions


def is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem
