"""flemu's float32 convolutions run on oneDNN and keep flemu's own im2col path
for the rest; both engines (FLEMU_DNNL=1, the default, and FLEMU_DNNL=0) must
agree with the CPU on what maps differently onto a oneDNN primitive: grouped
and depthwise weights, 1-d and 3-d, dilation, a stride whose output size drops
input (negative right padding), channels-last and sliced operands, a strided
bias, partial output masks (grad_input, grad_weight or grad_bias alone), and
batches large enough to split over threads. oneDNN's own trace
(ONEDNN_VERBOSE) shows which engine ran: only the flemu side computes in the
subprocess, so every convolution it reports is flemu's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from support import assert_ok, flemu_with_run_path, run_python

# (name, input, weight, stride, padding, dilation, groups, layout); layout is
# "contiguous", "channels_last" or "sliced" (every operand a strided view).
CASES = [
    ("resnet_3x3", (4, 16, 12, 12), (16, 16, 3, 3), 1, 1, 1, 1, "contiguous"),
    ("stride2_drops_input", (2, 8, 8, 9), (12, 8, 3, 3), 2, 0, 1, 1, "contiguous"),
    ("grouped_dilated", (2, 6, 11, 9), (9, 2, 3, 2), 1, 2, 2, 3, "contiguous"),
    ("depthwise", (2, 8, 7, 7), (8, 1, 3, 3), 1, 1, 1, 8, "contiguous"),
    ("pointwise", (3, 10, 5, 6), (7, 10, 1, 1), 1, 0, 1, 1, "contiguous"),
    ("conv1d", (2, 5, 17), (4, 5, 5), 2, 2, 1, 1, "contiguous"),
    ("conv3d", (2, 3, 5, 6, 4), (4, 3, 2, 3, 2), 1, 1, 1, 1, "contiguous"),
    ("channels_last", (2, 8, 9, 9), (6, 8, 3, 3), 1, 1, 1, 1, "channels_last"),
    ("sliced", (2, 8, 9, 9), (6, 8, 3, 3), 1, 1, 1, 1, "sliced"),
    ("threaded_batch", (16, 32, 10, 10), (32, 32, 3, 3), 1, 1, 1, 1, "contiguous"),
    # Weights outweigh the activations: channels split (48 output channels: 32 + 16).
    ("threaded_channels", (2, 64, 6, 6), (48, 64, 3, 3), 1, 1, 1, 1, "contiguous"),
    # One sample: only channels can split.
    ("threaded_batch1", (1, 32, 12, 12), (40, 32, 3, 3), 1, 1, 1, 1, "channels_last"),
]

MASKS = {"all": (True, True, True), "input": (True, False, False), "weight": (False, True, False),
         "bias": (False, False, True)}

_SCRIPT = r"""
import json, os, torch, torch_fl
cases, masks = json.loads(os.environ["CONV_CASES"]), json.loads(os.environ["CONV_MASKS"])
results = {}
def relayout(t, layout):
    if layout == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "sliced":
        return torch.stack([t, torch.full_like(t, float("nan"))], dim=-1)[..., 0]
    return t
for name, shape, wshape, stride, pad, dil, groups, layout in cases:
    g = torch.Generator().manual_seed(len(name))
    x = torch.randn(shape, generator=g)
    w = torch.randn(wshape, generator=g) * 0.2
    b = torch.randn(2 * wshape[0], generator=g)[::2]  # a strided bias
    dev = [relayout(t.to("flemu"), layout) for t in (x, w)] + [b.to("flemu")]
    y = torch.ops.aten.convolution(dev[0], dev[1], dev[2], [stride] * (len(shape) - 2), [pad] * (len(shape) - 2),
                                   [dil] * (len(shape) - 2), False, [0] * (len(shape) - 2), groups)
    grad = relayout(torch.randn(y.shape, generator=g).to("flemu"), layout)
    results[name] = {"y": y.cpu()}
    for mask_name, mask in masks.items():
        grads = torch.ops.aten.convolution_backward(
            grad, dev[0], dev[1], [wshape[0]], [stride] * (len(shape) - 2), [pad] * (len(shape) - 2),
            [dil] * (len(shape) - 2), False, [0] * (len(shape) - 2), groups, list(mask))
        results[name][mask_name] = [t.cpu() if t is not None else None for t in grads]
