"""The L2 Hugging Face area (suite/L2/test_hf.py) certifies flemu, refuses a
flemu with a wrong softmax backward through the training-step requirement, and
reports its requirements unverified, not met, where transformers cannot be
imported. Each case is one run of the area alone (`-- -k test_hf`, one worker).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_env, load_report, run_cli
from torch_fl_conformance.zoo import hf

pytestmark = pytest.mark.slow

MUST = ("TFL-HF-001", "TFL-HF-002", "TFL-HF-003", "TFL-HF-004")
SHOULD = ("TFL-HF-005",)
AREA = "L2/test_hf.py::test_hf"
# A wrong kernel every one of these models' backward uses: flemu's softmax
# backward (_softmax_backward_data, and the softmax step of the fused attention
# backward) drops the -sum(grad*out) term for one row in three.
FAULT = "softmax_backward_wrong"
FAULTY_KERNELS = ("aten::_softmax_backward_data", "aten::_scaled_dot_product_fused_attention_overrideable_backward")
# The models whose attention backward goes through one of them on flemu.
FAULT_CAUGHT_IN = ("gpt2", "t5", "vit", "llama")


def _run(out: Path, **env: str) -> dict[str, Any]:
    r = run_cli("run", "--plugin", "flemu", "--level", "L2", "--ops", "abs", "--report",
                str(out), "-j", "1", "--", "-k", "test_hf", env=cli_env(**env), timeout=300)
    # A slice: the other L2 requirements are not tested, so no level is claimed.
    assert r.returncode == 1, f"exit status {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr}"
    return load_report(out)


def _area(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in report["tests"] if t["id"].startswith(AREA)}


def _status(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["id"]: q for q in report["requirements"] if q["id"].startswith("TFL-HF-")}


def test_flemu_meets_the_hf_requirements(tmp_path: Path, flemu_library: str) -> None:
    report = _run(tmp_path)
    tests = _area(report)
    expected = {f"{AREA}[{name}-{check}]" for name, spec in hf.MODELS.items()
                for check in hf.checks_of(spec)}
    assert set(tests) == expected, (sorted(tests), sorted(expected))
    bad = {tid: (t["outcome"], t["message"][:300]) for tid, t in tests.items()
           if t["outcome"] != "PASS"}
    assert not bad, bad
    status = _status(report)
    assert sorted(status) == sorted(MUST + SHOULD), sorted(status)
    for rid, q in status.items():
        assert (q["status"], q["level"]) == ("met", "L2"), q
        assert q["strength"] == ("MUST" if rid in MUST else "SHOULD"), q
    gpt2 = tests[f"{AREA}[gpt2-generate]"]["data"]["hf"]
    assert gpt2["tokens_device"] == gpt2["tokens_cpu"] and len(gpt2["tokens_cpu"][0]) == \
        len(hf.PROMPT[0]) + hf.NEW_TOKENS, gpt2
    assert gpt2["tied_groups"] == [["transformer.wte.weight", "lm_head.weight"]], gpt2


def test_a_wrong_softmax_backward_fails_the_training_step(tmp_path: Path,
                                                          flemu_library: str) -> None:
    report = _run(tmp_path, FLEMU_FAULT=FAULT)
    tests = _area(report)
    status = _status(report)
    q = status["TFL-HF-003"]
    assert q["status"] == "not_met" and q["strength"] == "MUST", q
    why = " ".join(report["level"]["levels"]["L2"]["why"])
    assert "TFL-HF-003 not met" in why, why
    for name in FAULT_CAUGHT_IN:
        t = tests[f"{AREA}[{name}-train_step]"]
        assert t["outcome"] == "FAIL" and t["requirement"] == "TFL-HF-003", (
            t["outcome"], t["requirement"], t["message"][:300])
        assert "grad " in t["message"] and "class model" in t["message"], t["message"][:500]
        native = t["data"]["kernels"]["native"]
        assert any(k in native for k in FAULTY_KERNELS), t["data"]
    # The fault is in the backward only: the forward, the tying and generation hold.
    for rid in ("TFL-HF-001", "TFL-HF-002", "TFL-HF-004"):
        assert status[rid]["status"] == "met", status[rid]


def test_without_transformers_the_area_is_skipped_not_passed(tmp_path: Path,
                                                            flemu_library: str) -> None:
    shadow = tmp_path / "shadow" / "transformers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("no transformers here")\n',
                                        encoding="utf-8")
    path = os.pathsep.join(p for p in (str(shadow.parent), os.environ.get("PYTHONPATH")) if p)
    report = _run(tmp_path / "report", PYTHONPATH=path)
    tests = _area(report)
    assert tests, "the area collected no test without transformers"
    for tid, t in tests.items():
        assert t["outcome"] == "SKIP", (tid, t["outcome"], t["message"][:300])
        assert "transformers is not importable" in t["message"], (tid, t["message"])
    status = _status(report)
    for rid in MUST + SHOULD:
        assert status[rid]["status"] == "unverified", status[rid]
    why = " ".join(report["level"]["levels"]["L2"]["why"])
    assert all(f"{rid} unverified" in why for rid in MUST), why
    assert not report["level"]["levels"]["L2"]["met"]
