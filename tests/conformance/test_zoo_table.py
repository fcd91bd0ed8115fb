"""torchfl-conformance zoo: the per-release regression table of the model zoo."""

from __future__ import annotations

import json
import math
from pathlib import Path

from torch_fl_conformance.cli import main
from torch_fl_conformance.zoo.parity import ParityResult
from torch_fl_conformance.zoo.table import build_table, render_markdown


def test_zoo_command_writes_markdown_and_json(tmp_path: Path) -> None:
    out = tmp_path / "table"
    code = main(["zoo", "--plugin", "flemu", "--steps", "2", "--models", "lstm_lm",
                 "--out", str(out)])
    table = json.loads((out / "zoo-table.json").read_text())
    assert code == 0 and table["passed"], table
    (r,) = table["rows"]
    assert r["model"] == "lstm_lm" and r["steps"] == 2 and r["fallback_count"] == 0
    assert r["step_time_device_s"] > 0 and r["step_time_cpu_s"] > 0
    assert math.isclose(r["step_time_ratio"], r["step_time_device_s"] / r["step_time_cpu_s"])
    assert r["peak_memory_bytes"] > 0 and r["final_loss_rel_delta"] < 1e-2
    assert table["plugin"]["device_type"] == "flemu"
    md = (out / "zoo-table.md").read_text()
    assert "| lstm_lm | pass |" in md and "2 training steps" in md


def _result(failures: list[str]) -> ParityResult:
    return ParityResult(
        model="m", device="x:0", forward_max_abs=0.5, forward_max_rel=0.1, grad_max_abs=math.inf,
        grad_max_rel=0.0, losses_cpu=[2.0, 1.0], losses_device=[2.0, 1.5], eval_max_abs=None,
        amp_max_abs=None, fallback_ops=["aten::foo (float32)"], step_time_s=0.2,
        peak_memory_bytes=3 << 20, cpu_step_time_s=0.1, failures=failures)


def test_a_failing_model_is_a_failing_table() -> None:
    table = build_table([_result(["loss at step 1: device 1.5 vs cpu 1"])], {"plugin_name": "x"}, 2)
    (r,) = table["rows"]
    assert not table["passed"] and r["final_loss_rel_delta"] == 0.5
    assert r["grad_max_abs"] is None  # not finite: no number to compare across releases
    assert r["step_time_ratio"] == 2.0 and r["fallback_count"] == 1
    md = render_markdown(table)
    assert "| m | FAIL |" in md and "## Failures" in md and "loss at step 1" in md


def test_zoo_command_refuses_bad_arguments(tmp_path: Path, capsys) -> None:
    assert main(["zoo", "--plugin", "flemu", "--models", "nope", "--out", str(tmp_path)]) == 2
    assert "the zoo has: resnet18" in capsys.readouterr().err
    assert main(["zoo", "--plugin", "flemu", "--steps", "0"]) == 2
    assert "--steps must be at least 1" in capsys.readouterr().err
