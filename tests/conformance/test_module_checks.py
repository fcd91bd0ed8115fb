"""The L1 module checks fail for the defects they name. A bridge whose Module.to()
makes new Parameters is emulated with torch.__future__'s
overwrite_module_params_on_conversion (Module._apply then wraps every converted
tensor in a new Parameter, module by module): the tie of an embedding and its
output layer comes apart and an optimizer built before .to() keeps the old
tensors. The suite's test functions run here in this process, on flemu."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch_fl
from support import load_module
from torch_fl_conformance.session import SUITE_DIR


@pytest.fixture(scope="module")
def suite() -> Any:
    return load_module(SUITE_DIR / "L1" / "test_modules.py", "suite_modules")


@pytest.fixture(scope="module")
def device(flemu: torch_fl.PluginHandle) -> str:
    return f"{flemu.name}:0"


@pytest.fixture
def new_parameters_on_to() -> Iterator[None]:
    previous = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        yield
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(previous)


@pytest.mark.parametrize("name", ["test_tied_weights_stay_tied",
                                  "test_optimizer_built_before_to",
                                  "test_state_dict_round_trip",
                                  "test_channels_last_conversion",
                                  "test_inplace_on_parameter_views", "test_swap_tensors"])
def test_module_checks_pass_on_flemu(suite: Any, device: str, name: str) -> None:
    getattr(suite, name)(device)


@pytest.mark.parametrize("name", ["test_tied_weights_stay_tied",
                                  "test_optimizer_built_before_to"])
def test_module_checks_fail_when_to_makes_new_parameters(
        suite: Any, device: str, name: str, new_parameters_on_to: None) -> None:
    with pytest.raises(AssertionError, match="no longer|came apart|replaced"):
        getattr(suite, name)(device)