torch.flemu.synchronize()
torch.save(results, os.environ["CONV_OUT"])
"""


@pytest.fixture(scope="module")
def reference() -> dict:
    # Float64 on the CPU: the same random draws (float64 randn draws differ from float32's).
    results = {}
    for name, shape, wshape, stride, pad, dil, groups, _layout in CASES:
        g = torch.Generator().manual_seed(len(name))
        x = torch.randn(shape, generator=g)
        w = torch.randn(wshape, generator=g) * 0.2
        b = torch.randn(2 * wshape[0], generator=g)[::2]
        nd = len(shape) - 2
        args = ([stride] * nd, [pad] * nd, [dil] * nd, False, [0] * nd, groups)
        x, w, b = x.double(), w.double(), b.double()
        y = torch.ops.aten.convolution(x, w, b, *args)
        grad = torch.randn(y.shape, generator=g).double()
        results[name] = {"y": y, "grads": torch.ops.aten.convolution_backward(
            grad, x, w, [wshape[0]], *args, [True, True, True])}
    return results


@pytest.fixture(scope="module", params=["1", "0"], ids=["onednn", "im2col"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, str]:
    out = tmp_path_factory.mktemp("conv") / "results.pt"
    proc = run_python(_SCRIPT, env={
        "FLEMU_DNNL": request.param, "ONEDNN_VERBOSE": "1", "TORCH_FL_FALLBACK": "error",
        "CONV_CASES": json.dumps(CASES), "CONV_MASKS": json.dumps(MASKS), "CONV_OUT": str(out)})
    stdout = assert_ok(proc)
    return request.param, torch.load(Path(out)), stdout


def _check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_engine_matches_the_cpu(engine: tuple[str, dict, str], reference: dict, case: str) -> None:
    _, got, _ = engine
    want = reference[case]
    _check(got[case]["y"], want["y"], f"{case} forward")
    for mask_name, mask in MASKS.items():
        for i, (asked, what) in enumerate(zip(mask, ("grad_input", "grad_weight", "grad_bias"))):
            value = got[case][mask_name][i]
            if not asked:
                assert value is None, f"{case} mask {mask_name}: {what} was not asked for"
                continue
            _check(value, want["grads"][i], f"{case} mask {mask_name} {what}")


def test_the_engine_that_ran_is_the_one_asked_for(engine: tuple[str, dict, str]) -> None:
    flag, _, stdout = engine
    traced = [line for line in stdout.splitlines() if ",exec," in line and ",convolution," in line]
    if flag == "0":
        assert not traced, traced[:3]
        return
    # Every (sample, channel) of a pass's output is computed by exactly one
    # primitive call: forward and backward-weights cover the output channels,
    # backward-data the input channels, once per case and twice per case
    # (two masks) for the backward passes (grad_bias alone stays on flemu's own
    # reduction). A pass split over threads shows as smaller mini-batches or
    # channel counts in oneDNN's problem descriptor ("mb8_ic32oc32_...").
    covered = {"forward": 0, "backward_data": 0, "backward_weights": 0}
    for line in traced:
        kind = next(k for k in covered if k in line)
        mb, ic, oc = (int(v) for v in re.search(r"mb(\d+)_(?:g\d+)?ic(\d+)oc(\d+)", line).groups())
        covered[kind] += mb * (ic if kind == "backward_data" else oc)
    out_channels = sum(c[1][0] * c[2][0] for c in CASES)
    in_channels = sum(c[1][0] * c[1][1] for c in CASES)
    assert covered == {"forward": out_channels, "backward_data": 2 * in_channels,
                       "backward_weights": 2 * out_channels}, traced


def test_a_missing_onednn_is_named_and_flemu_survives(tmp_path: Path) -> None:
    # flemu loads oneDNN at its first convolution or GEMM (not at import):
    # a copy of the library whose run path finds OpenBLAS but not oneDNN loads,
    # registers and adds, and its first convolution fails with an error that
    # names the wheel and the switch; with FLEMU_DNNL=0 it convolves.
    import flemu

    openblas = Path(flemu.__file__).parents[1] / "scipy_openblas32" / "lib"
    copy = flemu_with_run_path(tmp_path, openblas)
    code = """
import torch, torch_fl
print("add", (torch.ones(3, device="flemu") + 1).sum().item())
x, w = torch.randn(2, 4, 6, 6, device="flemu"), torch.randn(4, 4, 3, 3, device="flemu")
try:
    torch.nn.functional.conv2d(x, w)
    torch.flemu.synchronize()
    print("conv ok")
except Exception as e:
    print("conv failed:", e)
print("still alive", (torch.ones(2, device="flemu") * 3).sum().item())
"""
    out = assert_ok(run_python(code, env={"FLEMU_LIBRARY": str(copy)}))
    assert "add 6.0" in out and "still alive 6.0" in out, out
    assert "conv failed" in out and "onednn-cpu-gomp" in out and "FLEMU_DNNL=0" in out, out
    out = assert_ok(run_python(code, env={"FLEMU_LIBRARY": str(copy), "FLEMU_DNNL": "0"}))
    assert "conv ok" in out, out
