"""Streams and events on flemu's worker-thread streams: ordering, cross-stream
waits, timing — with sanitizer delays so a missing wait shows up."""

from __future__ import annotations

import json

import torch
from support import assert_ok, run_python


def test_stream_objects_and_current_stream() -> None:
    default = torch.flemu.current_stream()
    assert default.device == torch.device("flemu", 0)
    assert default == torch.flemu.default_stream()
    s = torch.flemu.Stream()
    assert s.device.type == "flemu" and s != default
    with torch.flemu.stream(s):
        assert torch.flemu.current_stream() == s
    assert torch.flemu.current_stream() == default
    s1 = torch.Stream(device="flemu:1")
    assert s1.device_index == 1
    s.synchronize()
    assert s.query()


def test_events_record_wait_and_time() -> None:
    start = torch.flemu.Event(enable_timing=True)
    end = torch.flemu.Event(enable_timing=True)
    a = torch.randn(384, 384, device="flemu")
    start.record()
    for _ in range(10):
        a = a @ a / 384
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    ms = start.elapsed_time(end)
    assert ms > 0.0, ms


ORDERING = """
import json, torch
torch.manual_seed(0)
x = torch.randn(256, 256)
perm = torch.eye(256)[torch.randperm(256)]  # keeps values O(1) and exact
expected = x
for _ in range(6):
    expected = expected @ perm + 1
dev = x.to("flemu")
p = perm.to("flemu")
producer = torch.flemu.Stream()
consumer = torch.flemu.Stream()
# Warm up (first calls compute output metadata, which takes milliseconds),
# so that below the producer's kernels are queued in microseconds.
(dev @ p + 1).clone()
torch.flemu.synchronize()
with torch.flemu.stream(producer):
    y = dev
    for _ in range(6):
        y = y @ p + 1
    done = torch.flemu.Event()
    done.record(producer)
with torch.flemu.stream(consumer):
    if {wait}:
        consumer.wait_event(done)
    y.record_stream(consumer)
    snapshot = y.clone()
consumer.synchronize()
ok = torch.equal(snapshot.cpu(), expected)
print(json.dumps({{"ok": ok}}))
"""


def test_cross_stream_wait_orders_the_consumer_after_the_producer() -> None:
    out = assert_ok(run_python(ORDERING.format(wait=True), env={"FLEMU_SANITIZE": "3000"}))
    assert json.loads(out.splitlines()[-1]) == {"ok": True}, out


def test_without_the_wait_the_consumer_races_ahead() -> None:
    # The control experiment: the same program minus wait_event reads the
    # producer's output before it exists, which is what the test above guards.
    out = assert_ok(run_python(ORDERING.format(wait=False), env={"FLEMU_SANITIZE": "3000"}))
    assert json.loads(out.splitlines()[-1]) == {"ok": False}, out


def test_copy_to_host_waits_for_queued_kernels() -> None:
    out = assert_ok(run_python(
        """
        import torch
        x = torch.zeros(1 << 16, device="flemu")
        for _ in range(50):
            x.add_(1)
        print(x.cpu().min().item(), x.cpu().max().item())
        """, env={"FLEMU_SANITIZE": "500"}))
    assert out.split() == ["50.0", "50.0"], out


def test_work_on_two_devices_is_independent() -> None:
    a = torch.full((1000,), 2.0, device="flemu:0")
    b = torch.full((1000,), 3.0, device="flemu:1")
    a.mul_(2)
    b.mul_(3)
    torch.flemu.synchronize(0)
    torch.flemu.synchronize(1)
    assert a.cpu().unique().tolist() == [4.0] and b.cpu().unique().tolist() == [9.0]


def test_threads_sharing_a_stream_never_enqueue_at_once() -> None:
    """PyTorch runs ops with the GIL released, so threads reach the bridge at
    once; the ABI promises the plugin one enqueueing thread per stream (flemu's
    queue is single-producer), and flemu under FLEMU_CHECK_CONTRACTS=1 reports
    two as a pending error. Kernels, event records and waits, and blocking
    copies all go through the bridge's per-stream guard."""
    import os
    import threading

    assert os.environ.get("FLEMU_CHECK_CONTRACTS") == "1"
    torch.flemu.synchronize()
    a = torch.arange(64, dtype=torch.float32, device="flemu")
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            stream = torch.flemu.current_stream()
            event = torch.flemu.Event()
            for i in range(1500):
                y = a * 2 + k
                event.record(stream)
                stream.wait_event(event)
                if i % 100 == 0:
                    got = y.cpu()
                    assert torch.equal(got, torch.arange(64, dtype=torch.float32) * 2 + k), (k, i)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    torch.flemu.synchronize()  # raises flemu's "host contract violated" if two threads met
