"""End-to-end runs of torchfl-conformance on small slices of the suite, including
the fault cases: crash, hang, missing capability, expectations, certify, a
deliberately broken plugin; and the reports they write."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import tomllib
from conftest import ROOT, cli_env, load_report, outcomes_of, run_cli
from torch_fl_conformance.expectations import Expectations
from torch_fl_conformance.report.schema import validate
from torch_fl_conformance.session import SUITE_DIR

pytestmark = pytest.mark.slow

SMOKE_SLICE = "test_load or test_api and (neg or relu or mm) or test_copy_roundtrip"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, flemu_library: str) -> Path:
    out = tmp_path_factory.mktemp("clean")
    r = run_cli("run", "--plugin", "flemu", "--level", "L0", "--report", str(out), "-j", "2",
                "--", "-k", SMOKE_SLICE)
    # A slice leaves most L0 requirements untested, so no level is claimed (status 1).
    assert r.returncode == 1, r.stdout + r.stderr
    assert "level achieved: none" in r.stdout and "not tested" in r.stdout, r.stdout
    assert set(outcomes_of(load_report(out)).values()) == {"PASS"}, r.stdout
    return out


def test_no_plugin_fails_fast_with_guidance() -> None:
    t0 = time.time()
    r = run_cli("run")
    assert r.returncode == 2, r
    assert "--plugin" in r.stderr and "flemu" in r.stderr, r.stderr
    assert time.time() - t0 < 60


def test_unknown_plugin_is_named(tmp_path: Path) -> None:
    r = run_cli("run", "--plugin", "nosuchplugin", "--report", str(tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "nosuchplugin" in r.stderr and "--plugin" in r.stderr, r.stderr


def test_a_missing_suite_package_is_named_before_any_worker_starts(tmp_path: Path) -> None:
    # sys.modules[name] = None makes the module unimportable (find_spec answers None).
    code = ("import sys; sys.modules['pytest_timeout'] = None; from torch_fl_conformance.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "run", "--plugin", "flemu", "--report", str(tmp_path)],
                       check=False, capture_output=True, text=True, env=cli_env(), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pytest-timeout" in r.stderr and "pip install pytest-timeout" in r.stderr, r.stderr
    assert "numpy" not in r.stderr, r.stderr  # only what is missing is named
    assert not (tmp_path / "logs").exists()


def test_pytest_without_plugin_explains(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pytest", str(SUITE_DIR / "L0"), "-q",
                        "-p", "no:cacheprovider"], check=False, capture_output=True, text=True,
                       env=cli_env(), cwd=tmp_path, timeout=120)
    assert r.returncode != 0, r.stdout
    assert "--torchfl-plugin" in r.stdout + r.stderr, r.stdout + r.stderr


def test_pytest_plugin_runs_suite_directly(tmp_path: Path, flemu_library: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                        "--torchfl-plugin=flemu", "--torchfl-level=L0",
                        f"--torchfl-report={tmp_path}", "-k", "test_load or test_enumerate"],
                       check=False, capture_output=True, text=True, env=cli_env(),
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torchfl-conformance: flemu" in r.stdout, r.stdout  # the report header
    report = load_report(tmp_path)
    assert outcomes_of(report) == {"L0/test_smoke.py::test_load": "PASS",
                                   "L0/test_smoke.py::test_enumerate": "PASS"}


def test_clean_report_header_and_schema(clean: Path, flemu_library: str) -> None:
    report = load_report(clean)
    assert validate(report) == []
    p = report["plugin"]
    assert p["plugin_name"] == "flemu" and p["device_type"] == "flemu", p
    assert p["library_sha256"] == hashlib.sha256(Path(p["library"]).read_bytes()).hexdigest()
    assert {"torch", "torch_fl", "suite", "hostname"} <= set(report["host"])
    assert report["run"]["options"]["seed"] == 20240601
    assert set(outcomes_of(report).values()) == {"PASS"}, outcomes_of(report)
    assert all(t["requirement"].startswith("TFL-SMOKE-") for t in report["tests"])


def test_html_markdown_junit(clean: Path) -> None:
    html = (clean / "report.html").read_text(encoding="utf-8")
    assert "<svg" in html and "Level: none" in html
    assert "://" not in html, re.findall(r".{30}://.{30}", html)[:3]
    for resource in ("<script", "<link", "<img", "<iframe", "@import", "url("):
        assert resource not in html, resource
    md = (clean / "summary.md").read_text(encoding="utf-8")
    assert "**Level achieved: none**" in md, md[:300]
    root = ET.parse(clean / "junit.xml").getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == len(load_report(clean)["tests"]), len(cases)


def test_verify_detects_a_one_byte_edit(clean: Path, tmp_path: Path) -> None:
    r = run_cli("verify", str(clean / "report.json"))
    assert r.returncode == 0 and "intact" in r.stdout, r.stdout + r.stderr
    data = (clean / "report.json").read_bytes()
    i = data.index(b'"PASS"')
    edited = tmp_path / "report.json"
    edited.write_bytes(data[:i + 1] + b"F" + data[i + 2:])  # PASS -> FASS
    r = run_cli("verify", str(edited))
    assert r.returncode == 1 and "ALTERED" in r.stdout, r.stdout
    (tmp_path / "report.json").write_bytes(data)
    (tmp_path / "summary.md").write_text("# edited\n")
    r = run_cli("verify", str(tmp_path / "report.json"))
    assert r.returncode == 1 and "summary.md" in r.stdout, r.stdout


def test_crash_is_recorded_and_the_run_continues(clean: Path, tmp_path: Path) -> None:
    env = cli_env(FLEMU_INJECT_CRASH="aten::neg")
    r = run_cli("run", "--plugin", "flemu", "--level", "L0", "--report", str(tmp_path),
                "-j", "2", "--", "-k", SMOKE_SLICE, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    got = outcomes_of(load_report(tmp_path))
    crashed = {t for t, o in got.items() if o == "CRASH"}
    assert crashed == {"L0/test_smoke.py::test_api[neg-matches_cpu]",
                       "L0/test_smoke.py::test_api[neg-native]"}, crashed
    assert set(got) == set(outcomes_of(load_report(clean))), "tests went missing after a crash"
    assert {o for t, o in got.items() if t not in crashed} == {"PASS"}, got
    report = load_report(tmp_path)
    crash = next(t for t in report["tests"] if t["outcome"] == "CRASH")
    assert "SIGABRT" in crash["message"], crash["message"]
    assert report["run"]["worker_restarts"] >= 2
    diff = run_cli("diff", str(clean / "report.json"), str(tmp_path / "report.json"))
    assert diff.returncode == 1, diff.stdout
    assert "test_api[neg-native]: PASS -> CRASH" in diff.stdout, diff.stdout
    assert "requirement TFL-SMOKE-006 (MUST): met -> not_met" in diff.stdout, diff.stdout
    same = run_cli("diff", str(clean / "report.json"), str(clean / "report.json"))
    assert same.returncode == 0 and "Regressions (0)" in same.stdout, same.stdout
    drafted = run_cli("expect", str(tmp_path / "report.json"))
    exp = Expectations.parse(tomllib.loads(drafted.stdout))
    assert [e.id for e in exp.entries] == ["L0/test_smoke.py::test_api[neg-native]"], \
        drafted.stdout  # the SHOULD one; MUST failures are not drafted by default
    assert "CRASH (TFL-SMOKE-007 SHOULD)" in exp.entries[0].reason


def test_hang_is_a_timeout(tmp_path: Path) -> None:
    env = cli_env(FLEMU_SANITIZE="1000000", FLEMU_SANITIZE_SEED="1")
    # Every stream task of flemu is delayed by up to 1 s: 200 loop iterations of
    # device work cannot finish in 3 s.
    r = run_cli("run", "--plugin", "flemu", "--level", "L1", "--report", str(tmp_path),
                "--timeout", "3", "--ops", "add", "--", "-k", "test_load or test_no_leak",
                env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    got = outcomes_of(load_report(tmp_path))
    assert got == {"L0/test_smoke.py::test_load": "PASS",
                   "L1/test_memory.py::test_no_leak": "TIMEOUT"}, got


def test_missing_capability_is_skipped_with_reason(tmp_path: Path) -> None:
    r = run_cli("run", "--plugin", "flemu", "--level", "L0", "--report", str(tmp_path),
                "--", "-k", "test_allocate", env=cli_env(FLEMU_FP64="0"))
    assert r.returncode == 1, r.stdout + r.stderr  # a slice claims no level
    report = load_report(tmp_path)
    tests = {t["id"]: t for t in report["tests"]}
    f64 = tests["L0/test_smoke.py::test_allocate[float64]"]
    assert (f64["outcome"], f64["message"]) == ("SKIP", "fp64 not advertised by flemu"), f64
    assert tests["L0/test_smoke.py::test_allocate[float32]"]["outcome"] == "PASS"
    status = {q["id"]: q["status"] for q in report["requirements"]}
    assert status["TFL-SMOKE-004"] == "met", "a missing capability must not fail its requirement"


def test_expectations_stale_entries_and_certify(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text(
        '[[xfail]]\nid = "L0/test_smoke.py::test_api[abs-"\nreason = "abs fails on purpose"\n'
        '[[xfail]]\nid = "L0/test_smoke.py::test_api[relu-"\nreason = "relu works: xpass"\n'
        '[[skip]]\nid = "L0/test_smoke.py::test_no_such_test"\nreason = "stale on purpose"\n')
    env = cli_env(FLEMU_INJECT_ERROR="aten::abs:5")
    out = tmp_path / "rep"
    r = run_cli("run", "--plugin", "flemu", "--level", "L0", "--report", str(out),
                "--expectations", str(exp), "--", "-k", "test_api and (abs or relu)", env=env)
    assert "stale expectation (skip) matches no test: L0/test_smoke.py::test_no_such_test" \
        in r.stdout, r.stdout
    report = load_report(out)
    got = outcomes_of(report)
    assert got["L0/test_smoke.py::test_api[abs-matches_cpu]"] == "XFAIL", got
    assert got["L0/test_smoke.py::test_api[relu-matches_cpu]"] == "XPASS", got
    assert [e["id"] for e in report["expectations"]["stale"]] == [
        "L0/test_smoke.py::test_no_such_test"]
    assert "L0/test_smoke.py::test_api[relu-matches_cpu]" in report["expectations"]["xpassed"]
    assert report["level"]["achieved"] == "none", "an expected failure of a MUST still fails"
    r = run_cli("run", "--plugin", "flemu", "--level", "L0", "--report", str(out),
                "--expectations", str(exp), "--certify", env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--certify refuses" in r.stderr and "TFL-SMOKE-006" in r.stderr, r.stderr


def test_opinfo_slice_classifies_coverage(tmp_path: Path) -> None:
    r = run_cli("run", "--plugin", "flemu", "--level", "L1", "--report", str(tmp_path),
                "--ops", "add,atan2", "--samples", "2", "--", "-k", "test_opinfo")
    report = load_report(tmp_path)
    rows = {(c["op"], c["dtype"]): c for c in report["coverage"]["ops"]}
    assert rows[("add", "float32")]["class"] == "native", rows[("add", "float32")]
    assert rows[("atan2", "float32")]["class"] in ("fallback", "native"), rows
    assert "partial run" in report["level"]["summary"], report["level"]["summary"]
    assert all(t["requirement"].startswith("TFL-OPS-") for t in report["tests"])
    assert r.returncode in (0, 1), r.stderr


def _build_broken(tmp: Path) -> Path:
    import torch_fl

    lib = tmp / "libbroken.so"
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    f"-I{torch_fl.get_include()}",
                    str(ROOT / "tests" / "conformance" / "fixtures" / "broken_plugin.c"),
                    "-o", str(lib), "-ldl"], check=True)
    return lib


def test_broken_plugin_report_shows_exactly_its_defects(tmp_path: Path,
                                                        flemu_library: str) -> None:
    lib = _build_broken(tmp_path)
    env = cli_env(BROKEN_INNER_LIBRARY=flemu_library)
    out = tmp_path / "rep"
    r = run_cli("run", "--plugin", f"broken={lib}", "--level", "L0", "--report", str(out),
                "-j", "2", "--", "-k",
                "test_load or test_api and (sub or neg or mm) or test_allocate",
                env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    report = load_report(out)
    assert report["plugin"]["plugin_name"] == "broken"
    assert "fp64" not in report["plugin"]["capabilities"]
    got = {t: o for t, o in outcomes_of(report).items() if o != "PASS"}
    assert got == {
        "L0/test_smoke.py::test_api[sub-matches_cpu]": "FAIL",
        "L0/test_smoke.py::test_api[neg-matches_cpu]": "CRASH",
        "L0/test_smoke.py::test_api[neg-native]": "CRASH",
        "L0/test_smoke.py::test_allocate[float64]": "SKIP",
    }, got
    status = {q["id"]: q["status"] for q in report["requirements"]}
    assert status["TFL-SMOKE-006"] == "not_met" and report["level"]["achieved"] == "none"


def test_absent_groups_skip_l3_with_reason(tmp_path: Path, flemu_library: str) -> None:
    lib = _build_broken(tmp_path)
    out = tmp_path / "rep"
    run_cli("run", "--plugin", f"broken={lib}", "--level", "L3", "--report", str(out),
            "--", "-k", "test_collective or test_ddp or test_compiled",
            env=cli_env(BROKEN_INNER_LIBRARY=flemu_library))
    report = load_report(out)
    reasons = {t["id"]: (t["outcome"], t["message"]) for t in report["tests"]}
    assert reasons["L3/test_collectives.py::test_collective[all_reduce]"] == (
        "SKIP", "collectives not advertised by broken"), reasons
    assert reasons["L3/test_compile.py::test_compiled_parity[resnet18]"] == (
        "SKIP", "graph not advertised by broken"), reasons
    status = {q["id"]: q["status"] for q in report["requirements"]}
    assert status["TFL-COLL-001"] == "skipped" and status["TFL-COMPILE-001"] == "skipped"


def test_run_prints_where_the_report_is(clean: Path) -> None:
    data: dict[str, Any] = json.loads((clean / "report.json").read_text())
    assert data["files"].keys() == {"report.html", "summary.md", "junit.xml"}
