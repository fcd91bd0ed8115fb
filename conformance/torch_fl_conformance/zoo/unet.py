"""A small denoising-diffusion UNet (Ho et al., 2020): sinusoidal timestep
embedding and MLP, residual blocks of GroupNorm, SiLU and 3x3 convolutions with
the timestep added between them, strided-convolution downsampling, one
upsampling by nearest neighbour + convolution and one by transposed
convolution, skip connections concatenated on the way up, and an MSE loss on
the predicted noise of a DDPM forward process (linear beta schedule)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._spec import ModelSpec, Tolerances
from .tape import Dropout

__all__ = ["SPEC", "UNet"]

BATCH = 4
CHANNELS = 3
SIZE = 16
BASE = 32
TIME_DIM = 32
STEPS = 1000
GROUPS = 8
DROPOUT = 0.1


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None, :]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(GROUPS, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(GROUPS, cout)
        self.dropout = Dropout(DROPOUT)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip: nn.Module = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(F.silu(temb))[:, :, None, None]
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return h + self.skip(x)


class UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        c1, c2 = BASE, 2 * BASE
        tdim = 4 * TIME_DIM
        self.time_mlp = nn.Sequential(nn.Linear(TIME_DIM, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.conv_in = nn.Conv2d(CHANNELS, c1, 3, padding=1)
        self.down1 = ResBlock(c1, c1, tdim)
        self.pool1 = nn.Conv2d(c1, c1, 3, stride=2, padding=1)
        self.down2 = ResBlock(c1, c2, tdim)
        self.pool2 = nn.Conv2d(c2, c2, 3, stride=2, padding=1)
        self.mid1 = ResBlock(c2, c2, tdim)
        self.mid2 = ResBlock(c2, c2, tdim)
        self.up2 = nn.ConvTranspose2d(c2, c2, 4, stride=2, padding=1)
        self.dec2 = ResBlock(c2 + c2, c2, tdim)
        self.up1 = nn.Conv2d(c2, c2, 3, padding=1)  # after nearest-neighbour upsampling
        self.dec1 = ResBlock(c2 + c1, c1, tdim)
        self.norm_out = nn.GroupNorm(GROUPS, c1)
        self.conv_out = nn.Conv2d(c1, CHANNELS, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time_mlp(timestep_embedding(t, TIME_DIM))
        h1 = self.down1(self.conv_in(x), temb)  # SIZE
        h2 = self.down2(self.pool1(h1), temb)  # SIZE / 2
        h = self.mid2(self.mid1(self.pool2(h2), temb), temb)  # SIZE / 4
        h = self.dec2(torch.cat([self.up2(h), h2], dim=1), temb)
        h = self.up1(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.dec1(torch.cat([h, h1], dim=1), temb)
        return self.conv_out(F.silu(self.norm_out(h)))


def _build() -> nn.Module:
    return UNet()


def _alpha_bar() -> torch.Tensor:
    betas = torch.linspace(1e-4, 0.02, STEPS, dtype=torch.float64)
    return torch.cumprod(1.0 - betas, dim=0).float()


def _make_batch(seed: int) -> tuple[tuple[Any, ...], Any]:
    g = torch.Generator().manual_seed(seed)
    # Smooth "images": low-resolution noise upsampled, in [-1, 1].
    x0 = torch.tanh(F.interpolate(torch.randn(BATCH, CHANNELS, 4, 4, generator=g), size=SIZE, mode="bilinear"))
    t = torch.randint(0, STEPS, (BATCH,), generator=g)
    noise = torch.randn(BATCH, CHANNELS, SIZE, SIZE, generator=g)
    ab = _alpha_bar()[t][:, None, None, None]
    x_t = ab.sqrt() * x0 + (1.0 - ab).sqrt() * noise
    return (x_t, t), noise


def _loss(model: nn.Module, inputs: tuple[Any, ...], target: Any) -> torch.Tensor:
    return F.mse_loss(model(*inputs), target)


def _optimizer(params: Iterable[nn.Parameter], device_type: str) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3, fused=True)


SPEC = ModelSpec(
    name="unet",
    family="generative",
    description="DDPM denoising UNet (residual GroupNorm/SiLU blocks with timestep embedding, "
    "strided-conv down, transposed-conv and nearest-upsample up, concatenated skips; 32-64 "
    "channels), 4x3x16x16 noisy images, MSE on the noise, fused Adam",
    build=_build,
    make_batch=_make_batch,
    loss_fn=_loss,
    make_optimizer=_optimizer,
    amp_dtype=torch.bfloat16,
    tolerances=Tolerances(),
)
