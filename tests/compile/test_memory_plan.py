"""Liveness-based memory planning: intermediates share planned buffers,
results are unchanged, and peak device memory drops below executing the
same graph without planning."""

from __future__ import annotations

import pytest
import torch
from conftest import compile_fl
from helpers import assert_close, graph_reports, on_cpu
from support import DEVICE


def mm_chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # Matmuls do not fuse: each intermediate is a separate eager value.
    for _ in range(8):
        x = x @ w
    return x.sum(0)


def _peak(fn: object, *args: torch.Tensor) -> tuple[torch.Tensor, int]:
    mod = getattr(torch, DEVICE)
    mod.synchronize()
    base = mod.memory_allocated()
    mod.reset_peak_memory_stats()
    with torch.no_grad():
        out = fn(*args)  # type: ignore[operator]
    mod.synchronize()
    return out, mod.max_memory_allocated() - base


def test_intermediates_share_buffers(dev: torch.device) -> None:
    x = torch.randn(256, 256, device=dev)
    w = (torch.randn(256, 256) / 16).to(dev)
    fn = compile_fl(mm_chain)
    with torch.no_grad():
        assert_close(fn(x, w), on_cpu(mm_chain, x, w), "planned mm chain", rtol=1e-3, atol=1e-3)
    (report,) = graph_reports()
    # 7 intermediates of 256 KiB in alternating buffers: at most 2 live at once.
    assert report.unplanned_bytes >= 7 * 256 * 256 * 4, report.describe()
    assert report.planned_bytes <= 2 * 256 * 256 * 4 + 1024, report.describe()
    assert "buf0 = _empty" in report.source and "out=" in report.source, report.source


@pytest.mark.parametrize("mode", ["reuse", "liveness", "none"])
def test_every_mode_computes_the_same(dev: torch.device, mode: str) -> None:
    x = torch.randn(64, 64, device=dev)
    w = (torch.randn(64, 64) / 8).to(dev)
    with torch.no_grad():
        actual = compile_fl(mm_chain, memory_planning=mode)(x, w)
    assert_close(actual, on_cpu(mm_chain, x, w), f"mm chain, {mode}", rtol=1e-3, atol=1e-3)


def test_planning_lowers_peak_memory(dev: torch.device) -> None:
    x = torch.randn(512, 512, device=dev)
    w = (torch.randn(512, 512) / 23).to(dev)
    peaks = {}
    for mode in ("reuse", "none"):
        torch._dynamo.reset()
        fn = compile_fl(mm_chain, memory_planning=mode)
        _peak(fn, x, w)  # compile and warm the caching allocator
        _, peaks[mode] = _peak(fn, x, w)
    one = 512 * 512 * 4
    assert peaks["reuse"] <= 3 * one, peaks
    assert peaks["none"] >= 7 * one, peaks


def test_values_returned_are_not_planned(dev: torch.device) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x @ w
        b = a @ w
        return a.t(), b @ w  # a view of an intermediate escapes

    # 30 x 30 float32 is 3600 bytes: a planned buffer would be rounded up to 4096.
    x = torch.randn(30, 30, device=dev)
    w = torch.randn(30, 30, device=dev)
    with torch.no_grad():
        a_t, c = compile_fl(f)(x, w)
        e_a, e_c = on_cpu(f, x, w)
    assert_close(a_t, e_a, "escaping view", rtol=1e-3, atol=1e-3)
    assert_close(c, e_c, "result", rtol=1e-3, atol=1e-2)
    (report,) = graph_reports()
    assert report.planned_bytes > 0, report.describe()  # b is planned ...
    # ... but the escaping storage is the op's own allocation, not a planned buffer.
    assert a_t.untyped_storage().nbytes() == 30 * 30 * 4, a_t.untyped_storage().nbytes()


def test_planning_never_peaks_above_liveness(dev: torch.device) -> None:
    """A planned buffer left idle while a step allocates on its own (layer
    norm returns three new tensors) would hold memory the allocation could
    have reused: the plan must release it instead."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        a = x @ w
        b = a @ w  # a dies here
        c = torch.nn.functional.layer_norm(b, (b.shape[-1],))
        return (c @ w).sum(0)

    x = torch.randn(256, 256, device=dev)
    w = (torch.randn(256, 256) / 16).to(dev)
    peaks = {}
    for mode in ("reuse", "liveness"):
        torch._dynamo.reset()
        out, peaks[mode] = _peak(compile_fl(f, memory_planning=mode), x, w)
        assert_close(out, on_cpu(f, x, w), f"{mode} result", rtol=1e-3, atol=1e-3)
    assert peaks["reuse"] <= peaks["liveness"], peaks
