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

The failures counted are those that say a kernel is wrong: MUST requirements', and
any in which a kernel raised, crashed or hung. A SHOULD finding such as "ran on the
CPU fallback" lists the kernels that ran beside the missing one, which are
innocent; it counts only when nothing else failed.

A blocker's bisection re-runs its one test with the plugin kernels it ran turned off
(TORCH_FL_DISABLE_KERNELS, which leaves them to the fallback chain): passing then
puts the fault in one of them, and halving the list finds which.
"""

from __future__ import annotations

import re
import shlex
from collections import defaultdict
from collections.abc import Collection
from typing import Any

from torch_fl_conformance import outcomes
from torch_fl_conformance.session import DEFAULT_SEED, DEFAULT_TIMEOUT, op_of, opinfo_case_of

__all__ = ["bisect_command", "bisect_kernels", "kernel_base", "rank_suspects"]

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


def _is_evidence(test: dict[str, Any]) -> bool:
    """A failure that says a kernel is wrong: a MUST requirement's, or one in which a
    kernel raised, crashed or hung. A SHOULD finding such as "ran on the CPU
    fallback" names the kernels that ran beside the missing one, which are innocent."""
    return test.get("strength", "MUST") == "MUST" or bool(_kernels(test)[1])


def rank_suspects(tests: list[dict[str, Any]], limit: int = 15) -> list[dict[str, Any]]:
    """The plugin's kernels ranked by how strongly the failures point at them: the
    failures that say a kernel is wrong (`_is_evidence`), or every failure when
    there is none of those."""
    ran_in: dict[str, set[str]] = defaultdict(set)
    for t in tests:
        data = (t.get("data") or {}).get("opinfo") or {}
        for k in data.get("kernels", []):
            ran_in[k].add(_case(t["id"]))
    failing = [t for t in tests if t["outcome"] in _FAILING]
    failing = [t for t in failing if _is_evidence(t)] or failing
    failing_ops: set[str] = set()
    fail_cases: dict[str, set[str]] = defaultdict(set)
    examples: dict[str, list[str]] = defaultdict(list)
    direct: set[str] = set()
    for t in failing:
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


def bisect_kernels(test: dict[str, Any], suspects: list[dict[str, Any]],
                   bridge_ops: Collection[str]) -> list[str]:
    """The plugin's kernels a failing test ran, most suspect first (those that raised,
    crashed or hung, then in the order of the run's ranking), as TORCH_FL_DISABLE_KERNELS
    takes them: without the operators the bridge serves itself and the plugin's copy
    kernel, which every device copy goes through and no variable turns off."""
    used, direct = _kernels(test)
    rank = {s["kernel"]: i for i, s in enumerate(suspects)}
    kernels = [k for k in used if k not in bridge_ops and k != "aten::copy_"]
    return sorted(kernels, key=lambda k: (k not in direct, rank.get(k, len(rank)),
                                          kernel_base(k) in _DATA_MOVEMENT, k))


def bisect_command(kernels: list[str], test_id: str, plugin: dict[str, Any],
                   options: dict[str, Any]) -> str:
    """A run of just `test_id` with `kernels` left to the fallback chain
    (TORCH_FL_DISABLE_KERNELS): it passes when the fault is in one of them, and
    halving the list finds which."""
    name = test_id.split("::", 1)[-1]
    args = ["torchfl-conformance", "run", "--plugin",
            f"{plugin['device_type']}={plugin['library']}", "--level", test_id.split("/", 1)[0]]
    op = op_of(test_id)
    if op:
        args += ["--ops", op]
    if options.get("samples"):
        args += ["--samples", str(options["samples"])]
    if options.get("seed", DEFAULT_SEED) != DEFAULT_SEED:
        args += ["--seed", str(options["seed"])]
    if options.get("timeout_s", DEFAULT_TIMEOUT) != DEFAULT_TIMEOUT:
        args += ["--timeout", f"{options['timeout_s']:g}"]
    args += ["--report", "conformance-bisect", "--", "-k", name]
    return f"TORCH_FL_DISABLE_KERNELS={shlex.quote(','.join(kernels))} {shlex.join(args)}"
