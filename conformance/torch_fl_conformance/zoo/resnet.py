"""ResNet-18 for CIFAR-sized images: the BasicBlock layout of He et al. (2016)
with its [2, 2, 2, 2] stages, batch norm after every convolution, projection
shortcuts where the shape changes, global average pooling and a linear head.
The CIFAR stem (3x3 convolution, no max pool) keeps 32x32 inputs meaningful;
the channel widths are a quarter of the original (16-32-64-128) so a parity
run stays short on a two-core host. The layer structure, and so the set of
operators and their backward passes, is the real one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._spec import ModelSpec, Tolerances
from .tape import relu

__all__ = ["SPEC", "BasicBlock", "ResNet18"]

BATCH = 8
CLASSES = 10


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = CLASSES, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers = []
        in_planes = width
        for i, blocks in enumerate((2, 2, 2, 2)):
            planes = width * 2**i
            stride = 1 if i == 0 else 2
            stage = []
            for b in range(blocks):
                stage.append(BasicBlock(in_planes, planes, stride if b == 0 else 1))
                in_planes = planes
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.fc(torch.flatten(self.pool(out), 1))


def _build() -> nn.Module:
    return ResNet18()


def _make_batch(seed: int) -> tuple[tuple[Any, ...], Any]:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(BATCH, 3, 32, 32, generator=g)
    labels = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return (images,), labels


def _loss(model: nn.Module, inputs: tuple[Any, ...], target: Any) -> torch.Tensor:
    return F.cross_entropy(model(*inputs), target)


def _optimizer(params: Iterable[nn.Parameter], device_type: str) -> torch.optim.Optimizer:
    # The fused kernel on every device (the CPU has one too), so both sides
    # run the same update rule. At lr=0.02 ten steps on batches of 8 are
    # chaotic: the CPU against itself (1 vs 2 threads) drifts 1.6% in loss and
    # 0.03 in the eval output, more than the tolerances; at 0.005 it agrees
    # to 1e-5, so a difference is the device's.
    return torch.optim.SGD(params, lr=0.005, momentum=0.9, weight_decay=5e-4, fused=True)


SPEC = ModelSpec(
    name="resnet18",
    family="cnn",
    description="ResNet-18 (BasicBlock [2,2,2,2], batch norm, CIFAR stem, widths 16-128), "
    "8x3x32x32 images, 10 classes, cross-entropy, fused SGD with momentum",
    build=_build,
    make_batch=_make_batch,
    loss_fn=_loss,
    make_optimizer=_optimizer,
    amp_dtype=torch.bfloat16,
    tolerances=Tolerances(),
)
