"""Which of the plugin's kernels the failures point at.

Every failing test records the kernels (ATen schema names) of the device run that
showed the failure: the plugin's kernels that ran ("native"), the one that raised
("failed"), the ones a crashed or hung worker was in ("running"). A faulty kernel
shows up in the failures of every operator built on it, next to kernels that run
everywhere (copies). The ranking puts first the kernels that

1. raised, crashed or hung themselves, or whose own op_db entry fails (aten::mul.Tensor
   when `mul` fails; aten::gelu_backward when `nn.functional.gelu` does), then
2. appear in the most failing cases relative to how often they ran at all: the
   score is failing cases x (failing cases / cases it ran in), so a kernel in 30
   failures that ran in 30 cases outranks one in 30 failures that ran in 3000;
   copies come after the other kernels of their group, since they run everywhere.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from torch_fl_conformance import outcomes
from torch_fl_conformance.session import op_of, opinfo_case_of

__all__ = ["kernel_base", "rank_suspects"]

_FAILING = frozenset({outcomes.FAIL, outcomes.ERROR, outcomes.CRASH, outcomes.TIMEOUT,
                      outcomes.XFAIL})
_SUFFIXES = ("_backward_data", "_backward_input", "_backward_weight", "_backward", "_forward")
# Copies run in every test that touches the device: below any other kernel of the
# same rank (a broken copy fails the smoke level's bit-exact copy tests by name).
_DATA_MOVEMENT = frozenset({"copy", "copy_from", "copy_from_and_resize", "to_copy"})
_GENERIC = frozenset({"nn", "functional", "special", "linalg", "fft", "masked", "sparse",
                      "torch", "ops", "aten", "default"})


def kernel_base(schema: str) -> str:
    """'aten::gelu_backward.grad_input' -> 'gelu'; 'aten::_softmax' -> 'softmax'."""
    name = schema.split("::")[-1].split(".")[0].strip("_")
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.strip("_")


def _op_names(op: str) -> set[str]:
    """The names an op_db entry may go by in a kernel's schema name."""
    parts = [p for p in re.split(r"[.]", op) if p and p not in _GENERIC]
    names = set(parts) | {"_".join(parts)}
    names |= {p.removesuffix("_") for p in parts}
    return {n for n in names if n}


def _kernels(test: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(kernels the failing run used, kernels that raised, crashed or hung)."""
    k = (test.get("data") or {}).get("kernels") or {}
    direct = set(k.get("failed", [])) | set(k.get("running", []))
    return set(k.get("native", [])) | direct, direct


def _case(tid: str) -> str:
    parsed = opinfo_case_of(tid)
    return f"{parsed[0]}-{parsed[1]}" if parsed else tid


def rank_suspects(tests: list[dict[str, Any]], limit: int = 15) -> list[dict[str, Any]]:
    """The plugin's kernels ranked by how strongly the failures point at them."""
    ran_in: dict[str, set[str]] = defaultdict(set)
    for t in tests:
        data = (t.get("data") or {}).get("opinfo") or {}
        for k in data.get("kernels", []):
            ran_in[k].add(_case(t["id"]))
    failing_ops: set[str] = set()
    fail_cases: dict[str, set[str]] = defaultdict(set)
    examples: dict[str, list[str]] = defaultdict(list)
    direct: set[str] = set()
    for t in tests:
        if t["outcome"] not in _FAILING:
            continue
        op = op_of(t["id"])
        if op is not None:
            failing_ops.add(op)
        used, raised = _kernels(t)
        direct |= raised
        for k in used:
            fail_cases[k].add(_case(t["id"]))
            ran_in[k].add(_case(t["id"]))
            if len(examples[k]) < 3:
                examples[k].append(t["id"])
    own: dict[str, list[str]] = {
        k: sorted(op for op in failing_ops if kernel_base(k) in _op_names(op))
        for k in fail_cases}
    rows = []
    for k, cases in fail_cases.items():
        n, ran = len(cases), max(len(cases), len(ran_in[k]))
        rows.append({
            "kernel": k,
            "failing_cases": n,
            "ran_in_cases": ran,
            "score": round(n * n / ran, 3),
            "raised_or_hung": k in direct,
            "own_entry_fails": own[k][:5],
            "examples": examples[k],
        })
    rows.sort(key=lambda r: (not (r["raised_or_hung"] or r["own_entry_fails"]),
                             kernel_base(r["kernel"]) in _DATA_MOVEMENT and not r["raised_or_hung"],
                             -r["score"], r["kernel"]))
    return rows[:limit]
