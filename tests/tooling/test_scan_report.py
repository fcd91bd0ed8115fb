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
from torch_fl.tooling.op_map import likely_ops, op_base
from torch_fl.tooling.scan import scan_path, scan_source
from torch_fl.tooling.scan_report import ops_section, to_json, to_text

PROJECT = ROOT / "tests" / "tooling" / "fixtures" / "cuda_project"

REPORT = {
    "schema_version": "1.0",
    "plugin": {"name": "flemu", "version": "0.1.0"},
    "op_coverage": [
        {"op": "aten::convolution", "dtype": "float32", "status": "native"},
        {"op": "aten::convolution_backward", "dtype": "float32", "status": "native"},
        {"op": "aten::_fused_adamw_", "dtype": "float32", "status": "cpu_fallback"},
        {"op": "aten::_amp_update_scale_", "dtype": "float32", "status": "failed"},
        {"op": "aten::max_pool2d_with_indices_backward", "dtype": "float32",
         "status": "cpu_fallback"},
        {"op": "aten::max_pool2d_with_indices_backward", "dtype": "float64",
         "status": "native"},
        {"op": "aten::add.Tensor", "dtype": "float32", "status": "native"},
        {"op": "aten::add.Scalar", "dtype": "complex64", "status": "cpu_fallback"},
        {"op": "aten::relu", "dtype": "float32", "status": "native"},
        {"op": "aten::nll_loss_forward", "dtype": "float32", "status": "decomposed"},
    ],
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
                             "aten::max_pool2d_with_indices_backward"], sorted(risky)
    adamw = risky["aten::_fused_adamw_"]
    assert adamw.rows == (("aten::_fused_adamw_", "float32", "cpu_fallback"),), adamw
    assert adamw.phases == ("optimizer",), adamw
    assert [(Path(p).name, line) for p, line, _ in adamw.sources] == [("train.py", 64)], adamw
    pool = risky["aten::max_pool2d_with_indices_backward"]
    assert pool.rows == (("aten::max_pool2d_with_indices_backward", "float32", "cpu_fallback"),)
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
           "10 op/dtype rows), dtypes *, float16, float32, int64:" in text, text
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


@pytest.mark.parametrize("doc, message", [
    ({"schema_version": "1.0", "tests": []}, "has no op-coverage table (looked for op_coverage"),
    ([1, 2], "is a JSON list, expected an object"),
    ({"op_coverage": [{"dtype": "float32"}]}, "op_coverage[0] has no 'op' field"),
    ({"op_coverage": [{"op": "aten::mm", "status": "maybe"}]}, "status 'maybe' is not one of"),
    ({"op_coverage": [{"op": "aten::mm", "dtype": "float32"}]}, "a row needs a 'status'"),
])
def test_unusable_reports_are_explained(tmp_path: Path, doc: object, message: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(ReportError) as info:
        load_coverage(str(path))
    assert message in str(info.value), str(info.value)


def test_counts_and_nested_tables_and_newer_schema(tmp_path: Path) -> None:
    doc = {"schema_version": "2.1", "plugin": "npu",
           "coverage": {"aten::mm": {"float32": {"native": 3, "cpu_fallback": 1},
                                     "bfloat16": "failed"}}}
    table = load_coverage(str(write(tmp_path, doc)))
    assert [(r.op, r.dtype, r.status) for r in table.rows] == [
        ("aten::mm", "float32", "cpu_fallback"), ("aten::mm", "bfloat16", "failed")], table.rows
    assert table.notes and "newer than this torch-fl reads" in table.notes[0], table.notes


def test_cli_report_errors_exit_two(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    proc = subprocess.run([sys.executable, "-m", "torch_fl.cli", "scan", str(PROJECT), "--report",
                           str(missing)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.returncode
    assert f"no report at '{missing}'" in proc.stderr and "torchfl-conformance run" in proc.stderr
