"""Level and requirement status logic of the report, on synthetic results."""

from __future__ import annotations

from typing import Any

from conftest import FAKE_HOST, FAKE_TARGET
from torch_fl_conformance.report import integrity
from torch_fl_conformance.report.build import build_report
from torch_fl_conformance.report.diff import diff_reports
from torch_fl_conformance.report.schema import validate
from torch_fl_conformance.requirements import load_requirements

TARGET, HOST = FAKE_TARGET, FAKE_HOST


def _tests(overrides: dict[str, str]) -> list[dict[str, Any]]:
    """One test per requirement up to L1, PASS unless overridden (capability skips applied)."""
    out = []
    for r in load_requirements().values():
        if r.level not in ("L0", "L1"):
            continue
        outcome = overrides.get(r.id, "PASS")
        if r.capability and r.capability not in TARGET["capabilities"]:
            outcome = "SKIP"
        out.append({"id": f"{r.level}/test_x.py::test_{r.id}", "requirement": r.id,
                    "strength": r.strength, "level": r.level, "area": r.area.lower(),
                    "capability": r.capability, "outcome": outcome, "duration_s": 0.1,
                    "message": "", "detail": "", "data": {}, "expectation": None})
    return out


def _report(overrides: dict[str, str], level: str = "L1") -> dict[str, Any]:
    opts = {"level": level, "seed": 1, "timeout_s": 10.0, "samples": 1, "ops": None,
            "models": None, "certify": False, "expectations": None}
    return build_report(target=TARGET, host=HOST, options=opts, tests=_tests(overrides),
                        op_stats=[], stale=[], started=0.0, finished=1.0, deselected=0,
                        workers=1, restarts=0)


def test_all_pass_reaches_requested_level() -> None:
    r = _report({})
    assert r["level"]["achieved"] == "L1", r["level"]
    assert validate(r) == []
    assert integrity.check(r) == []


def test_must_failure_blocks_its_level_should_does_not() -> None:
    r = _report({"TFL-OPS-001": "FAIL"})  # SHOULD
    assert r["level"]["achieved"] == "L1", r["level"]["summary"]
    assert "TFL-OPS-001" in r["level"]["levels"]["L1"]["should_not_met"]
    r = _report({"TFL-MEM-002": "FAIL"})  # MUST
    assert r["level"]["achieved"] == "L0", r["level"]["summary"]
    assert any("TFL-MEM-002" in w for w in r["level"]["levels"]["L1"]["why"])


def test_crash_timeout_and_xfail_are_not_met() -> None:
    for outcome in ("CRASH", "TIMEOUT", "XFAIL", "ERROR", "NOT_RUN", "BLOCKED"):
        r = _report({"TFL-SMOKE-005": outcome})
        assert r["level"]["achieved"] == "none", (outcome, r["level"]["summary"])


def test_capability_skip_does_not_block_but_is_reported() -> None:
    r = _report({})
    statuses = {q["id"]: q["status"] for q in r["requirements"]}
    assert statuses["TFL-GRAD-001"] == "skipped", statuses["TFL-GRAD-001"]  # fp64 absent
    assert r["level"]["achieved"] == "L1"


def test_level_above_the_run_is_not_claimed() -> None:
    r = _report({}, level="L0")
    assert r["level"]["achieved"] == "L0"
    assert not r["level"]["levels"]["L1"]["tested"]


def test_diff_lists_regressions_and_improvements() -> None:
    good, bad = _report({}), _report({"TFL-MEM-002": "FAIL"})
    changes = diff_reports(good, bad)
    assert any("level: L1 -> L0" in x for x in changes["regressions"]), changes
    assert any("TFL-MEM-002" in x for x in changes["regressions"]), changes
    back = diff_reports(bad, good)
    assert back["regressions"] == [] and back["improvements"], back


def test_digest_detects_edits() -> None:
    r = _report({})
    r["tests"][0]["outcome"] = "FAIL"
    assert integrity.check(r), "an edited outcome must break the digest"


def test_suspects_rank_the_kernel_whose_own_entry_fails_above_copies() -> None:
    from torch_fl_conformance.report.suspects import kernel_base, rank_suspects

    assert kernel_base("aten::gelu_backward.grad_input") == "gelu"
    assert kernel_base("aten::_softmax_backward_data") == "softmax"
    op = "L1/test_opinfo.py::test_op[{}-float32-{}]"

    def t(tid: str, outcome: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"id": tid, "outcome": outcome, "data": data}

    kernels = {"native": ["aten::_copy_from", "aten::mul.Tensor"]}
    tests = [t(op.format("mul", "noncontiguous"), "FAIL", {"kernels": kernels}),
             t(op.format("addcmul", "output"), "FAIL", {"kernels": kernels}),
             t(op.format("div.no_rounding_mode", "runs"), "PASS",
               {"opinfo": {"kernels": ["aten::_copy_from", "aten::div.Tensor"], "class": "native"}}),
             t("L1/test_memory.py::test_no_leak", "TIMEOUT",
               {"kernels": {"running": ["aten::mm"]}})]
    ranked = [s["kernel"] for s in rank_suspects(tests)]
    assert set(ranked[:2]) == {"aten::mm", "aten::mul.Tensor"}, ranked
    assert ranked.index("aten::_copy_from") > ranked.index("aten::mul.Tensor"), ranked
