"""`torch_fl.test_compatibility()` and `torchfl doctor`: a healthy flemu passes
every check; each kind of breakage fails the right check with what to do."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch_fl
from support import ROOT, compile_c
from torch_fl.tooling import doctor

CHECKS = ["load", "abi", "devices", "memory", "kernels", "autograd", "streams", "fallback",
          "tunables"]


def run_doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-m", "torch_fl.cli", "doctor", *args], env=full,
                          capture_output=True, text=True, timeout=600, check=False)


def test_healthy_flemu_passes_every_check(flemu: torch_fl.PluginHandle) -> None:
    out = io.StringIO()
    result = torch_fl.test_compatibility(file=out)
    assert result.ok, str(result)
    assert [c.name for c in result.checks] == CHECKS, result.checks
    statuses = {c.name: c.status for c in result.checks}
    # Kernels the bridge refused to register are the one thing a healthy plugin may warn about.
    load = "WARN" if flemu.rejected_kernels else "PASS"
    assert statuses == {name: load if name == "load" else "PASS" for name in CHECKS}, statuses
    for op, _why in flemu.rejected_kernels:
        assert op in result.check("load").detail, result.check("load")
    assert result.plugin["name"] == "flemu" and result.plugin["devices"] == 2, result.plugin
    # With the conformance suite installed the kernel check runs its L0 smoke table.
    smoke = doctor._smoke_level()
    assert smoke is not None, "torch_fl_conformance's L0 smoke table did not load"
    kernels = result.check("kernels").detail
    assert kernels.startswith(f"{len(smoke[0])} APIs of the conformance L0 smoke level match "
                              "the CPU"), kernels
    assert "0->1" in result.check("memory").detail, result.check("memory")
    text = out.getvalue()
    assert text.startswith("torch-fl compatibility check: flemu 0.1.0 as device 'flemu'"), text
    assert "result: healthy" in text, text
    doc = result.to_dict()
    assert doc["ok"] is True and len(doc["checks"]) == len(CHECKS), doc


def test_without_the_conformance_suite_own_cases_run(flemu: torch_fl.PluginHandle,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_smoke_level", lambda: None)
    result = torch_fl.test_compatibility(verbose=False)
    kernels = result.check("kernels")
    assert kernels.status == "PASS", kernels
    assert kernels.detail.startswith("12 common float32 ops (conformance suite not installed: "
                                     "torch-fl's own cases) match the CPU"), kernels


def test_quiet_mode_prints_nothing(flemu: torch_fl.PluginHandle) -> None:
    out = io.StringIO()
    result = torch_fl.test_compatibility(verbose=False, file=out)
    assert result.ok, str(result)
    assert out.getvalue() == "", out.getvalue()


def test_a_second_plugin_cannot_be_checked_in_this_process(flemu: torch_fl.PluginHandle) -> None:
    result = torch_fl.test_compatibility("other", verbose=False)
    assert not result.ok
    load = result.check("load")
    assert load.status == "FAIL" and "one PrivateUse1 backend per process" in load.detail, load
    assert "torchfl doctor --plugin other" in load.remedy, load
    assert [c.status for c in result.checks[1:]] == ["SKIP"] * 8, result.checks


def test_cli_doctor_passes_on_flemu(flemu: torch_fl.PluginHandle) -> None:
    proc = run_doctor({})
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    rows = [ln.split()[:2] for ln in lines[1:-1] if not ln.lstrip().startswith("what to do")]
    load = "WARN" if flemu.rejected_kernels else "PASS"
    assert rows == [[load if n == "load" else "PASS", n] for n in CHECKS], proc.stdout
    assert lines[-1].startswith("result: healthy"), lines[-1]


def test_wrong_kernel_results_fail_the_kernels_check() -> None:
    # flemu's mm kernel fails on purpose: the check names it and exits 1.
    proc = run_doctor({"FLEMU_INJECT_ERROR": "aten::mm:2"}, "--format", "json")
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"] is False, doc
    assert checks["kernels"]["status"] == "FAIL", checks["kernels"]
    assert "aten::mm" in checks["kernels"]["detail"], checks["kernels"]
    assert checks["memory"]["status"] == "PASS", checks["memory"]


def test_strict_fallback_mode_and_disabled_kernels_are_reported() -> None:
    proc = run_doctor({"TORCH_FL_FALLBACK": "silent",
                       "TORCH_FL_DISABLE_KERNELS": "aten::relu"}, "--format", "json")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    fb = checks["fallback"]
    assert fb["status"] == "WARN", fb
    assert "disabled by TORCH_FL_DISABLE_KERNELS: aten::relu" in fb["detail"], fb
    assert "TORCH_FL_FALLBACK=warn" in fb["remedy"], fb
    fallbacks = checks["kernels"]["detail"].partition("(fallback: ")[2].rstrip(")").split(", ")
    assert "aten::relu" in fallbacks, checks["kernels"]


def test_a_plugin_that_does_not_load_fails_with_a_remedy(tmp_path: Path) -> None:
    lib = compile_c(ROOT / "tests" / "fixtures" / "bad_plugin.c", tmp_path / "libbad.so",
                    "-DDEFECT_ABI_MAJOR")
    proc = run_doctor({"TORCH_FL_AUTOLOAD": "0"}, "--plugin", str(lib))
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    out = proc.stdout
    assert "FAIL  load       the plugin did not load: ABIMismatchError" in out, out
    assert "what to do: `torchfl list` shows every plugin" in out, out
    assert out.count("SKIP") == 8, out


def test_a_plugin_without_devices_fails_the_devices_check(tmp_path: Path) -> None:
    lib = compile_c(ROOT / "tests" / "fixtures" / "bad_plugin.c", tmp_path / "libbad.so")
    proc = run_doctor({"TORCH_FL_AUTOLOAD": "0", "TORCH_FL_PLUGINS": f"bad={lib}"},
                      "--plugin", "bad", "--format", "json")
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["load"]["status"] == "PASS", checks["load"]
    assert checks["devices"]["status"] == "FAIL", checks["devices"]
    assert checks["devices"]["detail"] == "the plugin reports no devices", checks["devices"]


def test_cli_doctor_for_another_plugin_runs_in_a_fresh_process(tmp_path: Path) -> None:
    # This process autoloads flemu; asking for "bad" re-runs the doctor elsewhere.
    lib = compile_c(ROOT / "tests" / "fixtures" / "bad_plugin.c", tmp_path / "libbad.so")
    proc = run_doctor({"TORCH_FL_PLUGINS": f"bad={lib}"}, "--plugin", "bad")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout.startswith("torch-fl compatibility check: bad 0 as device 'bad'"), proc.stdout
