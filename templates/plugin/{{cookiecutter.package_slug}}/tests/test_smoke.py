"""Smoke tests of the {{ cookiecutter.device_name }} device.

First the conformance suite's smoke level (L0), the same run that certifies the
plugin; then a few direct checks that each show one piece of the plugin at work:
the device, copies, memory, a native kernel from the kernel table, one from the
symbol convention, the CPU fallback for everything else, streams and events.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch_fl

DEVICE = "{{ cookiecutter.device_name }}"


def conformance_cli() -> str:
    """The torchfl-conformance command of this environment."""
    scripts = os.path.dirname(sys.executable)
    found = shutil.which(
        "torchfl-conformance", path=os.pathsep.join([scripts, os.environ.get("PATH", "")])
    )
    if found is None:
        pytest.fail(
            "torchfl-conformance is not installed in this environment; it ships with torch-fl "
            "(install torch-fl, then run the tests again)"
        )
    return found


def load_report(report_dir: Path, proc: subprocess.CompletedProcess) -> dict:
    """The JSON certification report the run wrote into report_dir."""
    path = report_dir / "report.json"
    assert path.is_file(), (
        f"the conformance run wrote no report.json (exit {proc.returncode})\n"
        f"{proc.stdout}\n{proc.stderr}"
    )
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report.get("schema") == "torchfl-conformance-report", (
        f"{path} is not a conformance report"
    )
    return report


def test_conformance_smoke_level(plugin: torch_fl.PluginHandle, tmp_path: Path) -> None:
    cmd = [conformance_cli(), "run", "--plugin", DEVICE, "--level", "L0", "--report", str(tmp_path)]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900)
    report = load_report(tmp_path, proc)
    level = report["level"]
    assert level["achieved"] == "L0" and level["levels"]["L0"]["met"], (
        f"the plugin did not achieve L0: {level['summary']}\nwhy: {level['levels']['L0']['why']}\n"
        f"report: {tmp_path / 'report.html'}"
    )
    assert report["plugin"]["device_type"] == DEVICE, report["plugin"]
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited with {proc.returncode}\n"
        f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )


def test_device_is_registered(plugin: torch_fl.PluginHandle) -> None:
    module = getattr(torch, DEVICE)
    assert plugin.name == DEVICE and plugin.plugin_name == DEVICE, plugin.summary()
    assert module.device_count() >= 1, f"device_count() = {module.device_count()}, expected >= 1"
    name = module.get_device_name(0)
    assert "{{ cookiecutter.chip_name }}" in name, f"device 0 is named {name!r}"


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.bool]
)
def test_copy_round_trip(device: torch.device, dtype: torch.dtype) -> None:
    host = (torch.arange(2 * 3 * 5) - 7).reshape(2, 3, 5).to(dtype)
    on_device = host.to(device)
    assert on_device.device == device, f"tensor is on {on_device.device}, expected {device}"
    back = on_device.cpu()
    assert torch.equal(back, host), f"round trip changed the data:\n{back}\nexpected\n{host}"
    # A strided view copied on the device, then back.
    view = on_device.transpose(0, 2).contiguous().cpu()
    assert torch.equal(view, host.transpose(0, 2).contiguous()), (
        f"transposed copy is wrong:\n{view}"
    )


def test_memory_is_accounted(device: torch.device) -> None:
    module = getattr(torch, DEVICE)
    free, total = module.mem_get_info(device)
    assert 0 < free <= total, f"mem_get_info() = ({free}, {total})"
    before = module.memory_allocated(device)
    block = torch.empty(1 << 20, dtype=torch.uint8, device=device)
    grown = module.memory_allocated(device) - before
    assert grown >= block.numel(), (
        f"memory_allocated grew by {grown} bytes for a {block.numel()}-byte tensor"
    )
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total + (1 << 30), dtype=torch.uint8, device=device)


def test_table_kernel_add_runs_natively(device: torch.device) -> None:
    a, b = torch.randn(4, 33), torch.randn(33)  # b broadcasts
    with torch_fl.fallback_mode("error"), torch_fl.op_stats_scope() as scope:
        out = torch.add(a.to(device), b.to(device), alpha=2.5)
    expected = torch.add(a, b, alpha=2.5)
    # PyTorch's CPU add fuses `a + alpha * b` into one rounding where it
    # vectorizes; this kernel rounds twice. Near a cancellation that one-ulp
    # difference of alpha * b exceeds allclose's atol=1e-8, so compare with
    # float32's own tolerances (rtol 1.3e-6, atol 1e-5).
    torch.testing.assert_close(out.cpu(), expected, msg=lambda m: f"add: {m}")
    stat = scope.table.get("aten::add.Tensor", "float32")
    assert stat.native == 1 and stat.cpu_fallback == 0, (
        f"aten::add.Tensor ran as {stat}\n{scope.table}"
    )
    # A Python scalar operand reaches the kernel as a one-element tensor.
    with torch_fl.fallback_mode("error"):
        shifted = a.to(device) + 1.5
    assert torch.allclose(shifted.cpu(), a + 1.5), f"a + 1.5 gave\n{shifted.cpu()}"


def test_symbol_kernel_mul_runs_natively(device: torch.device) -> None:
    a, b = torch.randn(4, 33), torch.randn(4, 33)
    with torch_fl.fallback_mode("error"), torch_fl.op_stats_scope() as scope:
        out = a.to(device) * b.to(device)
    assert torch.allclose(out.cpu(), a * b), f"mul gave\n{out.cpu()}\nexpected\n{a * b}"
    stat = scope.table.get("aten::mul.Tensor", "float32")
    assert stat.native == 1 and stat.cpu_fallback == 0, (
        f"aten::mul.Tensor ran as {stat}\n{scope.table}"
    )


def test_operators_without_a_kernel_fall_back(device: torch.device) -> None:
    x = torch.linspace(-3, 3, 50)
    with torch_fl.fallback_mode("silent"), torch_fl.op_stats_scope() as scope:
        out = torch.sin(x.to(device))
    assert torch.allclose(out.cpu(), torch.sin(x)), f"sin gave {out.cpu()}"
    # PyTorch runs sin through its out= overload: count every aten::sin* row.
    rows = [r for r in scope.table if r.op.startswith("aten::sin")]
    assert sum(r.cpu_fallback for r in rows) >= 1 and sum(r.native for r in rows) == 0, (
        f"aten::sin should have run on the CPU fallback:\n{scope.table}"
    )


def test_streams_and_events_order_work(device: torch.device) -> None:
    module = getattr(torch, DEVICE)
    a = torch.randn(1 << 16).to(device)
    side = module.Stream(device)
    start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
    ready = module.Event()
    ready.record()  # on the current stream, after the upload of a
    with module.stream(side):
        side.wait_event(ready)
        start.record()
        out = a + a
        end.record()
    end.synchronize()
    assert end.query(), "an event is not complete after synchronize()"
    assert start.elapsed_time(end) >= 0.0, f"elapsed_time = {start.elapsed_time(end)}"
    module.current_stream(device).wait_stream(side)
    assert torch.equal(out.cpu(), a.cpu() * 2), "work on a side stream gave the wrong result"


def test_kernel_schemas_match_this_pytorch(device: torch.device) -> None:
    # Each kernel states the schema it was written for (TFL_KernelDesc.schema);
    # a PyTorch whose schema differs has the kernel refused or adapted.
    handle = torch_fl.get_plugin()
    refused = {op: why for op, why in handle.rejected_kernels if "written for" in why}
    assert not refused, refused
    assert "aten::add.Tensor" in handle.kernels, handle.kernels
    assert not handle.adapted_kernels, handle.adapted_kernels
