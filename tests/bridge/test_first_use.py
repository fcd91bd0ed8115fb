"""What registering leaves for the device's first use (csrc/first_use.h).

Registering settles what the plugin serves (its handle, has_native_kernel);
putting those kernels, the rule kernels and the autocast kernels into the
dispatcher waits until the device is first used, so that `import torch` does
not pay for it in processes that never use the device. Every way to the
device must find its kernels in place: each test starts a fresh process and
reaches the device first one way, then checks that the op it ran went where
it goes once everything is installed.
"""

from __future__ import annotations

import json

import pytest
from support import assert_ok, run_python

_PRELUDE = """
import json, torch, torch_fl
from torch_fl import _C
has = torch._C._dispatch_has_kernel_for_dispatch_key
def state():
    return {"pending": _C.first_use_pending(), "add": has("aten::add.Tensor", "PrivateUse1"),
            "autocast_mm": has("aten::mm", "AutocastPrivateUse1")}
"""


def _run(body: str) -> dict:
    out = assert_ok(run_python(_PRELUDE + body, env={"TORCH_FL_FALLBACK": "silent"}))
    return json.loads(out.strip().splitlines()[-1])


def test_registering_settles_the_report_and_leaves_the_tables() -> None:
    got = _run("""
before = state()
print(json.dumps({"before": before, "kernels": "aten::add.Tensor" in torch_fl.get_plugin().kernels,
                  "native": _C.has_native_kernel("aten::add.Tensor", torch.float32),
                  "factory": has("aten::randperm", "PrivateUse1")}))
""")
    assert got["before"] == {"pending": True, "add": False, "autocast_mm": False}, got
    # What the plugin serves is known before the first use ...
    assert got["kernels"] and got["native"], got
    # ... and factory ops, which reach the device without a tensor on it, are served already.
    assert got["factory"], got


@pytest.mark.parametrize("first_use", [
    "torch.empty(0, device='flemu')",
    "torch.ones(3, device='flemu')",
    "torch.arange(4).to('flemu')",
    "torch.UntypedStorage(8, device='flemu')",
])
def test_the_first_allocation_installs_everything(first_use: str) -> None:
    got = _run(f"""
{first_use}
print(json.dumps(state()))
""")
    assert got == {"pending": False, "add": True, "autocast_mm": True}, got


def test_a_factory_op_first_runs_on_its_native_kernel() -> None:
    # randperm is CompositeExplicitAutograd: had its slot still held the
    # composite, the first call would have gone to randperm.generator_out,
    # which flemu does not serve (a CPU fallback).
    got = _run("""
with torch_fl.fallback_mode("error"):
    r = torch.randperm(16, device="flemu")
s = torch_fl.op_stats().get("aten::randperm")
print(json.dumps({"sorted": r.cpu().sort().values.tolist(), "native": s.native,
                  "fallback": torch_fl.op_stats().totals().cpu_fallback, **state()}))
""")
    assert got["sorted"] == list(range(16)), got
    assert got["native"] == 1 and got["fallback"] == 0, got
    assert not got["pending"], got


def test_a_first_op_that_reaches_the_fallback_installs_and_redispatches() -> None:
    # tril_indices has CPU and CUDA kernels only: on the device it is the
    # fallback's, and the first use reaches the fallback before any allocation.
    got = _run("""
t = torch.tril_indices(4, 3, device="flemu")
print(json.dumps({"same": torch.equal(t.cpu(), torch.tril_indices(4, 3)), "device": t.device.type,
                  **state()}))
""")
    assert got == {"same": True, "device": "flemu", "pending": False, "add": True,
                   "autocast_mm": True}, got


def test_autocast_on_fake_tensors_before_any_allocation_casts() -> None:
    # Fake tensors never allocate on the device; entering autocast for it is
    # what installs the autocast kernels, so a trace under autocast casts.
    got = _run("""
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    a = torch.empty(4, 4, device="flemu")
    allocated = not _C.first_use_pending()
    with torch.autocast(device_type="flemu", dtype=torch.bfloat16):
        out = a @ a
print(json.dumps({"allocated": allocated, "dtype": str(out.dtype), **state()}))
""")
    assert not got["allocated"], "fake tensors allocated on the device: the test no longer tests this way in"
    assert got["dtype"] == "torch.bfloat16", got
    assert not got["pending"] and got["autocast_mm"], got


def test_compile_passes_see_the_installed_tables() -> None:
    got = _run("""
from torch_fl.compile.passes import has_device_kernel
print(json.dumps({"add": has_device_kernel(torch.ops.aten.add.Tensor), **state()}))
""")
    assert got["add"] and not got["pending"], got
