"""The suite against bugs: flemu emulating a faulty device (FLEMU_FAULT, see
reference_backend/README.md) must fail certification, through the requirement
that names that kind of defect, with the failing test naming the variant that
shows it and the report's suspects pointing at the faulty kernel. An unmodified
flemu passes the same slices: a check no buggy plugin can fail is not a check,
and one a correct plugin fails is not one either.

Each fault runs on a short slice (--ops, -k) in one worker; the clean run covers
the union of the slices once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_env, load_report, run_cli

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Fault:
    name: str
    ops: str  # --ops (the sweep's slice); "" runs no op_db case
    k: str  # -k of the slice
    requirement: str  # the requirement that names this kind of defect
    failing: tuple[str, ...]  # tests that must fail (id prefixes)
    kernel: str = ""  # the faulty kernel the suspects must rank first ("" none)
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 120.0  # --timeout
    outcomes: tuple[str, ...] = ("FAIL",)  # what the failing tests may show
    also: tuple[str, ...] = ()  # other requirements a failing test may belong to


OP = "L1/test_opinfo.py::test_op"
FAULTS = [
    Fault("add_ignores_alpha", "add", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[add-float32-output]",), "aten::add.Tensor"),
    Fault("mul_ignores_strides", "mul", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[mul-float32-noncontiguous]",), "aten::mul.Tensor"),
    Fault("exp_ignores_offset", "exp", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[exp-float32-offset]",), "aten::exp"),
    Fault("sub_broadcast_wrong", "sub", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[sub-float32-broadcast]",), "aten::sub.Tensor"),
    Fault("mul_out_ignored", "mul", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[mul-float32-out]",), "aten::mul.Tensor"),
    Fault("add_inplace_aliasing", "add", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[add-float32-inplace]",), "aten::add"),
    Fault("gelu_backward_scaled", "nn.functional.gelu",
          "test_opinfo or test_gradients and gelu", "TFL-OPS-003",
          (f"{OP}[nn.functional.gelu-float32-grad]",
           "L1/test_gradcheck.py::test_gradients[nn.functional.gelu-float64]",
           "L1/test_gradcheck.py::test_gradients[nn.functional.gelu-float32]"),
          "aten::gelu_backward", also=("TFL-GRAD-001", "TFL-GRAD-002")),
    Fault("softmax_backward_wrong", "softmax", "test_opinfo", "TFL-OPS-003",
          (f"{OP}[softmax-float32-grad]",), "aten::_softmax_backward_data"),
    Fault("fp64_computed_in_fp32", "exp", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[exp-float64-output]",), "aten::exp"),
    Fault("exp_low_precision", "exp", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[exp-float32-output]",), "aten::exp"),
    Fault("sum_fp16_accumulator", "sum", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[sum-float32-output]",), "aten::sum.dim_IntList"),
    Fault("mm_crash", "mm", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[mm-float32-output]",), "aten::mm", outcomes=("CRASH",)),
    Fault("mm_hang", "mm", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[mm-float32-output]", f"{OP}[mm-float64-output]"), "aten::mm",
          timeout=5.0, outcomes=("TIMEOUT", "BLOCKED")),
    Fault("event_early", "", "test_event_not_complete", "TFL-STREAM-005",
          ("L1/test_streams.py::test_event_not_complete_before_its_work",)),
    Fault("stream_sync_noop", "", "test_synchronize_waits", "TFL-STREAM-006",
          ("L1/test_streams.py::test_synchronize_waits_for_pending_work",)),
    Fault("free_leaks", "", "test_freed_memory", "TFL-MEM-008",
          ("L1/test_memory.py::test_freed_memory_returns_to_the_device",)),
    Fault("memory_overreport", "", "test_advertised_memory", "TFL-MEM-007",
          ("L1/test_memory.py::test_advertised_memory_can_be_allocated",),
          env={"FLEMU_MEMORY_BYTES": "1G"}),
    # One element past the end of a bridge-allocated output lands in the caching
    # allocator's slack; past an in-place self at an offset, it lands in the padding
    # the suite compares.
    Fault("oob_write", "nn.functional.relu", "test_opinfo", "TFL-OPS-002",
          (f"{OP}[nn.functional.relu-float32-inplace]",), "aten::relu",
          env={"FLEMU_CHECK_CONTRACTS": "1"}),
    Fault("uniform_range_wrong", "", "test_distributions", "TFL-RNG-004",
          ("L1/test_rng.py::test_distributions",), "aten::uniform_"),
    Fault("seed_ignored", "", "test_seeding", "TFL-RNG-001",
          ("L1/test_rng.py::test_seeding",)),
    Fault("peer_copy_corrupt", "", "test_cross_device or test_peer_copies", "TFL-MEM-005",
          ("L1/test_memory.py::test_cross_device", "L1/test_memory.py::test_peer_copies"),
          also=("TFL-MEM-009",)),
]
# What the clean run sets for the faults that need it (contract checking, a small
# device so the capacity check is quick): the clean slices pass under it too.
CLEAN_ENV = {"FLEMU_CHECK_CONTRACTS": "1", "FLEMU_MEMORY_BYTES": "1G"}


def _run(out: Path, ops: str, k: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    args = ["run", "--plugin", "flemu", "--level", "L1", "--report", str(out), "-j", "1",
            "--timeout", str(timeout)]
    if ops:
        args += ["--ops", ops]
    r = run_cli(*args, "--", "-k", k, env=cli_env(**env), timeout=600)
    assert r.returncode in (0, 1), f"exit status {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr}"
    return load_report(out)


def _outcomes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in report["tests"]}


def _matching(tests: dict[str, dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [t for tid, t in tests.items() if tid.startswith(prefix)]


def _is_kernel(name: str, expected: str) -> bool:
    """Whether `name` is a schema of the kernel `expected` names: flemu registers one
    kernel for an operator's functional, in-place and out= schemas (aten::mul.Tensor,
    aten::mul_.Tensor, aten::mul.out), and op statistics name the one that ran."""
    return name.split(".")[0].rstrip("_") == expected.split(".")[0].rstrip("_")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, flemu_library: str) -> dict[str, Any]:
    ops = ",".join(sorted({f.ops for f in FAULTS if f.ops}))
    k = " or ".join(f"({f.k})" for f in FAULTS)
    return _run(tmp_path_factory.mktemp("clean"), ops, k, CLEAN_ENV, 120.0)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_clean_flemu_passes_the_fault_slices(fault: Fault, clean: dict[str, Any]) -> None:
    tests = _outcomes(clean)
    for prefix in fault.failing:
        found = _matching(tests, prefix)
        assert found, f"the clean run has no test {prefix}"
        for t in found:
            assert t["outcome"] == "PASS", (
                f"unmodified flemu: {t['id']} is {t['outcome']}, not PASS: {t['message']}")
    status = {q["id"]: q["status"] for q in clean["requirements"]}
    assert status[fault.requirement] == "met", (fault.requirement, status[fault.requirement])


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_costs_the_level_through_its_requirement(
        fault: Fault, tmp_path: Path, flemu_library: str) -> None:
    report = _run(tmp_path, fault.ops, fault.k, {"FLEMU_FAULT": fault.name, **fault.env},
                  fault.timeout)
    tests = _outcomes(report)
    # (a) the level is refused, and (b) by the requirement that names the defect,
    # with the tests (variants) that show it failing.
    status = {q["id"]: q for q in report["requirements"]}
    req = status[fault.requirement]
    assert req["status"] == "not_met" and req["strength"] == "MUST", req
    why = " ".join(report["level"]["levels"]["L1"]["why"])
    assert f"{fault.requirement} not met" in why, why
    assert not report["level"]["levels"]["L1"]["met"]
    for prefix in fault.failing:
        found = _matching(tests, prefix)
        assert found, f"{fault.name}: no test {prefix} ran"
        for t in found:
            assert t["outcome"] in fault.outcomes, (
                f"{fault.name}: {t['id']} is {t['outcome']} ({t['message'][:300]}), "
                f"expected {'/'.join(fault.outcomes)}")
            assert t["requirement"] in (fault.requirement, *fault.also), t
    # (c) the suspects point at the faulty kernel, not only at composite ops.
    if fault.kernel:
        top = [s["kernel"] for s in report["suspects"][:2]]
        assert any(_is_kernel(k, fault.kernel) for k in top), (
            f"{fault.name}: suspects {top}, expected {fault.kernel} first "
            f"(all: {[s['kernel'] for s in report['suspects']]})")
        md = (tmp_path / "summary.md").read_text(encoding="utf-8")
        first = report["suspects"][0]["kernel"]
        assert "## Suspect kernels" in md and f"`{first}`" in md, md[:2000]


def test_one_hang_costs_one_time_limit(tmp_path: Path, flemu_library: str) -> None:
    report = _run(tmp_path, "mm", "test_opinfo", {"FLEMU_FAULT": "mm_hang"}, 5.0)
    got = {t["id"]: t for t in report["tests"]}
    hung = [t for t in got.values() if t["outcome"] == "TIMEOUT"]
    blocked = [t for t in got.values() if t["outcome"] == "BLOCKED"]
    assert len(hung) == 1, [(t["id"], t["outcome"]) for t in got.values()]
    assert "aten::mm" in hung[0]["message"], hung[0]["message"]
    assert blocked, "nothing was BLOCKED after the hang"
    assert set(got) == {hung[0]["id"]} | {t["id"] for t in blocked}, \
        [(t["id"], t["outcome"]) for t in got.values()]
    for t in blocked:
        assert hung[0]["id"] in t["message"], t["message"]
    assert report["run"]["duration_s"] < 120, report["run"]["duration_s"]
    status = {q["id"]: q["status"] for q in report["requirements"]}
    assert status["TFL-OPS-002"] == "not_met"
