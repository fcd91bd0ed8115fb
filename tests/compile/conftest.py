"""Fixtures for graph-mode tests: a fresh Dynamo cache and report list per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch_fl.compile
from support import DEVICE


@pytest.fixture(autouse=True)
def fresh_compile_state(flemu: Any) -> Iterator[None]:
    import torch._dynamo

    torch._dynamo.reset()
    torch_fl.compile.clear_reports()
    yield
    torch._dynamo.reset()


@pytest.fixture
def dev() -> torch.device:
    return torch.device(f"{DEVICE}:0")


def compile_fl(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    return torch.compile(fn, backend="torchfl", options=options or None)
