"""Liveness-based memory planning over a schedule of steps.

Each value a step produces belongs to a storage (views share their base's).
A storage the executor may place itself — its producer can write into given
memory, and it is neither a graph input nor reachable from a graph output —
gets a slot in a planned buffer. A buffer whose storage dies is handed to
the next storage born that fits it (at most twice over), as long as no step
in between allocates memory of its own; otherwise the buffer is released,
as liveness would release the storage, so an idle buffer never holds memory
another allocation could have used — planning never raises the peak above
"liveness". Each buffer is allocated once per run from the device's caching
allocator, when its first storage is born, and released after its last
storage dies. Every other value is released after its last use.

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


def _allocates(
    step: Step,
    key_of: dict[torch.fx.Node, StorageWeakRef],
    creator_of: dict[StorageWeakRef, torch.fx.Node],
    placed: dict[torch.fx.Node, PlannedValue],
) -> bool:
    """Whether `step` allocates a storage the plan does not place."""
    for v in step.defs:
        val = v.meta.get("val")
        if isinstance(val, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in val):
            return True  # a multi-output op allocates its outputs itself
        key = key_of.get(v)
        if key is not None and creator_of.get(key) is v and v not in placed:
            return True
        if key is None and isinstance(val, torch.Tensor):
            return True
    return False


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

    # Walk the schedule: a storage born takes the smallest handed-off buffer
    # of its device that fits it (and is at most twice its size), else a new
    # buffer; buffers whose storage died wait for the next birth only until a
    # step allocates memory the plan does not place.
    candidates.sort(key=lambda c: (c[0], -c[3]))
    by_birth: dict[int, list[tuple[int, int, torch.fx.Node, int]]] = {}
    for c in candidates:
        by_birth.setdefault(c[0], []).append(c)
    creator_of = {key: min(members, key=lambda m: def_step.get(m, -1))
                  for key, members in groups.items()}
    handed_off: list[int] = []
    buffer_span: list[list[int]] = []  # [first birth, last death]
    dies_at: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        for birth, death, creator, nbytes in by_birth.get(i, ()):
            t = tensor_val(creator)
            assert t is not None
            need = _aligned(nbytes)
            fits = [b for b in handed_off if plan.buffers[b].device == t.device
                    and need <= plan.buffers[b].nbytes <= 2 * need]
            if fits:
                b = min(fits, key=lambda b: plan.buffers[b].nbytes)
                handed_off.remove(b)
            else:
                b = len(plan.buffers)
                plan.buffers.append(BufferSpec(device=t.device, nbytes=need))
                buffer_span.append([birth, death])
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
        if _allocates(step, key_of, creator_of, plan.values):
            handed_off.clear()
        handed_off.extend(dies_at.pop(i, ()))
    for b, (first, last) in enumerate(buffer_span):
        plan.alloc_before.setdefault(first, []).append(b)
        plan.free_after.setdefault(last, []).append(b)
    plan.planned_bytes = sum(b.nbytes for b in plan.buffers)
    return plan
