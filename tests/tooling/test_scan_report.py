"""`torchfl scan --report`: the operators the scanned code likely runs that the
plugin runs on the CPU fallback or fails, from a coverage table (a certification
report or a TORCH_FL_OP_STATS file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, assert_ok, run_python
from torch_fl.tooling.coverage import ReportError, load_coverage
from torch_fl.tooling.op_map import forward_ops_of_opinfo, likely_ops, op_base
from torch_fl.tooling.scan import scan_path, scan_source
from torch_fl.tooling.scan_report import ops_section, to_json, to_text

PROJECT = ROOT / "tests" / "tooling" / "fixtures" / "cuda_project"

def stat(op: str, dtype: str, **counts: int) -> dict:
    row = {"op": op, "dtype": dtype, "native": 0, "decomposed": 0, "cpu_fallback": 0, "failed": 0,
           "time_ns": 0, "bytes_copied": 0}
    row.update(counts)
    return row


# The parts of a torchfl-conformance report (schema 1.x) the scan reads.
REPORT = {
    "schema": "torchfl-conformance-report",
    "schema_version": "1.0",
    "plugin": {"plugin_name": "flemu", "version": "0.1.0", "device_type": "flemu"},
    "coverage": {"classes": ["native", "decomposed", "fallback", "error", "wrong", "crash",
                             "timeout", "unsupported"], "ops": [
        {"op": "nn.functional.conv2d", "dtype": "float32", "class": "native", "fallback_ops": []},
        {"op": "nn.functional.max_pool2d", "dtype": "float32", "class": "fallback",
         "fallback_ops": ["aten::max_pool2d_with_indices_backward"]},
        {"op": "nn.functional.dropout", "dtype": "float32", "class": "wrong", "fallback_ops": []},
        {"op": "atan2", "dtype": "float32", "class": "fallback", "fallback_ops": ["aten::atan2.out"]},
    ]},
    "op_stats": {"rows": [
        stat("aten::convolution", "float32", native=40),
        stat("aten::convolution_backward", "float32", native=12),
        stat("aten::_fused_adamw_", "float32", cpu_fallback=3),
        stat("aten::_amp_update_scale_", "float32", failed=1),
        stat("aten::max_pool2d_with_indices_backward", "float64", native=2),
        stat("aten::add.Tensor", "float32", native=100),
        stat("aten::add.Scalar", "complex64", cpu_fallback=2),
        stat("aten::relu", "float32", native=10),
        stat("aten::nll_loss_forward", "float32", decomposed=4),
    ], "totals": {}},
}


def write(tmp_path: Path, doc: object, name: str = "cert.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_op_base() -> None:
    assert op_base("aten::add.Tensor") == "aten::add"
    assert op_base("aten::convolution") == "aten::convolution"
    assert op_base("add.out") == "aten::add"


def test_training_script_maps_to_forward_backward_and_optimizer_ops() -> None:
    result = scan_path(str(PROJECT))
    ops = {(u.op, u.phase) for u in likely_ops(result.calls)}
    for expected in [("aten::convolution", "forward"), ("aten::convolution_backward", "backward"),
                     ("aten::native_batch_norm_backward", "backward"),
                     ("aten::_fused_adamw_", "optimizer"), ("aten::nll_loss_forward", "forward"),
                     ("aten::_amp_foreach_non_finite_check_and_unscale_", "forward"),
                     ("aten::_foreach_norm", "forward"), ("aten::addmm", "forward")]:
        assert expected in ops, (expected, sorted(ops))
    # make_loader's torch.randn has no device=: it stays on the CPU.
    assert not any(op == "aten::normal_" for op, _ in ops), sorted(ops)
    assert result.dtypes == {"float16"}, result.dtypes


def test_no_backward_ops_without_backward() -> None:
    src = "import torch\nm = torch.nn.Conv2d(3, 8, 3)\ny = m(torch.ones(1, 3, 8, 8))\n"
    ops = {u.op for u in likely_ops(scan_source(src, "inf.py").calls)}
    assert ops == {"aten::convolution"}, ops


def test_optimizer_flags_choose_the_kernels() -> None:
    src = ("import torch\n"
           "a = torch.optim.AdamW(p, fused=True)\n"
           "b = torch.optim.Adam(p)\n"
           "c = torch.optim.SGD(p, foreach=False)\n")
    by_line: dict[int, set[str]] = {}
    for u in likely_ops(scan_source(src, "o.py").calls):
        for _path, line, _name in u.sources:
            by_line.setdefault(line, set()).add(u.op)
    assert by_line[2] == {"aten::_fused_adamw_"}, by_line
    assert "aten::_foreach_addcdiv_" in by_line[3] and "aten::addcdiv_" not in by_line[3], by_line
    assert by_line[4] == {"aten::add_", "aten::mul_"}, by_line


def test_report_lists_cpu_and_failed_ops_with_their_sources(tmp_path: Path) -> None:
    result = scan_path(str(PROJECT))
    section = ops_section(result, load_coverage(str(write(tmp_path, REPORT))))
    risky = {r.op: r for r in section.cpu_or_failed}
    assert sorted(risky) == ["aten::_amp_update_scale_", "aten::_fused_adamw_",
                             "aten::max_pool2d_with_indices_backward",
                             "aten::native_dropout"], sorted(risky)
    adamw = risky["aten::_fused_adamw_"]
    assert adamw.rows == (("aten::_fused_adamw_", "float32", "cpu_fallback"),), adamw
    assert adamw.phases == ("optimizer",), adamw
    assert [(Path(p).name, line) for p, line, _ in adamw.sources] == [("train.py", 64)], adamw
    # From the op_db sweep: an ATen fallback, and an OpInfo with wrong results.
    pool = risky["aten::max_pool2d_with_indices_backward"]
    assert pool.rows == (("aten::max_pool2d_with_indices_backward", "float32", "cpu_fallback"),)
    assert risky["aten::native_dropout"].rows == (("aten::native_dropout", "float32", "failed"),)
    assert risky["aten::_amp_update_scale_"].rows[0][2] == "failed"
    # A complex64 fallback of add does not concern float code; decomposed stays on the device.
    assert "aten::add" in section.native and "aten::nll_loss_forward" in section.native
    assert "aten::convolution_backward" in section.native, section.native
    untested = {r.op for r in section.not_in_report}
    assert "aten::native_batch_norm" in untested and "aten::convolution" not in untested, untested


def test_text_and_json_output(tmp_path: Path) -> None:
    result = scan_path(str(PROJECT / "train.py"))
    section = ops_section(result, load_coverage(str(write(tmp_path, REPORT))))
    text = to_text(result, section)
    assert f"operators against certification report {tmp_path / 'cert.json'} (flemu 0.1.0, " \
           "12 op/dtype rows), dtypes *, float16, float32, int64:" in text, text
    assert "    aten::_fused_adamw_ [optimizer]: float32 cpu_fallback" in text, text
    assert f"        from {PROJECT / 'train.py'}:64 (torch.optim.AdamW)" in text, text
    doc = json.loads(to_json(result, section))
    assert doc["ops"]["cpu_or_failed"][0]["op"] == "aten::_amp_update_scale_", doc["ops"]
    assert doc["ops"]["coverage"]["plugin"] == "flemu", doc["ops"]


def test_op_stats_file_works_as_a_report(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    assert_ok(run_python(
        """
        import torch
        x = torch.rand(8, 8, device="flemu")
        torch.atan2(x, x)
        torch.relu(x)
        """, env={"TORCH_FL_OP_STATS": str(stats), "TORCH_FL_FALLBACK": "silent"}))
    table = load_coverage(str(stats))
    assert table.kind == "op stats" and table.plugin == "flemu", table
    statuses = {(r.op, r.dtype): r.status for r in table.rows}
    assert statuses[("aten::atan2.out", "float32")] == "cpu_fallback", statuses
    assert statuses[("aten::relu", "float32")] == "native", statuses
    src = tmp_path / "uses_atan2.py"
    src.write_text("import torch\ny = torch.atan2(a, b)\nz = torch.relu(y)\n")
    # atan2 is not in the op map: only mapped calls are judged.
    section = ops_section(scan_path(str(src)), table)
    assert section.cpu_or_failed == [] and section.native == ["aten::relu"], section


CONF = {"schema": "torchfl-conformance-report", "schema_version": "1.0"}


@pytest.mark.parametrize("doc, message", [
    (CONF, "has neither 'op_stats' nor 'coverage'; it was cut short"),
    ([1, 2], "is a JSON list, expected an object"),
    ({"tests": []}, "is neither a conformance report (schema 'torchfl-conformance-report') nor"),
    ({**CONF, "op_stats": {"rows": [{"dtype": "float32"}]}}, "op_stats.rows[0] has no 'op' field"),
    ({**CONF, "coverage": {"ops": [{"op": "mm"}]}}, "coverage.ops[0] lacks 'op' or 'class'"),
    ({"rows": [{"op": "aten::mm", "dtype": "float32"}]},
     "none of native, decomposed, cpu_fallback, failed is positive"),
])
def test_unusable_reports_are_explained(tmp_path: Path, doc: object, message: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(ReportError) as info:
        load_coverage(str(path))
    assert message in str(info.value), str(info.value)


def test_newer_schema_and_missing_sweep_are_noted(tmp_path: Path) -> None:
    doc = {**CONF, "schema_version": "2.1", "plugin": {"plugin_name": "npu", "version": "3"},
           "op_stats": {"rows": [stat("aten::mm", "float32", native=3, cpu_fallback=1)]}}
    table = load_coverage(str(write(tmp_path, doc)))
    assert [(r.op, r.dtype, r.status) for r in table.rows] == [
        ("aten::mm", "float32", "cpu_fallback")], table.rows
    assert (table.plugin, table.plugin_version) == ("npu", "3"), table
    assert "newer than this torch-fl reads" in table.notes[0], table.notes
    assert "no op_db sweep (an L0 run)" in table.notes[1], table.notes


def test_opinfo_names_map_to_aten() -> None:
    assert forward_ops_of_opinfo("nn.functional.conv2d") == ("aten::convolution",)
    assert forward_ops_of_opinfo("mm") == ("aten::mm",)
    assert forward_ops_of_opinfo("atan2") == ("aten::atan2",)
    assert forward_ops_of_opinfo("linalg.vector_norm") == ("aten::linalg_vector_norm",)


@pytest.mark.slow
def test_a_real_conformance_report(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "torch_fl_conformance", "run", "--plugin", "flemu", "--level", "L0",
         "--report", str(tmp_path / "cert")], capture_output=True, text=True, timeout=900,
        check=False)
    report = tmp_path / "cert" / "report.json"
    assert report.exists(), (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    table = load_coverage(str(report))
    assert table.kind == "certification report" and table.plugin == "flemu", table.describe()
    statuses = {(r.base, r.dtype): r.status for r in table.rows}
    assert statuses[("aten::mm", "float32")] == "native", statuses
    src = tmp_path / "t.py"
    src.write_text("import torch\ny = torch.relu(torch.mm(a, b))\n")
    section = ops_section(scan_path(str(src)), table)
    assert section.native == ["aten::mm", "aten::relu"], section
    assert section.cpu_or_failed == [] and section.not_in_report == [], section


def test_cli_report_errors_exit_two(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    proc = subprocess.run([sys.executable, "-m", "torch_fl.cli", "scan", str(PROJECT), "--report",
                           str(missing)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.returncode
    assert f"no report at '{missing}'" in proc.stderr and "torchfl-conformance run" in proc.stderr
