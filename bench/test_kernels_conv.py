"""flemu's convolution against PyTorch's own CPU convolution (oneDNN), same run:
forward + backward (input, weight and bias gradients) of one ResNet-18 layer,
a 3x3, 64 -> 64 channel convolution on a batch of 8 CIFAR-sized 32x32 maps,
the same at 16 channels (the zoo ResNet-18's width), and a strided 3x3,
64 -> 128 downsampling layer. Reported as the ratio of
medians flemu / CPU (target: <= 1.1x), the two sides timed in the same rounds
(_interleave.py); nothing fails on a time. Each side first runs its step 10
times, past the tens of milliseconds a fresh process's threads may share one
core (see test_kernels_gemm.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch_fl
from _interleave import interleaved
from _report import row

LABELS = {"resnet_3x3_16": "16→16", "resnet_3x3_64": "64→64", "resnet_3x3_64_128_s2": "64→128 stride 2"}
LAYERS = {
    # The zoo ResNet-18's first stage: 16 channels, where a GEMM per sample is thin.
    "resnet_3x3_16": {"input": (8, 16, 32, 32), "weight": (16, 16, 3, 3), "stride": 1},
    "resnet_3x3_64": {"input": (8, 64, 32, 32), "weight": (64, 64, 3, 3), "stride": 1},
    "resnet_3x3_64_128_s2": {"input": (8, 64, 32, 32), "weight": (128, 64, 3, 3), "stride": 2},
}


def make_step(layer: str, device: str) -> Callable[[], None]:
    spec = LAYERS[layer]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(spec["input"], generator=g).to(device).requires_grad_()
    w = (torch.randn(spec["weight"], generator=g) * 0.05).to(device).requires_grad_()
    b = torch.zeros(spec["weight"][0]).to(device).requires_grad_()
    out_shape = F.conv2d(x.detach(), w.detach(), b.detach(), stride=spec["stride"], padding=1).shape
    grad = torch.randn(out_shape, generator=g).to(device)

    def step() -> None:
        x.grad = w.grad = b.grad = None
        y = F.conv2d(x, w, b, stride=spec["stride"], padding=1)
        y.backward(grad)
        if device != "cpu":
            torch.flemu.synchronize()

    step()  # first call: output metadata, allocator warm-up
    return step


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_conv_fwd_bwd_flemu(benchmark, layer: str) -> None:
    row(benchmark, "conv 3×3 forward+backward, batch 8 of 32×32, flemu vs CPU (oneDNN)", LABELS[layer], 1.1)
    step, cpu_step = make_step(layer, "flemu"), make_step(layer, "cpu")
    with torch_fl.fallback_mode("error"), torch_fl.op_stats_scope() as scope:
        interleaved(benchmark, step, cpu_step, f"CPU {layer}, interleaved", rounds=9, warmup=10)
    for op in ("aten::convolution", "aten::convolution_backward"):
        assert scope.table.get(op).native > 0, scope.table
