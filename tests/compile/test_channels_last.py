"""Convolutions lay their results out as torch.compile's FakeTensor rules
say (torch_fl/csrc/op_rules.cpp, conv_layouts): a compiled graph plans its
regions and memory for those layouts, and a channels-last model compiles."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
import torch
from conftest import compile_fl
from helpers import assert_close, graph_reports
from support import DEVICE, assert_ok, run_python
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

aten = torch.ops.aten
CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def _layouts(x: torch.Tensor, w: torch.Tensor, go: torch.Tensor) -> list[tuple[int, ...]]:
    nd = w.dim() - 2
    ones, zeros = [1] * nd, [0] * nd
    y = aten.convolution(x, w, None, ones, ones, ones, False, zeros, 1)
    gi, gw, _ = aten.convolution_backward(go, x, w, [w.shape[0]], ones, ones, ones, False, zeros, 1,
                                          [True, True, True])
    return [y.stride(), gi.stride(), gw.stride()]


# (spatial dims, channels-last input, weight, output gradient): 1-d
# convolutions have no channels-last format of their own; their "channels-
# last" input is laid out (N, L, C) in memory, a strided view.
CASES = [(1, False, False, False), (1, True, False, False)] + [
    (d, *flags) for d in (2, 3) for flags in itertools.product([False, True], repeat=3)]


@pytest.mark.parametrize("dims,x_cl,w_cl,go_cl", CASES)
def test_convolution_layouts_are_fake_tensors(dev: torch.device, dims: int, x_cl: bool, w_cl: bool,
                                               go_cl: bool) -> None:
    g = torch.Generator().manual_seed(0)
    spatial = (6,) * dims
    x = torch.randn(2, 8, *spatial, generator=g).to(dev)
    w = torch.randn(8, 8, *(3,) * dims, generator=g).to(dev)
    go = torch.randn(2, 8, *spatial, generator=g).to(dev)
    if dims == 1 and x_cl:
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    if dims > 1:
        fmt = CL[x.dim()]
        x, w, go = (t.contiguous(memory_format=fmt) if flag else t
                    for t, flag in ((x, x_cl), (w, w_cl), (go, go_cl)))
    real = _layouts(x, w, go)
    with FakeTensorMode() as mode:
        fake = _layouts(*(mode.from_tensor(t) for t in (x, w, go)))
    assert real == fake, f"output, input gradient, weight gradient strides: {real} on the device, {fake} traced"


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return (self.conv2(y) * 2 + y).sigmoid()


def test_a_channels_last_model_trains_compiled_as_eager(dev: torch.device) -> None:
    torch.manual_seed(0)
    eager = ConvBN().to(dev).to(memory_format=torch.channels_last).train()
    model = copy.deepcopy(eager)
    step = compile_fl(model)
    g = torch.Generator().manual_seed(1)
    for i in range(2):
        x = torch.randn(4, 3, 16, 16, generator=g).to(dev).contiguous(memory_format=torch.channels_last)
        out_e, out_c = eager(x), step(x)
        assert_close(out_c, out_e, f"output of step {i}")
        out_e.square().sum().backward()
        out_c.square().sum().backward()
        for (name, p_e), p_c in zip(eager.named_parameters(), model.parameters()):
            # conv.bias feeds batch norm: its gradient is a sum that cancels to ~0.
            assert_close(p_c.grad, p_e.grad, f"gradient of {name}, step {i}", rtol=1e-3, atol=1e-4)
            p_e.grad = p_c.grad = None
    for (name, b_e), b_c in zip(eager.named_buffers(), model.buffers()):
        assert_close(b_c, b_e, f"buffer {name}")
    assert {r.kind for r in graph_reports()} == {"forward", "backward"}
    assert all(r.accepted_regions for r in graph_reports()), [r.describe() for r in graph_reports()]


def test_without_convolution_kernels_results_are_laid_out_as_traced() -> None:
    """A plugin with a graph compiler and no convolution kernel: the CPU
    fallback runs the convolutions, and their results travel back in the
    layouts the traced graph planned (a CPU kernel keeps channels-last
    inputs' layout where a device's convolution does not)."""
    here = Path(__file__).parent
    out = assert_ok(run_python(
        f"""
        import sys
        sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]
        import torch, torch_fl
        import test_channels_last as t
        assert "aten::convolution" not in torch_fl.get_plugin().kernels
        dev = torch.device({DEVICE!r}, 0)
        for case in t.CASES:
            t.test_convolution_layouts_are_fake_tensors(dev, *case)
        t.test_a_channels_last_model_trains_compiled_as_eager(dev)
        s = torch_fl.op_stats()
        print("ok", s.get("aten::convolution").cpu_fallback, s.get("aten::convolution_backward").cpu_fallback)
        """, env={"TORCH_FL_DISABLE_KERNELS": "aten::convolution,aten::convolution_backward",
                  "TORCH_FL_FALLBACK": "silent"}))
    ok, forward, backward = out.split()[-3:]
    assert ok == "ok" and int(forward) >= len(CASES) and int(backward) >= len(CASES), out


class NormFirst(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gn = nn.GroupNorm(4, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.gn(x) * 2 + x).sigmoid()


def test_a_dense_kernel_on_a_channels_last_input_feeds_a_region(dev: torch.device) -> None:
    """flemu's group norm kernel writes dense outputs (CONTIGUOUS_OUTPUTS); on
    a channels-last input PyTorch's meta function, and so the traced graph,
    lays the result out channels-last (torch 2.13), and the fused region
    after it was compiled for that."""
    torch.manual_seed(0)
    model = NormFirst().to(dev)
    step = compile_fl(copy.deepcopy(model))
    x = torch.randn(4, 16, 8, 8).to(dev).contiguous(memory_format=torch.channels_last)
    assert_close(step(x), model(x), "output")
    traced = aten.native_group_norm(x.to("meta"), None, None, 4, 16, 64, 4, 1e-5)[0]
    assert model.gn(x).stride() == traced.stride(), (model.gn(x).stride(), traced.stride())
    assert any(r.accepted_regions for r in graph_reports("forward")), [r.describe() for r in graph_reports()]
