"""Every kernel flag is honoured for every variant of a call — functional,
in-place, out=, a view, a transpose or a mixed dtype as self — checked against
the CPU (values, and the result's layout: the CPU's or, where PyTorch's meta
function lays it out otherwise, the meta function's) with a plugin that declares all of flemu's kernels dense
(CONTIGUOUS_INPUTS | CONTIGUOUS_OUTPUTS) and verifies before each call that
the bridge kept those promises (fixtures/dense_plugin.c). flemu alone copes
with any strides, so it would hide a bridge that hands a dense kernel a
strided view and reads back a wrong result."""

from __future__ import annotations

import json
from pathlib import Path

import flemu
import pytest
from support import compile_c, run_python

FIXTURE = Path(__file__).parent / "fixtures" / "dense_plugin.c"

# Each case builds its result from `dev` ("cpu" or the dense device); the test
# compares the two. A case that raises on the CPU must raise on the device too.
CASES_SOURCE = r'''
import torch
import torch.nn as nn

CASES = []
def case(fn):
    CASES.append(fn)
    return fn

@case
def column_add_(dev):
    s = torch.arange(12.).reshape(4, 3).to(dev); s[:, 0].add_(100); return s
@case
def transposed_add_(dev):
    s = torch.arange(12.).reshape(4, 3).to(dev); s.t().add_(1); return s
@case
def column_mul_(dev):
    s = torch.arange(12.).reshape(4, 3).to(dev); s[:, 1].mul_(2); return s
@case
def broadcast_other_add_(dev):
    s = torch.arange(12.).reshape(4, 3).to(dev); s.add_(torch.tensor([1., 2., 3.]).to(dev)); return s
@case
def broadcast_other_into_column(dev):
    s = torch.arange(12.).reshape(4, 3).to(dev); s[:, 2].mul_(torch.tensor(3.).to(dev)); return s
@case
def offset_view_sub_(dev):
    b = torch.arange(10.).to(dev); b[4:].view(2, 3).sub_(torch.ones(2, 3).to(dev)); return b
@case
def slice_exp_(dev):
    x = torch.arange(12.).reshape(3, 4).div(10).to(dev); x[:, 1:3].exp_(); return x
@case
def transposed_relu_(dev):
    x = (torch.arange(12.) - 6).reshape(3, 4).to(dev); torch.relu_(x.t()); return x
@case
def half_view_add_float(dev):
    h = torch.arange(8, dtype=torch.half).to(dev); h[::2].add_(torch.full((4,), 0.5).to(dev)); return h
@case
def transposed_eq_(dev):
    x = torch.arange(6.).reshape(2, 3).to(dev); x.t().eq_(torch.ones(3, 2).to(dev)); return x
@case
def float_add_int_(dev):
    x = torch.ones(2, 3).to(dev); x.add_(torch.arange(6).reshape(2, 3).to(dev)); return x
@case
def int_add_float_raises(dev):
    x = torch.ones(3, dtype=torch.long).to(dev); x.add_(1.5); return x
@case
def expanded_self_raises(dev):
    x = torch.ones(1, 3).to(dev).expand(4, 3); x.add_(1); return x
@case
def out_non_contiguous(dev):
    a = torch.arange(6.).to(dev); o = torch.zeros(6, 2).to(dev)
    torch.add(a, a, out=o[:, 0]); return o
@case
def out_empty_is_resized(dev):
    a = torch.arange(6.).reshape(2, 3).to(dev); o = torch.empty(0).to(dev)
    torch.mul(a, a, out=o); return o
@case
def out_aliases_input(dev):
    a = torch.arange(6.).to(dev); torch.add(a, a.flip(0), out=a); return a
@case
def out_transposed_mm(dev):
    a = torch.arange(6.).reshape(2, 3).to(dev); o = torch.zeros(2, 2).to(dev)
    torch.mm(a, a.t(), out=o.t()); return o
@case
def mm_of_transposes(dev):
    a = torch.arange(12.).reshape(3, 4).to(dev); return a.t() @ a[:, 1:3]
@case
def sum_dim_out_strided(dev):
    a = torch.arange(12.).reshape(3, 4).to(dev); o = torch.zeros(4, 2).to(dev)
    torch.sum(a, 0, out=o[:, 1]); return o
@case
def foreach_add_into_views(dev):
    a = torch.arange(12.).reshape(3, 4).to(dev); b = torch.zeros(5).to(dev)
    torch._foreach_add_([a[:, 1], b], [torch.ones(3).to(dev), torch.arange(5.).to(dev)])
    return torch.cat([a.flatten(), b])
@case
def batch_norm_channels_last(dev):
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(3).to(dev); x = torch.randn(2, 3, 4, 4).to(dev)
    y = bn(x.contiguous(memory_format=torch.channels_last))
    return torch.cat([y.flatten(), bn.running_mean, bn.running_var])
# A dense kernel's fresh output keeps the layout PyTorch gives it (a
# channels-last input makes a channels-last result): the kernel writes a
# dense temporary, the caller gets the metadata's layout.
@case
def channels_last_relu(dev):
    x = (torch.arange(96.) - 48).reshape(2, 3, 4, 4).to(dev); return torch.relu(x.contiguous(memory_format=torch.channels_last))
@case
def channels_last_plus_contiguous(dev):
    x = torch.arange(96.).reshape(2, 3, 4, 4).to(dev)
    return x.contiguous(memory_format=torch.channels_last) + x
@case
def channels_last_group_norm_and_batch_norm(dev):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 3).to(dev).contiguous(memory_format=torch.channels_last)
    gn = nn.GroupNorm(2, 4).to(dev); bn = nn.BatchNorm2d(4).to(dev)
    return gn(x) + bn(x)
@case
def channels_last_view_of_a_size_one_dim(dev):
    x = torch.arange(8.).reshape(2, 4, 1, 1).to(dev).contiguous(memory_format=torch.channels_last)
    return x.sigmoid()
# The bridge learns per call shape that a functional call's inputs go to the
# kernel as given; a call of the same sizes with other strides, a broadcast
# operand or another dtype must still get dense, broadcast and cast operands.
@case
def same_sizes_dense_then_transposed(dev):
    a = torch.arange(12.).reshape(3, 4).to(dev); b = torch.arange(12.).reshape(4, 3).to(dev)
    first = a * a; second = b.t() * b.t(); return torch.cat([first.flatten(), second.flatten()])
@case
def same_shape_then_broadcast_operand(dev):
    a = torch.arange(6.).reshape(2, 3).to(dev)
    x = a + a; y = a + torch.arange(3.).to(dev); return torch.cat([x.flatten(), y.flatten()])
@case
def same_shape_then_mixed_dtype(dev):
    a = torch.arange(6.).reshape(2, 3).to(dev)
    x = a - a; y = a - torch.arange(6, dtype=torch.long).reshape(2, 3).to(dev)
    return torch.cat([x.flatten(), y.flatten()])
@case
def linear_backward_on_transposed(dev):
    torch.manual_seed(0)
    w = torch.randn(3, 4).to(dev).t().requires_grad_()
    x = torch.randn(5, 4).to(dev)
    (x @ w).sum().backward(); return w.grad
'''

