"""What the zoo says about one model: how to build it, feed it, train it, and
how close a device must stay to the CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ModelSpec", "Tolerances"]


@dataclass(frozen=True)
class Tolerances:
    """Bounds a device's results must meet against the CPU (elementwise
    ``|device - cpu| <= atol + rtol * |cpu|``, as ``torch.allclose``)."""

    forward_atol: float = 1e-3
    forward_rtol: float = 1e-3
    grad_atol: float = 1e-2
    grad_rtol: float = 1e-2
    loss_rtol: float = 1e-2  # per training step, device vs CPU
    amp_atol: float = 5e-2
    amp_rtol: float = 5e-2


@dataclass(frozen=True)
class ModelSpec:
    """One model of the zoo.

    ``build`` is deterministic under ``torch.manual_seed``; ``make_batch(seed)``
    returns ``(inputs, target)`` as CPU tensors, ``model(*inputs)`` is the
    forward whose outputs are compared, and ``loss_fn(model, inputs, target)``
    runs that forward and returns a scalar loss. ``make_optimizer(params,
    device_type)`` builds the optimizer the model trains with on that device.
    """

    name: str  # "resnet18", "bert_mlm", "lstm_lm", "unet"
    family: str  # "cnn" | "transformer" | "sequence" | "generative"
    description: str
    build: Callable[[], torch.nn.Module]
    make_batch: Callable[[int], tuple[tuple[Any, ...], Any]]
    loss_fn: Callable[[torch.nn.Module, tuple[Any, ...], Any], torch.Tensor]
    make_optimizer: Callable[[Iterable[torch.nn.Parameter], str], torch.optim.Optimizer]
    amp_dtype: torch.dtype | None  # None: no AMP check for this model
    tolerances: Tolerances = Tolerances()
