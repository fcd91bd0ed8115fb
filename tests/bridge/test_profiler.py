"""Profiling on the device through both PyTorch profilers.

- torch.autograd.profiler.profile(use_device="flemu"): PyTorch's PrivateUse1 stubs time
  every operator with two of the plugin's timing events on the current stream;
- torch.profiler.profile(activities=[CPU, PrivateUse1]): the bridge's Kineto activity
  profiler times every native kernel on its stream and links it to the host operator
  that launched it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.autograd import DeviceType
from torch.autograd.profiler import profile as autograd_profile
from torch.profiler import ProfilerActivity, record_function

import torch_fl

DEVICE = "flemu"
# No operator of these tests takes a minute: longer is a broken clock, not a slow run.
ABSURD_US = 60e6


def device_profile(**kwargs: object) -> torch.profiler.profile:
    return torch.profiler.profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], **kwargs
    )


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(DEVICE)


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    # First calls compute output metadata (milliseconds, once); keep that out of the profiles.
    x = torch.randn(64, 64, device=DEVICE)
    (x @ x + x).relu().sum()
    model = mlp()
    model(torch.randn(8, 16, device=DEVICE)).sum().backward()
    torch.flemu.synchronize()


def kernels(prof: object) -> list:
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def host_events(prof: object) -> list:
    return [e for e in prof.events() if e.device_type == DeviceType.CPU]


def kineto_launches(prof: object) -> tuple[dict, list]:
    """Kineto's own records: host ops by correlation id, and the device
    kernels, each naming the op that launched it by that id (FunctionEvent
    carries the link only from torch 2.13 on)."""
    events = prof.profiler.kineto_results.events()
    ops = {e.correlation_id(): e for e in events if e.device_type() == DeviceType.CPU}
    return ops, [e for e in events if e.device_type() == DeviceType.PrivateUse1]


def assert_sane(averages: object) -> None:
    for avg in averages:
        for field in ("cpu_time_total", "self_cpu_time_total", "device_time_total",
                      "self_device_time_total"):
            value = getattr(avg, field)
            assert 0 <= value < ABSURD_US, f"{avg.key}.{field} = {value} us"
        assert avg.count > 0, (avg.key, avg.count)


# ---------------------------------------------------------------------------
# torch.autograd.profiler.profile(use_device=...): the PrivateUse1 stubs
# ---------------------------------------------------------------------------


def test_stubs_record_named_events_with_device_time() -> None:
    a = torch.randn(256, 256, device=DEVICE)
    with autograd_profile(use_device=DEVICE) as prof:
        b = a @ a
        b + a
    names = [e.name for e in prof.function_events]
    assert "aten::mm" in names and "aten::add" in names, names
    mm = next(e for e in prof.function_events if e.name == "aten::mm")
    assert 0 < mm.device_time_total < ABSURD_US, mm.device_time_total
    assert 0 <= mm.cpu_time_total < ABSURD_US, mm.cpu_time_total


def test_stubs_key_averages_are_sane() -> None:
    x = torch.randn(32, 32, device=DEVICE)
    with autograd_profile(use_device=DEVICE) as prof:
        for _ in range(10):
            x + x
    averages = prof.key_averages()
    assert_sane(averages)
    calls = sum(a.count for a in averages if a.key == "aten::add")
    assert calls == 10, [(a.key, a.count) for a in averages]
    assert prof.self_cpu_time_total > 0, prof.self_cpu_time_total


def test_stubs_record_function_nesting_and_table() -> None:
    x = torch.randn(64, 64, device=DEVICE)
    with autograd_profile(use_device=DEVICE) as prof:
        with record_function("outer"):
            with record_function("inner"):
                y = x @ x
            y.relu()
    names = {e.name for e in prof.function_events}
    assert {"outer", "inner", "aten::mm", "aten::relu"} <= names, names
    inner = next(e for e in prof.function_events if e.name == "inner")
    assert inner.cpu_parent is not None and inner.cpu_parent.name == "outer", inner.cpu_parent
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=20)
    assert "aten::mm" in table and "FLEMU" in table, table


def test_stubs_backward_and_streams() -> None:
    model = mlp()
    x = torch.randn(8, 16, device=DEVICE)
    stream = torch.Stream(device=DEVICE)
    with autograd_profile(use_device=DEVICE) as prof:
        model(x).sum().backward()
        with stream:
            (x * 2).sum()
    names = {e.name for e in prof.function_events}
    assert any("Backward" in n for n in names), names
    assert "aten::mul" in names, names
    assert_sane(prof.key_averages())


def test_stubs_chrome_trace_is_json(tmp_path: Path) -> None:
    x = torch.randn(32, 32, device=DEVICE)
    with autograd_profile(use_device=DEVICE) as prof:
        x @ x
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("name") == "aten::mm" for e in events), events[:5]


# ---------------------------------------------------------------------------
# torch.profiler with ProfilerActivity.PrivateUse1: kernel activities
# ---------------------------------------------------------------------------


def test_native_kernels_are_device_events_named_by_schema() -> None:
    a = torch.randn(128, 128, device=DEVICE)
    with device_profile() as prof:
        b = a @ a
        (b + a).relu()
    names = sorted(k.name for k in kernels(prof))
    assert names == ["aten::add.Tensor", "aten::mm", "aten::relu"], names
    for k in kernels(prof):
        assert k.device_index == 0, (k.name, k.device_index)
        assert 0 < k.time_range.elapsed_us() < ABSURD_US, (k.name, k.time_range.elapsed_us())


def test_device_time_is_attributed_to_the_launching_op() -> None:
    a = torch.randn(128, 128, device=DEVICE)
    with device_profile() as prof:
        a @ a
        a + a
    by_name = {e.name: e for e in host_events(prof)}
    mm, add = by_name["aten::mm"], by_name["aten::add"]
    assert [k.name for k in mm.kernels] == ["aten::mm"], mm.kernels
    assert [k.name for k in add.kernels] == ["aten::add.Tensor"], add.kernels
    assert 0 < mm.device_time_total < ABSURD_US, mm.device_time_total
    # Every kernel found its host op: the device total equals the ops' device totals.
    top = [e for e in host_events(prof) if e.cpu_parent is None]
    assert sum(e.device_time_total for e in top) == pytest.approx(
        sum(k.time_range.elapsed_us() for k in kernels(prof))
    )


def test_kernels_lie_in_their_ops_timeline() -> None:
    a = torch.randn(256, 256, device=DEVICE)
    with device_profile() as prof:
        for _ in range(3):
            a = (a @ a).relu() / 256
        torch.flemu.synchronize()
    ops, launched = kineto_launches(prof)
    assert len(launched) >= 9, [e.name() for e in launched]  # mm, relu, div three times
    starts = [e.start_ns() for e in ops.values()]
    ends = [e.start_ns() + e.duration_ns() for e in ops.values()]
    tolerance_ns = 2_000_000  # the host time of the device clock's anchor is known to this much
    for k in launched:
        op = ops[k.linked_correlation_id()]
        assert k.start_ns() >= op.start_ns() - tolerance_ns, (k.name(), k.start_ns(), op.name(), op.start_ns())
        assert min(starts) - tolerance_ns <= k.start_ns() <= max(ends) + tolerance_ns
        assert k.duration_ns() >= 0


def test_key_averages_with_device_time() -> None:
    model = mlp()
    x = torch.randn(8, 16, device=DEVICE)
    with device_profile() as prof:
        for _ in range(5):
            model(x)
    averages = prof.key_averages()
    assert_sane(averages)
    host = {a.key: a for a in averages if a.device_type == DeviceType.CPU}
    for op in ("aten::addmm", "aten::relu"):
        assert host[op].count == 5 * (2 if op == "aten::addmm" else 1), host[op].count
        assert host[op].device_time_total > 0, (op, host[op].device_time_total)
    table = averages.table(sort_by="device_time_total", row_limit=20)
    assert "aten::addmm" in table and "FLEMU" in table, table


def test_backward_kernels_are_linked() -> None:
    model = mlp()
    x = torch.randn(8, 16, device=DEVICE)
    with device_profile() as prof:
        model(x).sum().backward()
    ks = kernels(prof)
    ops, launched = kineto_launches(prof)
    assert len(launched) == len(ks)
    assert all(k.linked_correlation_id() in ops for k in launched), [
        (k.name(), k.linked_correlation_id()) for k in launched if k.linked_correlation_id() not in ops
    ]
    backward = [e for e in host_events(prof) if "Backward" in e.name]
    assert backward and sum(e.device_time_total for e in backward) > 0, [
        (e.name, e.device_time_total) for e in backward
    ]
    mm = [k for k in ks if k.name in ("aten::mm", "aten::addmm")]
    assert len(mm) >= 4, [k.name for k in ks]  # two forward, at least two for gradients


def test_streams_and_devices_are_resources() -> None:
    s1 = torch.Stream(device=DEVICE)
    s2 = torch.Stream(device=DEVICE)
    x = torch.randn(64, 64, device=DEVICE)
    y = torch.randn(64, 64, device=f"{DEVICE}:1")
    torch.flemu.synchronize()
    with device_profile() as prof:
        with s1:
            x * 2
        with s2:
            x - 1
        y + 1
    rows = {k.name: (k.device_index, k.device_resource_id) for k in kernels(prof)}
    assert rows["aten::mul.Tensor"] == (0, s1.stream_id), rows
    assert rows["aten::sub.Tensor"] == (0, s2.stream_id), rows
    assert rows["aten::add.Tensor"] == (1, 0), rows


def test_chrome_trace_shows_kernels_on_stream_rows(tmp_path: Path) -> None:
    stream = torch.Stream(device=DEVICE)
    x = torch.randn(64, 64, device=DEVICE)
    with device_profile() as prof:
        x @ x
        with stream:
            x + x
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernel_events = [e for e in events if e.get("cat") == "kernel"]
    names = sorted(e["name"] for e in kernel_events)
    assert names == ["aten::add.Tensor", "aten::mm"], kernel_events
    host_ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    for e in kernel_events:
        assert e["dur"] >= 0, e
        op = host_ops[e["args"]["External id"]]
        assert e["name"].split(".")[0] == op["name"], (e, op)
        assert rows[(e["pid"], e["tid"])] == f"stream {e['tid']}", (e, rows)
        assert processes[e["pid"]] == f"{DEVICE}:0", processes
    assert {e["tid"] for e in kernel_events} == {0, stream.stream_id}, kernel_events


def test_autograd_profiler_with_kineto_records_kernels() -> None:
    x = torch.randn(64, 64, device=DEVICE)
    with autograd_profile(use_device=DEVICE, use_kineto=True) as prof:
        x @ x
    mm = next(e for e in prof.function_events if e.name == "aten::mm")
    assert [k.name for k in mm.kernels] == ["aten::mm"], mm.kernels
    assert mm.device_time_total > 0, mm.device_time_total


def test_only_recording_sessions_time_kernels() -> None:
    x = torch.randn(64, 64, device=DEVICE)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as cpu_only:
        x + x
    assert kernels(cpu_only) == [], kernels(cpu_only)
    x * x  # between sessions: never reported
    with device_profile() as prof:
        x - x
    assert [k.name for k in kernels(prof)] == ["aten::sub.Tensor"], kernels(prof)


def test_schedule_times_active_steps_only() -> None:
    x = torch.randn(64, 64, device=DEVICE)
    traces = []
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with device_profile(schedule=schedule, on_trace_ready=traces.append) as prof:
        for _ in range(5):
            x @ x
            prof.step()
    assert len(traces) == 1, traces
    assert [k.name for k in kernels(traces[0])] == ["aten::mm", "aten::mm"], kernels(traces[0])


def test_op_statistics_unaffected() -> None:
    x = torch.randn(32, 32, device=DEVICE)

    def counts() -> tuple[int, int]:
        with torch_fl.op_stats_scope() as scope:
            for _ in range(4):
                x @ x
            torch.flemu.synchronize()
        row = scope.table.get("aten::mm")
        return row.native, row.cpu_fallback

    plain = counts()
    with device_profile():
        profiled = counts()
    assert profiled == plain == (4, 0), (profiled, plain)
