"""The conformance zoo's models as graph-mode test cases.

Dropout is switched off (p = 0) on both sides: eager and compiled runs draw
their masks in different orders, and mask replay (zoo.tape) works through
Python state Dynamo would trace into.

Recurrent layers need Dynamo's own switch: without
``torch._dynamo.config.allow_rnn`` Dynamo does not trace ``nn.LSTM`` (nor
the forward that calls it) and runs it eagerly, so no graph would reach the
backend. The cases that hold one say so in ``dynamo_config`` and the tests
apply it; tests/compile/test_models.py checks the eager behaviour without it.
Dynamo unrolls the recurrence, one cell per time step, so sequence models
are fed a shorter sequence here (``SEQ_STEPS``) to keep compilation short."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch_fl_conformance.zoo import ModelSpec, all_models

# Time steps fed to sequence models (family "sequence"); each step becomes
# one unrolled cell in the forward and in the backward graph.
SEQ_STEPS = 6


@dataclass
class ModelCase:
    spec: ModelSpec

    @property
    def name(self) -> str:
        return self.spec.name

    def build(self, device: torch.device) -> nn.Module:
        torch.manual_seed(0)
        model = self.spec.build()
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        return model.to(device)

    def batch(self, device: torch.device, seed: int = 0) -> tuple[tuple[Any, ...], Any]:
        inputs, target = self.spec.make_batch(seed)
        if self.spec.family == "sequence":
            inputs = tuple(x[:, :SEQ_STEPS] for x in inputs)
            target = target[:, :SEQ_STEPS]
        return tuple(_to(x, device) for x in inputs), _to(target, device)

    def loss(self, model: nn.Module, inputs: tuple[Any, ...], target: Any) -> torch.Tensor:
        return self.spec.loss_fn(model, inputs, target)


def dynamo_config(model: nn.Module) -> dict[str, Any]:
    """The Dynamo settings `model` needs to be captured into graphs."""
    if any(isinstance(m, nn.RNNBase) for m in model.modules()):
        return {"allow_rnn": True}
    return {}


@contextlib.contextmanager
def capturing(model: nn.Module) -> Iterator[None]:
    """Applies dynamo_config(model) for the duration of the block."""
    import torch._dynamo

    with torch._dynamo.config.patch(**dynamo_config(model)):
        yield


def _to(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def model_cases() -> list[ModelCase]:
    return [ModelCase(spec) for spec in all_models()]
