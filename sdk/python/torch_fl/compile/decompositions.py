"""Decompositions applied while AOTAutograd traces, chosen to expose fusion.

Only ops whose decomposition is plain elementwise arithmetic (plus work on
tiny per-channel tensors) belong here: the elementwise part then fuses with
its neighbours (batch norm, ReLU and a residual add become one pass over
memory) instead of running as a separate kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["decomposition_table"]

aten = torch.ops.aten


def _batch_norm_inference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Eval-mode batch norm: y = (x - mean) * rsqrt(var + eps) * w + b, per channel.
    shape = [1, -1] + [1] * (x.dim() - 2)
    scale = torch.rsqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    y = x * scale.reshape(shape) + shift.reshape(shape)
    empty = x.new_zeros((0,))
    return y.to(x.dtype), empty, empty


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    return {aten._native_batch_norm_legit_no_training.default: _batch_norm_inference}
