"""`torchfl scan --report`: the operators the scanned code likely runs, judged per
dtype against a coverage table (a certification report or a TORCH_FL_OP_STATS
file): one line each, native / fallback / failed / unsupported dtypes, where used."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, assert_ok, run_python
from torch_fl.tooling.coverage import ReportError, load_coverage
from torch_fl.tooling.op_map import forward_ops_of_opinfo, likely_ops, op_base
from torch_fl.tooling.scan import scan_path, scan_source
from torch_fl.tooling.scan_report import WIDTH, _fit, _fit_lines, ops_section, to_json, to_text

PROJECT = ROOT / "tests" / "tooling" / "fixtures" / "cuda_project"
# A real certification report of flemu's minimal profile (a new vendor's twelve
# kernels), trimmed to the fields the scan reads; written by
#   FLEMU_PROFILE=minimal torchfl-conformance run --plugin flemu --level L1 \
#       --ops isfinite,mul,nan_to_num,allclose -j 1
# Its op_db sweep names aten::mul.Tensor among the fallbacks of isfinite's and
# allclose's float32 samples (they multiply booleans), while its op_stats count
# every float32 mul as native.
MINIMAL_REPORT = ROOT / "tests" / "tooling" / "fixtures" / "flemu_minimal_report.json"

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
        # The sample's dtype, not the call's: the muls of isfinite run on booleans.
        {"op": "isfinite", "dtype": "float32", "class": "fallback",
         "fallback_ops": ["aten::mul.Tensor"]},
        # An operator the counts do not cover: the sweep is all there is.
        {"op": "nn.functional.embedding", "dtype": "float32", "class": "fallback",
         "fallback_ops": ["aten::embedding"]},
    ]},
    "op_stats": {"rows": [
        stat("aten::convolution", "float32", native=40),
        stat("aten::convolution_backward", "float32", native=12),
        stat("aten::_fused_adamw_", "float32", cpu_fallback=3),
        stat("aten::_amp_update_scale_", "float32", failed=1),
        stat("aten::max_pool2d_with_indices_backward", "float64", native=2),
        stat("aten::max_pool2d_with_indices_backward", "float32", cpu_fallback=2),
        stat("aten::mul.Tensor", "float32", native=50),
        stat("aten::mul.Tensor", "bool", cpu_fallback=3),
        # Mostly native with an odd call on the fallback: the plugin has the kernel.
        stat("aten::mm", "float32", native=30, cpu_fallback=1),
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


def judged(section, op: str) -> dict[str, str]:
    for group in (section.at_risk, section.untested, section.on_device):
        for j in group:
            if j.op == op:
                return dict(j.dtypes)
    raise AssertionError(f"{op} is not in the section")


def test_each_operator_is_judged_per_dtype_from_the_counts(tmp_path: Path) -> None:
    result = scan_path(str(PROJECT))
    section = ops_section(result, load_coverage(str(write(tmp_path, REPORT))))
    assert section.dtypes == ("float32", "int64", "float16"), section.dtypes
    risky = {j.op: dict(j.dtypes) for j in section.at_risk}
    assert sorted(risky) == ["aten::_amp_update_scale_", "aten::_fused_adamw_",
                             "aten::max_pool2d_with_indices_backward",
                             "aten::native_dropout"], sorted(risky)
    assert risky["aten::_fused_adamw_"]["float32"] == "fallback", risky
    assert risky["aten::_amp_update_scale_"]["float32"] == "failed", risky
    # Counted per dtype: float32 fell back, float64 (not judged here) ran natively.
    assert risky["aten::max_pool2d_with_indices_backward"]["float32"] == "fallback", risky
    # The op_db sweep found dropout's float32 results wrong.
    assert risky["aten::native_dropout"]["float32"] == "failed", risky
    (adamw,) = [j for j in section.at_risk if j.op == "aten::_fused_adamw_"]
    assert adamw.phases == ("optimizer",), adamw
    assert [(Path(p).name, line) for p, line in adamw.lines] == [("train.py", 64)], adamw
    # A complex64 fallback of add does not concern float code; decomposed stays on the device.
    on_device = {j.op for j in section.on_device}
    assert {"aten::add", "aten::nll_loss_forward", "aten::convolution_backward",
            "aten::mm"} <= on_device, on_device
    assert judged(section, "aten::nll_loss_forward")["float32"] == "decomposed"
    assert judged(section, "aten::mm") == {"float32": "native", "int64": "untested",
                                           "float16": "untested"}, section
    untested = {j.op for j in section.untested}
    assert "aten::native_batch_norm" in untested and "aten::convolution" not in untested, untested


def test_the_sweeps_fallbacks_count_only_where_the_counts_are_silent(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import torch\ny = a * b\ne = torch.nn.Embedding(10, 4)\n")
    section = ops_section(scan_path(str(src)), load_coverage(str(write(tmp_path, REPORT))))
    # isfinite's float32 samples name mul.Tensor, but every float32 mul ran natively.
    assert judged(section, "aten::mul")["float32"] == "native", section
    assert "aten::mul" in {j.op for j in section.on_device}, section
    # No call of embedding was counted: the sweep's fallback is the evidence.
    assert judged(section, "aten::embedding")["float32"] == "fallback", section


def test_dtypes_the_device_does_not_advertise_are_unsupported(tmp_path: Path) -> None:
    doc = {**REPORT, "plugin": {**REPORT["plugin"], "capabilities": ["fp64", "timing_events"]}}
    src = tmp_path / "half.py"
    src.write_text("import torch\ny = (a * b).to(torch.float16)\n")
    section = ops_section(scan_path(str(src)), load_coverage(str(write(tmp_path, doc))))
    assert judged(section, "aten::mul") == {"float32": "native", "int64": "untested",
                                            "float16": "unsupported"}, section
    assert [j.op for j in section.at_risk] == ["aten::mul"], section
    text = to_text(scan_path(str(src)), section)
    assert "    aten::mul [forward]: native float32 | unsupported float16" in text, text


def test_text_and_json_output(tmp_path: Path) -> None:
    result = scan_path(str(PROJECT / "train.py"))
    section = ops_section(result, load_coverage(str(write(tmp_path, REPORT))))
    text = to_text(result, section)
    lines = text.splitlines()
    ops_lines = lines[lines.index("") + 1:]
    words = " ".join(" ".join(ops_lines).split())  # the header wraps with the path's length
    assert words.startswith(f"operators against certification report {tmp_path / 'cert.json'} "
                            "(flemu 0.1.0, 18 op/dtype rows) dtypes judged: float32, int64, "
                            f"float16; source lines relative to {PROJECT} "), words
    assert "    aten::_fused_adamw_ [optimizer]: fallback float32" in lines, text
    assert "        used at train.py:64 (1 line)" in lines, text
    too_long = [line for line in ops_lines if len(line) > WIDTH]
    assert not too_long, too_long
    doc = json.loads(to_json(result, section))
    assert doc["version"] == 2, doc["version"]
    assert doc["ops"]["at_risk"][0]["op"] == "aten::_amp_update_scale_", doc["ops"]
    assert doc["ops"]["at_risk"][0]["dtypes"] == {
        "float32": "failed", "int64": "untested", "float16": "untested"}, doc["ops"]
    assert doc["ops"]["coverage"]["plugin"] == "flemu", doc["ops"]
    assert doc["ops"]["capabilities"] is None, doc["ops"]  # the REPORT above names none


def test_lists_are_cut_to_the_line_width_with_a_count() -> None:
    items = [f"aten::operator_{i}" for i in range(40)]
    line = _fit("  head: ", items)
    assert len(line) <= WIDTH and line.endswith(" more"), line
    shown = line.removeprefix("  head: ").split(", ")
    assert int(shown[-1].split()[0].lstrip("+")) == 40 - (len(shown) - 1), line
    lines = _fit_lines("  on the device (40 operators): ", items, "    ", max_lines=3)
    assert len(lines) == 3 and all(len(x) <= WIDTH for x in lines), lines
    listed = len(re.findall(r"aten::operator_\d+", " ".join(lines)))
    assert lines[-1].endswith(f"+{40 - listed} more"), lines
    assert _fit_lines("  h: ", items[:3], "    ") == [
        "  h: aten::operator_0, aten::operator_1, aten::operator_2"]


def model_source(name: str) -> Path:
    spec = importlib.util.find_spec("transformers")
    assert spec is not None and spec.submodule_search_locations, (
        "transformers (requirements-dev.txt) is needed: its model sources are the real code "
        "this test scans")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / name / f"modeling_{name}.py"
    assert path.is_file(), path
    return path


@pytest.mark.parametrize("source", ["t5", "gpt2"])
def test_a_real_model_against_a_real_report_is_short_and_right(source: str) -> None:
    path = model_source(source)
    proc = subprocess.run(
        [sys.executable, "-m", "torch_fl.cli", "scan", str(path), "--report", str(MINIMAL_REPORT)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # no CUDA-specific code
    text = proc.stdout
    lines = text.splitlines()
    # One entry per operator, not one per coverage row: a few KB, short lines.
    assert len(text) < 6000, (len(text), text)
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long, too_long
    entries = [line.split()[0] for line in lines if line.startswith("    aten::")]
    assert len(entries) == len(set(entries)), sorted(entries)
    (mul,) = [line for line in lines if line.startswith(("    aten::mul [", "  on the device"))
              and "aten::mul" in line]
    # float32 (and int64) mul run in the minimal profile's kernel, whatever the sweep says.
    if mul.startswith("    aten::mul ["):
        verdict = mul.split(": ", 1)[1]
        assert verdict.startswith("native float32"), mul
        assert "fallback float32" not in verdict, mul
    section = ops_section(scan_path(str(path)), load_coverage(str(MINIMAL_REPORT)))
    assert judged(section, "aten::mul")["float32"] == "native", section


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
    assert section.at_risk == [] and [j.op for j in section.on_device] == ["aten::relu"], section
    assert judged(section, "aten::relu")["float32"] == "native", section


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
    assert [j.op for j in section.on_device] == ["aten::mm", "aten::relu"], section
    assert section.at_risk == [] and section.untested == [], section


def test_cli_report_errors_exit_two(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    proc = subprocess.run([sys.executable, "-m", "torch_fl.cli", "scan", str(PROJECT), "--report",
                           str(missing)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.returncode
    assert f"no report at '{missing}'" in proc.stderr and "torchfl-conformance run" in proc.stderr
