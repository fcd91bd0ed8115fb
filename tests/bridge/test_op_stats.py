"""torch_fl.op_stats(): counts that a scope, a reset and another thread do not
disturb, and the host time of a native call split into the plugin's launch and
the bridge's own share."""

from __future__ import annotations

import threading

import torch
import torch_fl


def _mul_calls(table: torch_fl.OpStatsTable) -> int:
    return table.get("aten::mul.Tensor", "float32").native


def test_a_native_call_counts_its_plugin_launch_inside_its_host_time() -> None:
    x = torch.ones(64, device="flemu")
    torch.mul(x, x)  # output metadata cached
    with torch_fl.op_stats_scope() as scope:
        for _ in range(20):
            torch.mul(x, x)
    row = scope.table.get("aten::mul.Tensor", "float32")
    assert row.native == 20, scope.table
    assert 0 < row.plugin_time_ns < row.time_ns, row
    assert row.bridge_time_ns == row.time_ns - row.plugin_time_ns
    assert "in plugin" in str(scope.table).splitlines()[0]


def test_host_times_are_nanoseconds_of_the_wall_clock() -> None:
    """The op path reads a cycle counter (the TSC) and converts for reports: an
    operator whose CPU kernel sleeps 50 ms, run through the fallback, counts
    50 ms and not the counter's ticks (2-4 per nanosecond)."""
    import time

    lib = torch.library.Library("tfl_clock_test", "DEF")
    lib.define("nap(Tensor x) -> Tensor")
    lib.impl("nap", lambda x: (time.sleep(0.05), x.clone())[1], "CPU")
    x = torch.ones(4, device="flemu")
    with torch_fl.fallback_mode("silent"):
        torch.ops.tfl_clock_test.nap(x)  # first use of the op's fallback path
        with torch_fl.op_stats_scope() as scope:
            torch.ops.tfl_clock_test.nap(x)
    row = scope.table.get("tfl_clock_test::nap")
    assert row.cpu_fallback == 1, scope.table
    assert 50e6 <= row.time_ns < 90e6, row


def test_a_cpu_fallback_spends_nothing_in_a_plugin_kernel() -> None:
    x = torch.rand(8, device="flemu") + 0.5
    with torch_fl.fallback_mode("silent"), torch_fl.op_stats_scope() as scope:
        torch.atan2(x, x)
    row = scope.table.get("aten::atan2.out")
    assert row.cpu_fallback == 1 and row.plugin_time_ns == 0, scope.table


def test_a_reset_inside_a_scope_changes_neither_the_scope_nor_later_counts() -> None:
    x = torch.ones(4, device="flemu")
    with torch_fl.op_stats_scope() as scope:
        torch.mul(x, x)
        torch_fl.reset_op_stats()
        assert _mul_calls(torch_fl.op_stats()) == 0
        torch.mul(x, x)
        assert _mul_calls(torch_fl.op_stats()) == 1
    assert _mul_calls(scope.table) == 2, scope.table


def test_a_scope_counts_the_calls_of_every_thread() -> None:
    x = torch.ones(4, device="flemu")

    def work() -> None:
        for _ in range(3):
            torch.mul(x, x)

    with torch_fl.op_stats_scope() as scope:
        t = threading.Thread(target=work)
        t.start()
        t.join()
        torch.mul(x, x)
    assert _mul_calls(scope.table) == 4, scope.table


def test_scopes_report_rows_in_op_and_dtype_order() -> None:
    with torch_fl.op_stats_scope() as scope:
        a = torch.ones(4, device="flemu")
        (a * a).sum()
        (a.double() * 2).sum()
    keys = [(r.op, r.dtype) for r in scope.table]
    assert keys == sorted(keys) and len(keys) >= 3, keys
