"""Kernel errors become Python exceptions that name the plugin, the operator and
the code; the process stays usable afterwards."""

from __future__ import annotations

import json

import torch
from support import assert_ok, run_python

INJECT = """
import json, torch
r = {{}}
a = torch.ones(4, 4, device="flemu")
try:
    c = a @ a
    {after}
    r["error"] = None
except Exception as exc:
    r["type"] = type(exc).__name__
    r["message"] = str(exc).splitlines()[0]
r["after"] = (a + a).cpu().sum().item()
print(json.dumps(r))
"""


def run_injected(value: str, after: str = "pass") -> dict:
    out = assert_ok(run_python(INJECT.format(after=after), env={"FLEMU_INJECT_ERROR": value}))
    return json.loads(out.splitlines()[-1])


def test_kernel_error_names_plugin_op_and_code() -> None:
    r = run_injected("aten::mm:9")  # TFL_ERR_INTERNAL
    assert r["type"] == "AcceleratorError", r
    for part in ("plugin 'flemu'", "kernel aten::mm", "TFL_ERR_INTERNAL"):
        assert part in r["message"], r
    assert r["after"] == 32.0, r


def test_error_codes_map_to_python_exception_types() -> None:
    assert run_injected("aten::mm:2")["type"] == "ValueError"          # INVALID_ARGUMENT
    oom = run_injected("aten::mm:3")                                    # OUT_OF_MEMORY
    assert oom["type"] == "OutOfMemoryError", oom


def test_a_kernel_that_declines_a_call_sends_it_down_the_fallback_chain() -> None:
    out = assert_ok(run_python(
        """
        import torch, torch_fl
        a = torch.arange(6.0, device="flemu").reshape(2, 3)
        with torch_fl.op_stats_scope() as s:
            c = a @ a.t()
        row = s.table.get("aten::mm")
        print(row.native, row.cpu_fallback, c.cpu().tolist())
        """, env={"FLEMU_INJECT_ERROR": "aten::mm:4", "TORCH_FL_FALLBACK": "silent"}))
    assert out.split()[:2] == ["0", "1"], out  # TFL_ERR_UNIMPLEMENTED: declined
    assert "[[5.0, 14.0], [14.0, 50.0]]" in out, out


def test_asynchronous_kernel_error_surfaces_at_the_next_synchronization() -> None:
    r = run_injected("aten::mm:5:async", after="c.cpu()")
    assert r["type"] == "AcceleratorError", r
    assert "TFL_ERR_DEVICE" in r["message"], r
    assert r["after"] == 32.0, r


def test_shape_errors_are_caught_before_the_kernel() -> None:
    # The user's error, without a warning that the op "is not native" (the meta
    # step refuses the call, and so does the CPU).
    out = assert_ok(run_python(
        """
        import warnings, torch
        a = torch.ones(2, 3, device="flemu")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                torch.mm(a, a)
                print("no error")
            except RuntimeError as exc:
                print("[2, 3] X [2, 3]" in str(exc) or "2x3 and 2x3" in str(exc))
            torch.atan2(a, a)  # a real fallback still warns
        print(sum("not native" in str(m.message) for m in w))
        """, env={"TORCH_FL_FALLBACK": "warn"}))
    assert out.split() == ["True", "1"], out


def test_mixing_devices_is_refused() -> None:
    a = torch.ones(3, device="flemu:0")
    for other in (torch.ones(3, device="flemu:1"), torch.ones(3)):
        try:
            a + other
        except RuntimeError as exc:
            assert "Expected all tensors to be on the same device" in str(exc), exc
        else:
            raise AssertionError(f"adding flemu:0 and {other.device} did not raise")
    # 0-dim CPU tensors are legal operands.
    assert (a + torch.tensor(2.0)).cpu().tolist() == [3.0, 3.0, 3.0]
