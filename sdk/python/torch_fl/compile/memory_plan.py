"""Liveness-based memory planning over a schedule of steps.

Each value a step produces belongs to a storage (views share their base's).
A storage the executor may place itself — its producer can write into given
memory, and it is neither a graph input nor reachable from a graph output —
gets a slot in a planned buffer. Storages whose lifetimes do not overlap
share a buffer; each buffer is allocated once per run from the device's
caching allocator, when its first storage is born, and released after its
last storage dies. Every other value is released after its last use.

Modes (option ``memory_planning``):
  "reuse"     the above (default)
  "liveness"  no planned buffers; values are released after their last use
  "none"      no liveness at all: every value lives until the graph returns
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from torch_fl.compile.fusion import tensor_val

__all__ = ["BufferSpec", "MemoryPlan", "PlannedValue", "Step", "plan_memory"]

MODES = ("reuse", "liveness", "none")
_ALIGN = 512


@dataclass
class Step:
    """One unit of the schedule: an eager node or a fused region."""

    kind: str  # "eager" | "region"
    nodes: list[torch.fx.Node]
    defs: list[torch.fx.Node]  # values visible after the step
    uses: list[torch.fx.Node]  # values the step reads
    plannable: list[torch.fx.Node]  # defs the step can write into given memory


@dataclass
class BufferSpec:
    device: torch.device
    nbytes: int


@dataclass
class PlannedValue:
    buffer: int
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int  # elements of dtype from the buffer's start


@dataclass
class MemoryPlan:
    mode: str
    buffers: list[BufferSpec] = field(default_factory=list)
    values: dict[torch.fx.Node, PlannedValue] = field(default_factory=dict)
    alloc_before: dict[int, list[int]] = field(default_factory=dict)  # step -> buffers
    free_after: dict[int, list[int]] = field(default_factory=dict)  # step -> buffers
    release_after: dict[int, list[torch.fx.Node]] = field(default_factory=dict)
    planned_bytes: int = 0  # sum of buffer sizes
    unplanned_bytes: int = 0  # sum of the storages the buffers hold

    def summary(self) -> str:
        if self.mode != "reuse":
            return f"memory plan: {self.mode} (no planned buffers)"
        return (
            f"memory plan: {len(self.values)} intermediates in {len(self.buffers)} buffers, "
            f"{_mib(self.planned_bytes)} instead of {_mib(self.unplanned_bytes)}"
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _storage_key(t: torch.Tensor) -> StorageWeakRef | None:
    try:
        return StorageWeakRef(t.untyped_storage())
    except (NotImplementedError, RuntimeError):
        return None


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def plan_memory(
    steps: Sequence[Step],
    graph_inputs: Sequence[torch.fx.Node],
    graph_outputs: Sequence[torch.fx.Node],
    mode: str,
    device_type: str,
) -> MemoryPlan:
    if mode not in MODES:
        raise ValueError(f"memory_planning must be one of {', '.join(MODES)}, got {mode!r}")
    plan = MemoryPlan(mode=mode)
    if mode == "none":
        return plan

    outputs = set(graph_outputs)
    last_use: dict[torch.fx.Node, int] = {}
    def_step: dict[torch.fx.Node, int] = {}
    for i, step in enumerate(steps):
        for v in step.defs:
            def_step[v] = i
            last_use.setdefault(v, i)
        for v in step.uses:
            last_use[v] = i
    for v in graph_inputs:
        last_use.setdefault(v, -1)
    for v, i in last_use.items():
        if v not in outputs and i >= 0:
            plan.release_after.setdefault(i, []).append(v)
    # Inputs nothing reads are dropped at the start.
    unused = [v for v, i in last_use.items() if i < 0 and v not in outputs]
    if unused:
        plan.release_after.setdefault(-1, []).extend(unused)
    if mode == "liveness":
        return plan

    # Storage groups: every value sharing a storage, its lifetime, and
    # whether the executor may place it.
    groups: dict[StorageWeakRef, list[torch.fx.Node]] = {}
    key_of: dict[torch.fx.Node, StorageWeakRef] = {}
    for v in (*graph_inputs, *def_step):
        t = tensor_val(v)
        if t is None:
            continue
        key = _storage_key(t)
        if key is None:
            continue
        key_of[v] = key
        groups.setdefault(key, []).append(v)
    plannable = {v for s in steps for v in s.plannable}
    blocked: set[StorageWeakRef] = set()
    for v in (*graph_inputs, *outputs):
        if v in key_of:
            blocked.add(key_of[v])
    # Values of tuple-returning nodes (their getitems) are placed by the op.
    candidates: list[tuple[int, int, torch.fx.Node, int]] = []  # (birth, death, creator, nbytes)
    for key, members in groups.items():
        if key in blocked:
            continue
        creator = min(members, key=lambda m: def_step.get(m, -1))
        if creator not in plannable:
            continue
        t = tensor_val(creator)
        assert t is not None
        if t.device.type != device_type:
            continue
        nbytes = int(t.untyped_storage().nbytes())
        if nbytes == 0:
            continue
        birth = def_step[creator]
        death = max(last_use.get(m, def_step.get(m, birth)) for m in members)
        candidates.append((birth, death, creator, nbytes))

    # Walk the schedule: at a birth take the best-fitting free buffer of the
    # device (growing the largest free one when none fits), at a death give
    # it back. Buffer sizes are final only after the walk.
    candidates.sort(key=lambda c: (c[0], -c[3]))
    free: list[int] = []
    buffer_span: list[list[int]] = []  # [first birth, last death]
    dies_at: dict[int, list[int]] = {}
    by_birth: dict[int, list[tuple[int, int, torch.fx.Node, int]]] = {}
    for c in candidates:
        by_birth.setdefault(c[0], []).append(c)
    for i in range(len(steps)):
        for birth, death, creator, nbytes in by_birth.get(i, ()):
            t = tensor_val(creator)
            assert t is not None
            need = _aligned(nbytes)
            same_device = [b for b in free if plan.buffers[b].device == t.device]
            fits = [b for b in same_device if plan.buffers[b].nbytes >= need]
            if fits:
                b = min(fits, key=lambda b: plan.buffers[b].nbytes)
            elif same_device:
                b = max(same_device, key=lambda b: plan.buffers[b].nbytes)
                plan.buffers[b].nbytes = need
            else:
                b = len(plan.buffers)
                plan.buffers.append(BufferSpec(device=t.device, nbytes=need))
                buffer_span.append([birth, death])
            if b in free:
                free.remove(b)
            buffer_span[b][1] = max(buffer_span[b][1], death)
            plan.values[creator] = PlannedValue(
                buffer=b,
                dtype=t.dtype,
                size=tuple(int(s) for s in t.shape),
                stride=tuple(int(s) for s in t.stride()),
                storage_offset=int(t.storage_offset()),
            )
            plan.unplanned_bytes += nbytes
            dies_at.setdefault(death, []).append(b)
        free.extend(dies_at.pop(i, ()))
    for b, (first, last) in enumerate(buffer_span):
        plan.alloc_before.setdefault(first, []).append(b)
        plan.free_after.setdefault(last, []).append(b)
    plan.planned_bytes = sum(b.nbytes for b in plan.buffers)
    return plan
