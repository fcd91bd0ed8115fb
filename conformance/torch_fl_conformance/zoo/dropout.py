"""Dropout whose masks can be recorded on one device and replayed on another.

A device and the CPU draw different random streams, so two models with
dropout never agree in train mode. The zoo's models use ``Dropout`` below:
outside a tape it is ``nn.Dropout``; under ``DropoutTape("record")`` it runs
``torch.native_dropout`` (the device's own kernel, forward and backward) and
keeps every mask in call order; under ``DropoutTape("replay", masks)`` it
applies those masks instead of drawing new ones. Parity checks record on the
device and replay on the CPU, so both sides drop the same elements and still
exercise the device's dropout kernels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Dropout", "DropoutTape", "dropout_tape"]

_active: DropoutTape | None = None


class DropoutTape:
    """Masks of the dropout calls of one or more forwards, in call order."""

    def __init__(self, mode: Literal["record", "replay"], masks: list[torch.Tensor] | None = None) -> None:
        if mode not in ("record", "replay"):
            raise ValueError(f"DropoutTape mode must be 'record' or 'replay', got {mode!r}")
        if mode == "replay" and masks is None:
            raise ValueError("DropoutTape('replay') needs the masks of a recorded tape")
        self.mode = mode
        self.masks: list[torch.Tensor] = [] if masks is None else list(masks)
        self._next = 0

    def apply(self, x: torch.Tensor, p: float) -> torch.Tensor:
        if self.mode == "record":
            out, mask = torch.native_dropout(x, p, True)
            self.masks.append(mask.detach().to("cpu"))
            return out
        if self._next >= len(self.masks):
            raise RuntimeError(
                f"dropout replay ran out of masks after {len(self.masks)} calls: the replayed "
                "forward calls dropout more often than the recorded one"
            )
        mask = self.masks[self._next]
        self._next += 1
        if mask.shape != x.shape:
            raise RuntimeError(
                f"dropout replay: mask {self._next - 1} has shape {tuple(mask.shape)} but the input "
                f"has shape {tuple(x.shape)}; the replayed forward differs from the recorded one"
            )
        scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
        return x * mask.to(device=x.device, dtype=x.dtype) * scale

    def finish(self) -> None:
        if self.mode == "replay" and self._next != len(self.masks):
            raise RuntimeError(
                f"dropout replay used {self._next} of {len(self.masks)} recorded masks; the "
                "replayed forward differs from the recorded one"
            )


@contextlib.contextmanager
def dropout_tape(tape: DropoutTape) -> Iterator[DropoutTape]:
    """Makes every zoo ``Dropout`` in train mode record or replay through `tape`."""
    global _active
    previous, _active = _active, tape
    try:
        yield tape
    finally:
        _active = previous
    tape.finish()


class Dropout(nn.Dropout):
    """``nn.Dropout`` that honours an active ``DropoutTape``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if _active is None:
            return F.dropout(x, self.p, True, self.inplace)
        return _active.apply(x, self.p)
