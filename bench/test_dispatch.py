"""Per-op overhead of the bridge: a 16-element float32 op issued on flemu against
the same op on the CPU, timed in the same rounds (_interleave.py), each timed
call a batch of BATCH ops (flemu's ending with a synchronize, so its queued
work is in the time) so that the timer's own cost stays out of the figure.

- native: aten::add.Tensor runs flemu's kernel (target: <= 1.1x CPU); its
  figure is the host time per call in that loop (op_stats): the bridge's own,
  and flemu's launch (inside the plugin's kernel function) apart
- fallback: aten::atan2 has no flemu kernel and runs on the CPU fallback, copies
  included (target: <= 6x CPU)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_fl
from _interleave import interleaved
from _report import figure, row

N = 16
BATCH = 500
ROUNDS = 40


@pytest.fixture(scope="module")
def host() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.rand(N) + 0.5, torch.rand(N) + 0.5


@pytest.fixture(scope="module")
def device(host: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    a, b = host[0].to("flemu"), host[1].to("flemu")
    # The first call of an op computes its output metadata (milliseconds, once);
    # the benchmark measures the steady state.
    with torch_fl.fallback_mode("silent"):
        for _ in range(10):
            torch.add(a, b)
            torch.atan2(a, b)
    torch.flemu.synchronize()
    return a, b


def _batch(op: Callable[..., torch.Tensor], a: torch.Tensor, b: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        for _ in range(BATCH):
            op(a, b)
        if a.device.type == "flemu":
            torch.flemu.synchronize()

    return run


def test_add_flemu_native(benchmark, host, device) -> None:  # noqa: ANN001
    row(benchmark, f"native flemu `add`, {N} float32 elements, {BATCH} calls and a synchronize, vs CPU",
        target=1.1)
    with torch_fl.op_stats_scope() as scope:
        interleaved(benchmark, _batch(torch.add, *device), _batch(torch.add, *host),
                    f"CPU add, {BATCH} calls, interleaved", rounds=ROUNDS)
    stat = scope.table.get("aten::add.Tensor")
    assert stat.native > 0 and stat.cpu_fallback == 0, scope.table
    bridge_us, launch_us = stat.bridge_time_ns / 1e3 / stat.native, stat.plugin_time_ns / 1e3 / stat.native
    what = "host time per native `add` in that loop (warm caches)"
    figure(benchmark, what, bridge_us, "us", "bridge")
    figure(benchmark, what, launch_us, "us", "flemu's launch")


def test_atan2_flemu_fallback(benchmark, host, device) -> None:  # noqa: ANN001
    row(benchmark, f"CPU-fallback `atan2` (copies included), {N} float32 elements, vs CPU", target=6.0)
    with torch_fl.fallback_mode("silent"), torch_fl.op_stats_scope() as scope:
        interleaved(benchmark, _batch(torch.atan2, *device), _batch(torch.atan2, *host),
                    f"CPU atan2, {BATCH} calls, interleaved", rounds=ROUNDS)
    stat = scope.table.get("aten::atan2.out")  # structured: the functional runs as .out
    assert stat.cpu_fallback > 0 and stat.native == 0, scope.table
