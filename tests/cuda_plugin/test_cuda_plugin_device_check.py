"""The device check's harness (plugins/cuda/device_check), run here as a dry
run: flemu stands in for flcuda and the CPU for torch.cuda, on a tiny BERT, so
the stages, the workers, the comparisons and the report are exercised without
a GPU. No GPU result comes from this test."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cuda_plugin_project import PLUGIN

CHECK = PLUGIN / "device_check" / "device_check.py"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict, str]:
    out = tmp_path_factory.mktemp("device_check_out")
    env = dict(os.environ, TMPDIR=str(tmp_path_factory.mktemp("device_check_tmp")))
    env.pop("OUT", None)
    proc = subprocess.run(
        [sys.executable, str(CHECK), "run", "--dry-run", "--out", str(out), "--models", "bert",
         "--skip-conformance", "--budget", "400"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    report_file = out / "device_check.json"
    assert report_file.is_file(), f"no report\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    report = json.loads(report_file.read_text(encoding="utf-8"))
    return proc, report, (out / "device_check.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_every_stage_runs_and_passes(dry_run: tuple[subprocess.CompletedProcess, dict, str]) -> None:
    proc, report, _ = dry_run
    stages = {s["name"]: s["status"] for s in report["stages"]}
    assert stages == {"environment": "ok", "list": "ok", "ops": "ok", "bert": "ok"}, (
        stages, [s.get("error") for s in report["stages"]], proc.stdout[-3000:])
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:])
    assert report["dry_run"] is True and report["devices"] == {"torchfl": "flemu", "native": "cpu"}, report["devices"]


@pytest.mark.slow
def test_the_model_comparison_has_every_number(dry_run: tuple[subprocess.CompletedProcess, dict, str]) -> None:
    _, report, _ = dry_run
    bert = report["summary"]["bert"]
    ratios = bert["ratios"]
    for key in ("step_time_torchfl_over_native", "host_us_per_op_native", "host_us_per_op_torchfl"):
        assert ratios[key] > 0, (key, ratios)
    assert bert["torchfl"]["ops_per_step"] == bert["native"]["ops_per_step"] > 50, (
        bert["torchfl"]["ops_per_step"], bert["native"]["ops_per_step"])
    assert bert["torchfl"]["op_path"]["native"] > 0, bert["torchfl"]["op_path"]
    diffs = bert["differences"]
    # flemu computes float32 like the CPU: the first step agrees closely.
    assert diffs["loss_abs_diff"] < 1e-4, diffs
    assert diffs["gradients_missing_on_one_side"] == [], diffs
    assert diffs["gradient_largest_abs_diff"]["max_abs"] < 1e-3 * max(1.0, diffs["gradient_max_abs"]), diffs


@pytest.mark.slow
def test_op_numerics_cover_the_cases_and_pass(dry_run: tuple[subprocess.CompletedProcess, dict, str]) -> None:
    _, report, md = dry_run
    cases = report["summary"]["ops"]["cases"]
    failing = [c for c in cases if not c.get("ok")]
    assert len(cases) >= 20 and failing == [], failing
    assert report["summary"]["ops"]["registration"]["kernels"] > 0, report["summary"]["ops"]["registration"]
    assert "| stage | status | seconds | note |" in md and "step time torch-fl/native" in md, md[:2000]


@pytest.mark.slow
def test_a_failing_stage_is_recorded_and_the_next_runs(tmp_path: Path) -> None:
    # A plugin path that does not exist: list and ops fail, the report says so,
    # and the run goes on to the end (models skipped through --models, no build).
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(CHECK), "run", "--out", str(tmp_path / "out"), "--plugin-path",
         str(tmp_path / "libmissing.so"), "--skip-conformance", "--skip-plugin-build", "--models", "bert",
         "--budget", "200"],
        env=dict(env, TORCH_FL_PLUGINS=""), capture_output=True, text=True, timeout=400, check=False,
    )
    report = json.loads((tmp_path / "out" / "device_check.json").read_text(encoding="utf-8"))
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["environment", "list", "ops", "bert"], list(stages)
    assert stages["list"]["status"] == "failed" and stages["ops"]["status"] == "failed", stages
    assert stages["bert"]["status"] == "failed", stages["bert"]
    assert "libmissing.so" in stages["ops"]["error"], stages["ops"]["error"]
    assert proc.returncode == 1, proc.returncode


def test_a_stage_out_of_time_is_interrupted_and_keeps_what_it_wrote(tmp_path: Path) -> None:
    # The conformance stage's runner: SIGINT when the time is up (the suite then
    # writes a partial report), a kill only after the grace period.
    spec = importlib.util.spec_from_file_location("device_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    partial = tmp_path / "partial.txt"
    code = (
        "import sys, time\n"
        "print('started', flush=True)\n"
        "try:\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        f"    open({str(partial)!r}, 'w').write('partial report')\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n"
    )
    # The check itself may run with SIGINT ignored (started with nohup or in
    # the background); its stages are interrupted all the same.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        t0 = time.monotonic()
        status, output = module.run_interruptible([sys.executable, "-c", code], dict(os.environ), timeout=5, grace=20)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (status, output.split()) == (3, ["started", "interrupted"]), (status, output)
    assert partial.read_text() == "partial report"
    assert time.monotonic() - t0 < 25
    # One that ignores SIGINT is killed after the grace period.
    stubborn = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
    status, _ = module.run_interruptible([sys.executable, "-c", stubborn], dict(os.environ), timeout=1, grace=1)
    assert status == -9, status