RUNNER = CASES_SOURCE + r'''
import json, os, torch_fl
torch_fl.register_device_plugin("dense", plugin_path=os.environ["DENSE_PLUGIN"])
torch_fl.set_fallback_mode("silent")
results = {}
for case in CASES:
    name = case.__name__
    try:
        expected = case("cpu")
    except Exception as exc:
        expected = exc
    try:
        got = case("dense")
        torch.dense.synchronize()
    except Exception as exc:
        got = exc
    try:
        # The layout PyTorch's meta functions give, which the bridge follows
        # where they differ from the CPU kernel's (torch 2.14's group norm).
        traced = case("meta").stride()
    except Exception:
        traced = None
    if isinstance(expected, Exception):
        ok = isinstance(got, Exception)
        detail = f"CPU raises {type(expected).__name__}; device gives {got!r}"[:300]
    elif isinstance(got, Exception):
        ok, detail = False, f"device raises {type(got).__name__}: {got}"[:300]
    else:
        got = got.detach().cpu()
        ok = got.dtype == expected.dtype and got.shape == expected.shape and torch.allclose(
            got.double(), expected.detach().double(), rtol=1e-5, atol=1e-6) and (
            got.stride() in (expected.stride(), traced))
        detail = (f"device {got.tolist()} ({got.dtype}, strides {got.stride()}), "
                  f"CPU {expected.tolist()} ({expected.dtype}, strides {expected.stride()}; "
                  f"meta {traced})")
    results[name] = {"ok": bool(ok), "detail": detail}
print("RESULTS " + json.dumps(results))
'''


@pytest.fixture(scope="module")
def dense_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_c(FIXTURE, tmp_path_factory.mktemp("dense") / "libdense.so")


def test_dense_kernels_get_dense_operands_and_cpu_results_in_every_variant(
        dense_plugin: Path) -> None:
    proc = run_python(RUNNER, env={
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        "DENSE_PLUGIN": str(dense_plugin),
        "DENSE_INNER_LIBRARY": str(flemu.library_path()),
    })
    # A broken promise aborts the process with the dense plugin's message.
    assert proc.returncode == 0 and "RESULTS " in proc.stdout, (
        f"exit {proc.returncode}\n--- stderr\n{proc.stderr[-4000:]}")
    results = json.loads(proc.stdout.split("RESULTS ", 1)[1])
    assert len(results) >= 20, sorted(results)
    bad = {name: r["detail"] for name, r in results.items() if not r["ok"]}
    assert not bad, json.dumps(bad, indent=1)
