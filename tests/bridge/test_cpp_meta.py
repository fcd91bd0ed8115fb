"""Output metadata from PyTorch's C++ meta functions (csrc/cpp_meta.h).

`import torch` replaces the C++ Meta kernels of about 640 aten operators with
Python ones; the first elementwise one a process runs imports torch._dynamo
(over a second). The bridge calls the C++ meta function for the operators in
the table the build generates (sdk/tools/cpp_meta_table.py), so a process's
first native op imports nothing, and
its outputs are shaped, strided and typed as the CPU's.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import load_module

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "sdk" / "tools" / "cpp_meta_table.py"


def _tool():
    return load_module(TOOL)


def test_the_bridge_was_built_with_this_torchs_cpp_meta_table() -> None:
    # The build generates the table from the torch it compiles against; a
    # failed generation (an empty table) or another release's table fails here.
    from torch_fl import _C

    listed = set(_C.cpp_meta_ops())
    assert "aten::add.Tensor" in listed and "aten::add.out" in listed, sorted(listed)[:10]
    wanted = set(_tool().table_entries())
    assert listed == wanted, (sorted(listed - wanted)[:10], sorted(wanted - listed)[:10])


_FIRST_OPS = """
import sys
import torch, torch_fl
torch_fl.register_device_plugin("flemu")
x = torch.ones(16, device="flemu")
y = (x + x).exp(); torch.flemu.synchronize()
assert torch.equal(y.cpu(), torch.full((16,), 2.0).exp()), y.cpu()
stats = torch_fl.op_stats()
for op in ("aten::add.Tensor", "aten::exp"):
    row = stats.get(op)
    assert row.native == 1 and row.cpu_fallback == 0, (op, row)
print("dynamo imported:", "torch._dynamo" in sys.modules)
"""


def test_first_native_ops_import_no_python_meta_machinery() -> None:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", TORCH_FL_FALLBACK="silent")
    env.pop("TORCH_FL_OP_STATS", None)
    proc = subprocess.run([sys.executable, "-c", _FIRST_OPS], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last == "dynamo imported: False", (
        f"the first native add/exp ran a Python meta function (it imports torch._dynamo): {last}")


def _cases() -> list[tuple[str, object]]:
    torch.manual_seed(0)
    a = torch.randn(2, 3, 4, 5)
    cl = a.contiguous(memory_format=torch.channels_last)
    t = torch.randn(5, 4).t()
    r = torch.randn(4)
    return [
        ("add channels_last + broadcast", lambda d: torch.add(cl.to(d), a[0, :, :1].to(d), alpha=2)),
        ("mul transposed", lambda d: t.to(d) * t.to(d)),
        ("int + float promotes", lambda d: torch.arange(6).to(d) + torch.ones(6).to(d)),
        ("0-dim cpu operand", lambda d: torch.ones(3).to(d) * torch.tensor(2.5)),
        ("comparison is bool", lambda d: r.to(d) > 0),
        ("exp of int is float", lambda d: torch.arange(4).to(d).exp()),
        ("out= keeps out", lambda d: torch.add(t.to(d), 1, out=torch.empty(4, 5).to(d))),
    ]


@pytest.mark.parametrize("name,fn", _cases(), ids=[c[0] for c in _cases()])
def test_outputs_match_the_cpu(flemu, name, fn) -> None:  # noqa: ANN001
    expected = fn("cpu")
    got = fn(flemu.name)
    assert (got.dtype, got.shape, got.stride()) == (expected.dtype, expected.shape, expected.stride()), (
        f"{name}: flemu {(got.dtype, tuple(got.shape), got.stride())}, "
        f"cpu {(expected.dtype, tuple(expected.shape), expected.stride())}")
    torch.testing.assert_close(got.cpu(), expected, rtol=1.3e-6, atol=1e-6)


def _sized_cases() -> list[tuple[str, object]]:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    t = torch.randn(5, 4).t()
    return [
        ("relu channels_last", lambda d: torch.relu(x.to(d))),
        ("mul transposed", lambda d: t.to(d) * 3),
        ("exp of no rows", lambda d: torch.ones(0, 4).to(d).exp()),
        ("exp of 0-dim", lambda d: torch.tensor(0.5).to(d).exp()),
    ]


@pytest.mark.parametrize("name,fn", _sized_cases(), ids=[c[0] for c in _sized_cases()])
def test_outputs_made_from_a_cached_entry_have_the_cpus_layout_and_storage(flemu, name, fn) -> None:  # noqa: ANN001
    # A call shape's first call fills its metadata entry; later calls make
    # their outputs from the entry's sizes, strides and storage size alone.
    expected = fn("cpu")
    for _ in range(3):
        got = fn(flemu.name)
    layout = (got.shape, got.stride(), got.storage_offset(), got.untyped_storage().nbytes(),
              got.is_contiguous(), got.is_contiguous(memory_format=torch.channels_last))
    want = (expected.shape, expected.stride(), 0, expected.untyped_storage().nbytes(),
            expected.is_contiguous(), expected.is_contiguous(memory_format=torch.channels_last))
    assert layout == want, f"{name}: flemu {layout}, cpu {want}"
    torch.testing.assert_close(got.cpu(), expected, rtol=1.3e-6, atol=1e-5)
    # Its storage is its own and resizable, as empty_strided's is.
    got.resize_(2 * got.numel() + 3)
    assert got.untyped_storage().nbytes() >= (2 * expected.numel() + 3) * got.element_size()
