"""L1 memory: statistics, leaks, out-of-memory survival, the advertised capacity,
memory returned to the device, pinned memory, copies between devices.

One child process exhausts the device (in chunks of 1/64 of the advertised total
memory, up to four times it) and serves two tests: survival (TFL-MEM-003) and the
advertised capacity (TFL-MEM-007): at least CAPACITY_SHARE of total_memory must
be allocatable, the margin covering the allocator's rounding of blocks and memory
the plugin keeps for itself. Memory returned to the device (TFL-MEM-008) is read
through the plugin's own query, torch.<device>.mem_get_info(), not the allocator's
counters, which cannot see a plugin that forgets to free."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch

MiB = 1 << 20


def _mod(target: Any) -> Any:
    return getattr(torch, target.device_type)


@pytest.mark.requirement("TFL-MEM-001")
def test_memory_stats(target: Any, device: str) -> None:
    mod = _mod(target)
    mod.synchronize()
    mod.empty_cache()
    mod.reset_peak_memory_stats()
    base = mod.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device=device)
    after = mod.memory_allocated()
    assert after - base >= 4 * MiB, f"allocated grew by {after - base} for 4 MiB"
    assert mod.max_memory_allocated() >= after, (mod.max_memory_allocated(), after)
    assert mod.memory_reserved() >= after, (mod.memory_reserved(), after)
    stats = mod.memory_stats()
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current",
                "allocated_bytes.all.peak"):
        assert key in stats, f"memory_stats() lacks {key}"
    del x
    assert mod.memory_allocated() == base, \
        f"allocated {mod.memory_allocated()} after free, {base} before"
    assert mod.max_memory_allocated() >= base + 4 * MiB, "the peak forgot the freed tensor"
    reserved = mod.memory_reserved()
    mod.empty_cache()
    assert mod.memory_reserved() < reserved, \
        f"empty_cache kept {mod.memory_reserved()} of {reserved} reserved bytes"


@pytest.mark.requirement("TFL-MEM-002")
def test_no_leak(target: Any, device: str) -> None:
    mod = _mod(target)
    gc.collect()  # tensors of earlier tests awaiting collection must not free during the loop
    mod.synchronize()
    base = mod.memory_allocated()
    w = torch.randn(64, 64, device=device)
    for i in range(200):
        a = torch.randn(17 + i % 13, 64, device=device)
        b = (a @ w).relu().sum(dim=0)
        c = torch.cat([b, b]).clone()
        del a, b, c
    del w
    mod.synchronize()
    assert mod.memory_allocated() == base, \
        f"{mod.memory_allocated() - base} bytes still allocated after 200 iterations"


CAPACITY_SHARE = 0.9
_OOM_CHILD = r"""
import json, sys, torch, torch_fl
name, lib = sys.argv[1], sys.argv[2]
torch_fl.register_device_plugin(name, plugin_path=lib)
mod = getattr(torch, name)
total = mod.get_device_properties(0).total_memory
chunk = max(total // 64, 16 << 20)
held, out = [], {"total": total, "chunk": chunk}
try:
    for _ in range(4 * 64):  # 4x the memory the device reports, in chunks: must fail before
        held.append(torch.empty(chunk, dtype=torch.uint8, device=name + ":0"))
    out["error"] = "no OutOfMemoryError after allocating %d bytes" % (len(held) * chunk)
except torch.OutOfMemoryError as exc:
    out["oom"] = str(exc)[:300]
except Exception as exc:
    out["error"] = "%s instead of torch.OutOfMemoryError: %s" % (type(exc).__name__, exc)
out["held"] = len(held) * chunk
held.clear()
mod.empty_cache()
try:
    x = torch.arange(1000, dtype=torch.float32, device=name + ":0")
    out["after"] = float((x * 2).sum().cpu())
except Exception as exc:
    out["after_error"] = "%s: %s" % (type(exc).__name__, exc)
print("RESULT " + json.dumps(out))
"""
_exhaustion: dict[str, Any] = {}


def _exhaust(target: Any) -> dict[str, Any]:
    """The child's findings (run once for both tests that read them)."""
    if not _exhaustion:
        env = dict(os.environ, TORCH_FL_AUTOLOAD="0")
        proc = subprocess.run(  # noqa: PLW1510 - the status is examined below
            [sys.executable, "-c", textwrap.dedent(_OOM_CHILD), target.device_type,
             target.library], capture_output=True, text=True, env=env, timeout=240,
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        _exhaustion["died"] = None if line is not None else (
            f"the child process died (status {proc.returncode}) while exhausting memory:\n"
            f"{proc.stderr[-1500:]}")
        _exhaustion.update(json.loads(line[7:]) if line else {})
    assert _exhaustion["died"] is None, _exhaustion["died"]
    return _exhaustion


@pytest.mark.requirement("TFL-MEM-003")
def test_oom_survival(target: Any) -> None:
    """In a child process, so a plugin that dies on exhaustion fails this test only."""
    out = _exhaust(target)
    assert "error" not in out, out.get("error")
    assert "after_error" not in out, f"the device does not work after an OOM: {out}"
    assert out["after"] == 999000.0, out


@pytest.mark.requirement("TFL-MEM-007")
def test_advertised_memory_can_be_allocated(target: Any, record: Any) -> None:
    out = _exhaust(target)
    record("total_memory", out["total"])
    record("allocated_before_oom", out["held"])
    assert out["held"] >= CAPACITY_SHARE * out["total"], (
        f"only {out['held'] / 2**20:.0f} MiB of the advertised {out['total'] / 2**20:.0f} MiB "
        f"could be allocated (in {out['chunk'] / 2**20:.0f} MiB chunks) before "
        f"{'OutOfMemoryError' if 'oom' in out else 'an error'}; at least "
        f"{CAPACITY_SHARE:.0%} must be")


@pytest.mark.requirement("TFL-MEM-008")
def test_freed_memory_returns_to_the_device(target: Any, device: str, record: Any) -> None:
    mod = _mod(target)
    if not hasattr(mod, "mem_get_info"):
        pytest.fail(f"torch.{target.device_type}.mem_get_info() is missing", pytrace=False)
    gc.collect()
    mod.synchronize()
    mod.empty_cache()
    free0, total = mod.mem_get_info()
    size = max(64 * MiB, min(512 * MiB, total // 16))
    seen = []
    for _ in range(4):
        held = [torch.empty(size // 4, dtype=torch.uint8, device=device) for _ in range(4)]
        mod.synchronize()
        used = free0 - mod.mem_get_info()[0]
        del held
        mod.synchronize()
        mod.empty_cache()
        seen.append((used, free0 - mod.mem_get_info()[0]))
    record("mem_get_info", {"free_before": free0, "used_and_kept": seen})
    slack = max(16 * MiB, total // 100)
    assert seen[0][0] >= size - slack, (
        f"mem_get_info() reports {seen[0][0] / MiB:.0f} MiB in use while {size / MiB:.0f} MiB "
        "are allocated: it does not measure the device")
    kept = seen[-1][1]
    assert kept <= slack, (
        f"{kept / MiB:.0f} MiB are missing from mem_get_info()'s free memory after allocating "
        f"and freeing {size / MiB:.0f} MiB four times and empty_cache() (allowed "
        f"{slack / MiB:.0f} MiB): the device does not get freed memory back")


@pytest.mark.requirement("TFL-MEM-004")
def test_pinned_memory(target: Any, device: str) -> None:
    x = torch.arange(1 << 16, dtype=torch.float32)
    try:
        p = x.pin_memory()
    except Exception as exc:  # noqa: BLE001 - any error is the finding
        pytest.fail(f"pin_memory() raises: {type(exc).__name__}: {exc}", pytrace=False)
    assert p.is_pinned(), "pin_memory() returned a tensor that is not pinned"
    d = p.to(device, non_blocking=True)
    back = torch.empty_like(p).pin_memory()
    back.copy_(d * 2, non_blocking=True)
    _mod(target).synchronize()
    assert torch.equal(back, x * 2), "non_blocking copies through pinned memory differ"


@pytest.mark.requirement("TFL-MEM-005")
def test_cross_device(target: Any) -> None:
    n = target.device_type
    a = torch.randn(1000, device=f"{n}:0")
    b = a.to(f"{n}:1")
    assert b.device == torch.device(n, 1), b.device
    assert torch.equal(b.cpu(), a.cpu()), "copy to device 1 differs"
    c = (b * 3).view(10, 100)[2:5].t()
    assert c.device == torch.device(n, 1), f"views/ops moved the tensor to {c.device}"
    back = c.to(f"{n}:0")
    assert torch.equal(back.cpu(), (a.cpu() * 3).view(10, 100)[2:5].t()), "copy back differs"
    dst = torch.zeros(1000, device=f"{n}:0")
    dst.copy_(b)
    assert torch.equal(dst.cpu(), a.cpu()), "copy_ across devices differs"


@pytest.mark.requirement("TFL-MEM-009")
def test_peer_copies(target: Any) -> None:
    if target.device_count < 2:
        pytest.skip("multi_device not advertised: one device")
    n = target.device_type
    dtypes = [torch.uint8, torch.int32, torch.int64, torch.float32, torch.bool]
    dtypes += [d for d, cap in ((torch.float16, "fp16"), (torch.bfloat16, "bf16"),
                                (torch.float64, "fp64")) if target.has(cap)]
    for dt in dtypes:
        x = torch.randint(0, 100, (1 << 16,)).to(dt)
        for i in range(target.device_count):
            for j in range(target.device_count):
                if i != j:
                    y = x.to(f"{n}:{i}").to(f"{n}:{j}")
                    assert torch.equal(y.cpu(), x), f"{dt} {n}:{i} -> {n}:{j} differs"
