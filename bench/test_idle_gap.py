"""A device op issued after the host has been busy elsewhere for a while
(Python, a data loader, logging between steps): the op and its synchronize,
timed right after a busy gap of GAP_US microseconds, on flemu against the same
op on the CPU after the same gap, in the same rounds.

Back to back (the dispatch and GEMM benchmarks) flemu's threads are awake
when the next op arrives. After a gap they may have gone to sleep: the stream
worker polls for 1 ms after its last task (kWorkerSpinNs, stream.h), the pool
helper for 500 us, a host waiting in synchronize for 20 us, and waking a
sleeping thread costs a futex wake-up plus, on a virtual machine, the wake-up
of an idle vCPU. PyTorch's CPU operators run on OpenMP threads that spin for
milliseconds. The ratio is reported for each gap (no target: it shows what a
program that is not a tight loop of device ops pays for its first op after a
pause, which the loop benchmarks do not).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_fl
from _interleave import interleaved
from _report import row
from test_kernels_gemm import _product

GAP_US = (0, 200, 2000)
ROUNDS = 30
OPS = ("add_16", "bmm_16x64x32x64")


def _op(name: str, device: str) -> Callable[[], None]:
    if name != "add_16":
        return _product(name, device)
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(16, generator=g).to(device), torch.rand(16, generator=g).to(device)

    def run() -> None:
        torch.add(a, b)
        if device != "cpu":
            torch.flemu.synchronize()

    run()
    return run


def _gap_label(gap_us: int) -> str:
    if gap_us == 0:
        return "back to back"
    return f"after {gap_us} µs" if gap_us < 1000 else f"after {gap_us // 1000} ms"


@pytest.mark.parametrize("gap_us", GAP_US)
@pytest.mark.parametrize("name", OPS)
def test_after_gap_flemu(benchmark, name: str, gap_us: int) -> None:  # noqa: ANN001
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    what = "a 16-element `add`" if name == "add_16" else "a bmm 16×(64×32×64)"
    row(benchmark, f"{what} with its synchronize, timed right after the host was busy elsewhere, "
        "flemu vs CPU", _gap_label(gap_us))
    with torch_fl.fallback_mode("error"):
        interleaved(benchmark, _op(name, "flemu"), _op(name, "cpu"),
                    f"CPU {name} after a {gap_us} us gap, interleaved", rounds=ROUNDS,
                    pause_s=gap_us * 1e-6)
