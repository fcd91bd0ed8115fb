"""Fixtures the suite's tests use; registered only when the suite is active."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from torch_fl_conformance.session import KEY


@pytest.fixture(scope="session")
def run_state(pytestconfig: pytest.Config) -> Any:
    if KEY not in pytestconfig.stash:
        from torch_fl_conformance.target import describe_choices

        pytest.fail(describe_choices(), pytrace=False)
    return pytestconfig.stash[KEY]


@pytest.fixture(scope="session")
def target(run_state: Any) -> Any:
    """The plugin under test (torch_fl_conformance.target.Target)."""
    return run_state.target


@pytest.fixture(scope="session")
def device(target: Any) -> str:
    """The first device of the plugin, e.g. 'flemu:0'."""
    return target.device(0)


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[[str, Any], None]:
    """record(key, value): attaches JSON-serializable data to this test's report entry."""

    def _record(key: str, value: Any) -> None:
        request.node.user_properties.append((f"torchfl.{key}", value))

    return _record
