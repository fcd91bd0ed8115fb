"""`torchfl-conformance diff` across torch releases: both runs identified in the
header, tests present in both whose outcome changed kept apart from tests added
or removed (the OpInfo sweep follows the running torch's op_db)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import run_cli
from torch_fl_conformance.report.build import build_report
from torch_fl_conformance.report.diff import diff_reports, render

TARGET = {
    "device_type": "fake", "plugin_name": "fake", "vendor": "v", "version": "1.2", "abi": "1.0",
    "host_abi": "1.0", "library": "/x.so", "library_sha256": "ab" * 32, "device_count": 1,
    "devices": [], "groups": {}, "capabilities": [], "native_kernels": 0,
}
OP = "L1/test_opinfo.py::test_op[{}-float32-runs]"


def _report(torch: str, outcomes: dict[str, str], *, torch_fl: str = "0.1.0",
            suite: str = "0.1.0") -> dict[str, Any]:
    host = {"hostname": "h", "platform": "p", "machine": "m", "python": "3.11", "cpu_count": 2,
            "torch": torch, "torch_fl": torch_fl, "suite": suite}
    tests = [{"id": tid, "requirement": "TFL-OPS-001", "strength": "SHOULD", "level": "L1",
              "area": "ops", "capability": "", "outcome": o, "duration_s": 0.1,
              "message": f"{o.lower()} message" if o != "PASS" else "", "detail": "",
              "data": {}, "expectation": None} for tid, o in outcomes.items()]
    opts = {"level": "L1", "seed": 1, "timeout_s": 10.0, "samples": 1, "ops": None,
            "models": None, "certify": False, "expectations": None}
    return build_report(target=TARGET, host=host, options=opts, tests=tests, op_stats=[],
                        stale=[], started=0.0, finished=1.0, deselected=0, workers=1,
                        restarts=0)


BEFORE = {OP.format("neg"): "PASS", OP.format("abs"): "PASS", OP.format("sin"): "FAIL",
          OP.format("old_op"): "PASS", OP.format("gone_failing"): "FAIL"}
AFTER = {OP.format("neg"): "CRASH", OP.format("abs"): "PASS", OP.format("sin"): "PASS",
         OP.format("new_op"): "PASS", OP.format("new_broken"): "FAIL",
         OP.format("new_skipped"): "SKIP"}


def test_outcome_changes_are_apart_from_the_test_set_change() -> None:
    a, b = _report("2.13.0+cpu", BEFORE), _report("2.14.1+cu130", AFTER, torch_fl="0.2.0")
    c = diff_reports(a, b)
    changed = {(x["id"], x["before"], x["after"], x["worse"]) for x in c["outcome_changes"]}
    assert changed == {(OP.format("neg"), "PASS", "CRASH", True),
                       (OP.format("sin"), "FAIL", "PASS", False)}, changed
    assert [t["id"] for t in c["added"]] == sorted(
        OP.format(n) for n in ("new_op", "new_broken", "new_skipped")), c["added"]
    assert {t["id"]: t["outcome"] for t in c["removed"]} == {
        OP.format("old_op"): "PASS", OP.format("gone_failing"): "FAIL"}, c["removed"]
    # Another torch release asks other tests: added and removed ones are no regression.
    assert c["test_set_should_match"] is False
    tests_regressed = [x for x in c["regressions"] if x.startswith("test ")]
    assert tests_regressed == [f"test {OP.format('neg')}: PASS -> CRASH: crash message"], \
        c["regressions"]
    assert f"test {OP.format('sin')}: FAIL -> PASS" in c["improvements"], c["improvements"]
    assert (c["before"]["torch"], c["after"]["torch"]) == ("2.13.0+cpu", "2.14.1+cu130")


def test_text_header_names_both_torch_versions_and_lists_both_directions() -> None:
    a, b = _report("2.13.0+cpu", BEFORE), _report("2.14.1+cu130", AFTER, torch_fl="0.2.0")
    text = render(a, b, diff_reports(a, b))
    lines = text.splitlines()
    assert "torch 2.13.0+cpu" in lines[0] and "fake 1.2" in lines[0], lines[0]
    assert "torch 2.14.1+cu130" in lines[1] and "torch-fl 0.2.0" in lines[1], lines[1]
    assert lines[2].startswith("versions: torch 2.13.0+cpu -> 2.14.1+cu130; "
                               "torch-fl 0.1.0 -> 0.2.0"), lines[2]
    assert "same plugin library" in lines[2], lines[2]
    same = text.index("Same test, different outcome (2 of 3 tests in both runs: 1 worse, "
                      "1 better)")
    changed = text.index("Test set changed (+3 added, -2 removed; expected with torch "
                         "2.13.0+cpu -> 2.14.1+cu130: op_db")
    assert same < changed, text
    assert f"worse: {OP.format('neg')}: PASS -> CRASH: crash message" in text[same:changed], text
    head = text[:same]
    assert 'Regressions (2):\n  - op neg float32: unsupported -> crash\n  - 1 test(s) in both runs' \
        in head, head
    assert OP.format("neg") not in head, "an outcome change is listed once, under its section"
    assert f"better: {OP.format('sin')}: FAIL -> PASS" in text[same:changed], text
    added = text[changed:]
    assert "Added (3: FAIL 1, PASS 1, SKIP 1)" in added, added
    # The added test that fails comes first, with its message.
    assert added.index(f"+ {OP.format('new_broken')}: FAIL: fail message") < \
        added.index(f"+ {OP.format('new_op')}: PASS"), added
    assert "Removed (2; outcome before: FAIL 1, PASS 1)" in added, added
    assert f"- {OP.format('old_op')}: was PASS" in added, added
    assert "missing now" not in text, text


def test_same_torch_release_missing_tests_are_regressions() -> None:
    a = _report("2.13.0+cpu", BEFORE)
    b = _report("2.13.1+cpu", {k: v for k, v in BEFORE.items() if "old_op" not in k})
    c = diff_reports(a, b)
    assert c["test_set_should_match"] is True
    assert c["regressions"] == [f"test {OP.format('old_op')}: present before, missing now"], \
        c["regressions"]
    assert c["added"] == [] and [t["id"] for t in c["removed"]] == [OP.format("old_op")]
    text = render(a, b, c)
    assert "Test set changed (+0 added, -1 removed; same torch release and suite" in text, text
    assert "Regressions (1):\n  - 1 test(s) missing now" in text, text


def test_cli_diff_exit_status_and_json(tmp_path: Path) -> None:
    a, b = _report("2.13.0+cpu", BEFORE), _report("2.14.1+cu130", AFTER)
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    r = run_cli("diff", str(pa), str(pb), "--json")
    assert r.returncode == 1, r.stdout + r.stderr  # neg: PASS -> CRASH
    got = json.loads(r.stdout)
    assert len(got["added"]) == 3 and len(got["removed"]) == 2, got
    assert got["after"]["torch"] == "2.14.1+cu130", got["after"]
    # Without outcome regressions a changed test set alone is not a failure.
    calm = {**AFTER, OP.format("neg"): "PASS"}
    pb.write_text(json.dumps(_report("2.14.1+cu130", calm)))
    r = run_cli("diff", str(pa), str(pb))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Regressions (0)" in r.stdout and "+3 added, -2 removed" in r.stdout, r.stdout
