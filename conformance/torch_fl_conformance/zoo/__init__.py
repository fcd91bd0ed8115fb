"""The model zoo: four common models a new device must train like the CPU does
(a CNN, a transformer, a sequence model and a generative model), built from
scratch with random weights — nothing is downloaded.

>>> from torch_fl_conformance.zoo import all_models, get_model
>>> from torch_fl_conformance.zoo.parity import check_parity
>>> check_parity(get_model("resnet18"), device="flemu").passed
"""

from __future__ import annotations

from . import bert, lstm_lm, resnet, unet
from ._spec import ModelSpec, Tolerances

__all__ = ["ModelSpec", "Tolerances", "all_models", "get_model"]

_MODELS: tuple[ModelSpec, ...] = (resnet.SPEC, bert.SPEC, lstm_lm.SPEC, unet.SPEC)


def all_models() -> tuple[ModelSpec, ...]:
    """Every model of the zoo, in a stable order."""
    return _MODELS


def get_model(name: str) -> ModelSpec:
    """The model called `name`; KeyError listing the names otherwise."""
    for spec in _MODELS:
        if spec.name == name:
            return spec
    raise KeyError(f"no zoo model named {name!r}; the zoo has: {', '.join(s.name for s in _MODELS)}")
