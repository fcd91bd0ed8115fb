"""L1 streams and events: ordering, cross-stream waits, event timing, and that
completion is not claimed early.

An event recorded behind pending work must not report completion (query()) nor
return from synchronize() before that work is done; Stream.synchronize() and the
device's synchronize() must wait for it (TFL-STREAM-005, -006). The pending work is
made of ordinary operations (at most MAX_OPS in-place adds on one tensor, each long
enough that a bounded stream queue cannot make the host wait at launch), calibrated
on the device: HOLD_S seconds when run synchronized (the least of CALIBRATIONS runs).
Then the same work is enqueued and the claim checked: a query() that says done,
or a synchronize() that returns, is accepted only if EARLY_SHARE of that time has
passed since the work was enqueued. A synchronous device (each launch returns when
the kernel is done) meets this by construction.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import torch

HOLD_S = 0.3
MAX_OPS = 12
CALIBRATIONS = 3
EARLY_SHARE = 0.5


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


class _Work:
    """Calibrated pending work: n in-place adds on one float32 tensor, each long
    enough (HOLD_S / MAX_OPS at least) that the n of them fit in any stream queue:
    a queue that makes the host wait at launch would leave nothing pending."""

    def __init__(self, mod: Any, device: str) -> None:
        self.mod = mod
        numel = 1 << 20
        while True:
            self.x = torch.zeros(numel, device=device)
            self.total = 0.0  # additions so far: the value every element must hold
            mod.synchronize()
            one = min(self._timed(1) for _ in range(2))
            if one >= HOLD_S / MAX_OPS or numel >= 1 << 26:
                break
            numel *= 4
        self.n = max(1, min(MAX_OPS, math.ceil(HOLD_S / max(one, 1e-6))))
        self.seconds = min(self._timed(self.n) for _ in range(CALIBRATIONS))

    def _timed(self, n: int) -> float:
        t0 = time.perf_counter()
        self.enqueue(n)
        self.mod.synchronize()
        return time.perf_counter() - t0

    def enqueue(self, n: int | None = None) -> None:
        for _ in range(self.n if n is None else n):
            self.x.add_(1.0)
        self.total += self.n if n is None else n

    def check_value(self, what: str) -> None:
        got = float(self.x[-1:].cpu())
        assert got == self.total, (f"{what}: the last element is {got} after {self.total:.0f} "
                                   "additions of 1: the result was read before the work ended")

    def early(self, elapsed: float) -> bool:
        return elapsed < EARLY_SHARE * self.seconds


@pytest.mark.requirement("TFL-STREAM-005")
def test_event_not_complete_before_its_work(target: Any, device: str, record: Any) -> None:
    mod = _mod(target)
    work = _Work(mod, device)
    record("hold", {"adds": work.n, "seconds": round(work.seconds, 4)})
    t0 = time.perf_counter()
    work.enqueue()
    ev = mod.Event()
    ev.record()
    done = ev.query()
    at_query = time.perf_counter() - t0
    assert not (done and work.early(at_query)), (
        f"Event.query() said complete {at_query * 1e3:.1f} ms after {work.n} adds were "
        f"enqueued; they take {work.seconds * 1e3:.1f} ms")
    ev.synchronize()
    at_sync = time.perf_counter() - t0
    assert not work.early(at_sync), (
        f"Event.synchronize() returned {at_sync * 1e3:.1f} ms after {work.n} adds were "
        f"enqueued; they take {work.seconds * 1e3:.1f} ms")
    assert ev.query(), "the event is not complete after Event.synchronize()"
    work.check_value("after Event.synchronize()")
    t0 = time.perf_counter()
    work.enqueue()
    blocking = mod.Event(blocking=True)
    blocking.record()
    blocking.wait()  # the current stream waits; the host does not
    blocking.synchronize()
    at_sync = time.perf_counter() - t0
    assert not work.early(at_sync), (
        f"a blocking Event.synchronize() returned {at_sync * 1e3:.1f} ms after the work; it "
        f"takes {work.seconds * 1e3:.1f} ms")
    work.check_value("after a blocking event's synchronize()")


@pytest.mark.requirement("TFL-STREAM-006")
def test_synchronize_waits_for_pending_work(target: Any, device: str, record: Any) -> None:
    mod = _mod(target)
    work = _Work(mod, device)
    record("hold", {"adds": work.n, "seconds": round(work.seconds, 4)})
    side = mod.Stream()
    side.wait_stream(mod.current_stream())
    with mod.stream(side):
        t0 = time.perf_counter()
        work.enqueue()
    work.x.record_stream(side)
    side.synchronize()
    elapsed = time.perf_counter() - t0
    assert not work.early(elapsed), (
        f"Stream.synchronize() returned {elapsed * 1e3:.1f} ms after {work.n} adds were "
        f"enqueued on it; they take {work.seconds * 1e3:.1f} ms")
    assert side.query(), "the stream is busy after Stream.synchronize()"
    work.check_value("after Stream.synchronize()")
    t0 = time.perf_counter()
    work.enqueue()
    mod.synchronize()
    elapsed = time.perf_counter() - t0
    assert not work.early(elapsed), (
        f"torch.{target.device_type}.synchronize() returned {elapsed * 1e3:.1f} ms after "
        f"{work.n} adds were enqueued; they take {work.seconds * 1e3:.1f} ms")
    work.check_value("after the device's synchronize()")
    # A blocking copy to the host is ordered after the work on its stream: the suite
    # reads results through such copies, or after a synchronize.
    work.enqueue()
    work.check_value("through a blocking copy right after the work was enqueued")
