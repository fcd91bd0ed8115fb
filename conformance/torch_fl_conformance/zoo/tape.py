"""Decisions a device may take differently from the CPU, recorded on one and
replayed on the other, so a parity check compares like with like.

Two kinds of decision are taped, each in call order:

- **dropout masks** (random draws): a device and the CPU draw different random
  streams, so two models with dropout never agree in train mode. Under a
  recording tape the zoo's ``Dropout`` runs ``torch.native_dropout`` (the
  device's own kernel, forward and backward) and keeps every mask; under a
  replaying tape it applies those masks instead of drawing new ones.
- **ReLU at ties** (rounding): ReLU's gradient jumps at 0, so an input that
  lies within rounding of 0 may pass on one side and stop on the other. One
  such element in a ResNet's deep layer, through batch norm's backward,
  changes every gradient below it by up to 1e-2: a correct device would pass
  or fail the gradient check by luck. Under a recording tape the zoo's
  ``relu`` keeps the device's outputs; under a replaying tape the CPU takes
  the device's side for each element where the two disagree **and** the
  CPU's input lies within ``tie_atol`` of 0 (the parity check passes its
  forward tolerance). Anywhere else the CPU keeps its own decision, so a
  device whose ReLU is wrong still fails.

Outside a tape both are the plain ``nn.Dropout`` and ``F.relu``. Parity checks
record on the device and replay on the CPU, so both sides drop the same
elements and still exercise the device's kernels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Dropout", "Tape", "relu", "use_tape"]

_active: Tape | None = None


class Tape:
    """The taped decisions of one or more forwards, in call order: dropout
    masks and ReLU outputs (``kinds`` says which is which). A recording
    keeps them where they were made, so recording never synchronizes the
    device; a replay moves each to the replaying side."""

    def __init__(self) -> None:
        """A recording tape; ``replay()`` makes the tape that plays it back."""
        self.mode: Literal["record", "replay"] = "record"
        self.tie_atol = 0.0
        self.kinds: list[str] = []
        self._entries: list[torch.Tensor] = []
        self._next = 0
        self.ties_taken = 0  # ReLU elements where the replay took the device's side

    def replay(self, tie_atol: float = 0.0, masks: list[torch.Tensor] | None = None) -> Tape:
        """A tape that replays this recording. `tie_atol`: how far from 0 an
        input of a ReLU may lie for the replay to take the recorded side;
        `masks`: replacements for the dropout masks, in order (DDP gathers
        every rank's)."""
        if self.mode != "record":
            raise ValueError("Tape.replay() plays back a recording tape, not a replaying one")
        if tie_atol < 0:
            raise ValueError(f"Tape.replay: tie_atol must be >= 0, got {tie_atol}")
        entries = list(self._entries)
        if masks is not None:
            slots = [i for i, k in enumerate(self.kinds) if k == "dropout"]
            if len(slots) != len(masks):
                raise ValueError(f"Tape.replay: {len(masks)} masks for {len(slots)} recorded dropout calls")
            for i, m in zip(slots, masks):
                entries[i] = m
        tape = Tape()
        tape.mode = "replay"
        tape.tie_atol = tie_atol
        tape.kinds = list(self.kinds)
        tape._entries = entries
        return tape

    @property
    def masks(self) -> list[torch.Tensor]:
        """The dropout masks, in call order, on the CPU."""
        return [e.cpu() for e, k in zip(self._entries, self.kinds) if k == "dropout"]

    def _take(self, kind: str, x: torch.Tensor) -> torch.Tensor:
        if self._next >= len(self._entries):
            raise RuntimeError(
                f"tape replay ran out after {len(self._entries)} recorded calls: the replayed "
                f"forward calls {kind} more often than the recorded one")
        i = self._next
        self._next += 1
        if self.kinds[i] != kind:
            raise RuntimeError(
                f"tape replay: call {i} is {kind} but the recorded forward called {self.kinds[i]} "
                "there; the replayed forward differs from the recorded one")
        entry = self._entries[i].to(device=x.device)
        if entry.shape != x.shape:
            raise RuntimeError(
                f"tape replay: {kind} call {i} recorded shape {tuple(entry.shape)} but the input has "
                f"shape {tuple(x.shape)}; the replayed forward differs from the recorded one")
        return entry

    def dropout(self, x: torch.Tensor, p: float) -> torch.Tensor:
        if self.mode == "record":
            out, mask = torch.native_dropout(x, p, True)
            self._record("dropout", mask.detach())
            return out
        mask = self._take("dropout", x)
        scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
        return x * mask.to(dtype=x.dtype) * scale

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(x)
        if self.mode == "record":
            # Kept on the device (a copy, so later in-place ops cannot change
            # it): no synchronization inside the timed step.
            self._record("relu", out.detach().clone())
            return out
        device_passes = self._take("relu", x) > 0
        tie = (device_passes != (out > 0)) & (x.detach().abs() <= self.tie_atol)
        taken = int(tie.sum())
        if taken == 0:
            return out
        self.ties_taken += taken
        # At a tie the CPU passes x (gradient 1) where the device passed, and
        # 0 (gradient 0) where it stopped.
        return torch.where(tie, x * device_passes.to(x.dtype), out)

    def _record(self, kind: str, entry: torch.Tensor) -> None:
        self.kinds.append(kind)
        self._entries.append(entry)

    def finish(self) -> None:
        if self.mode == "replay" and self._next != len(self._entries):
            raise RuntimeError(
                f"tape replay used {self._next} of {len(self._entries)} recorded calls; the "
                "replayed forward differs from the recorded one")


@contextlib.contextmanager
def use_tape(tape: Tape) -> Iterator[Tape]:
    """Makes every zoo ``Dropout`` in train mode and every zoo ``relu`` record
    or replay through `tape`."""
    global _active
    previous, _active = _active, tape
    try:
        yield tape
    finally:
        _active = previous
    tape.finish()


class Dropout(nn.Dropout):
    """``nn.Dropout`` that honours an active ``Tape``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if _active is None:
            return F.dropout(x, self.p, True, self.inplace)
        return _active.dropout(x, self.p)


def relu(x: torch.Tensor) -> torch.Tensor:
    """``F.relu`` that honours an active ``Tape``."""
    return F.relu(x) if _active is None else _active.relu(x)
