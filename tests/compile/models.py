"""The conformance zoo's models as graph-mode test cases.

Dropout is switched off (p = 0) on both sides: eager and compiled runs draw
their masks in different orders, and mask replay (zoo.dropout) works through
Python state Dynamo would trace into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch_fl_conformance.zoo import ModelSpec, all_models


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
        return tuple(_to(x, device) for x in inputs), _to(target, device)

    def loss(self, model: nn.Module, inputs: tuple[Any, ...], target: Any) -> torch.Tensor:
        return self.spec.loss_fn(model, inputs, target)


def _to(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def model_cases() -> list[ModelCase]:
    return [ModelCase(spec) for spec in all_models()]
