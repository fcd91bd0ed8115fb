"""L1 streams and events: ordering, cross-stream waits, event timing."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def _mod(target: Any) -> Any:
    return getattr(torch, target.device_type)


@pytest.mark.requirement("TFL-STREAM-001")
def test_in_order(target: Any, device: str) -> None:
    mod = _mod(target)
    for stream in (mod.current_stream(), mod.Stream()):
        with mod.stream(stream):
            x = torch.zeros(1 << 18, device=device)
            for _ in range(50):
                x.add_(1)
            y = x * 2
        mod.synchronize()
        assert stream.query(), "the stream is busy after synchronize()"
        assert float(y.min().cpu()) == 100.0 == float(y.max().cpu()), \
            f"expected 100 everywhere, got [{float(y.min().cpu())}, {float(y.max().cpu())}]"


@pytest.mark.requirement("TFL-STREAM-002")
def test_cross_stream_wait(target: Any, device: str) -> None:
    mod = _mod(target)
    producer, consumer = mod.Stream(), mod.Stream()
    # Scaled so the chain contracts: unscaled, float32 rounding alone grows to
    # ~0.04 over eight steps (the CPU's float32 and float64 disagree that much).
    a = torch.randn(256, 256, device=device) / 16
    mod.synchronize()
    with mod.stream(producer):
        b = a
        for _ in range(8):
            b = torch.tanh(b @ a)
        done = mod.Event()
        done.record(producer)
    consumer.wait_event(done)
    with mod.stream(consumer):
        c = b * 2
        b.record_stream(consumer)
    consumer.synchronize()
    expected = a.cpu()
    for _ in range(8):
        expected = torch.tanh(expected @ a.cpu())
    torch.testing.assert_close(c.cpu(), expected * 2, atol=1e-3, rtol=1e-3)
    other = mod.Stream()
    with mod.stream(producer):
        d = torch.full((1 << 16,), 3.0, device=device)
    other.wait_stream(producer)
    with mod.stream(other):
        e = d + 1
    other.synchronize()
    assert float(e.min().cpu()) == 4.0, "wait_stream did not order the consumer"


@pytest.mark.requirement("TFL-STREAM-003")
def test_events(target: Any, device: str) -> None:
    mod = _mod(target)
    x = torch.randn(512, 512, device=device)
    ev = mod.Event()
    y = x @ x
    ev.record()
    ev.synchronize()
    assert ev.query(), "event not complete after synchronize()"
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), atol=1e-2, rtol=1e-3)
    blocking = mod.Event(blocking=True)
    blocking.record()
    blocking.wait()
    mod.synchronize()
    assert blocking.query()


@pytest.mark.requirement("TFL-STREAM-004")
def test_elapsed_time(target: Any, device: str) -> None:
    mod = _mod(target)
    x = torch.randn(384, 384, device=device)
    mod.synchronize()

    def timed(n: int) -> float:
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        y = x
        for _ in range(n):
            y = y @ x
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    small, big = timed(1), timed(40)
    assert small >= 0.0 and big >= 0.0, (small, big)
    assert big > small, f"40 matmuls took {big} ms, one took {small} ms"
