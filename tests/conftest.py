"""Fixtures: the flemu device this test process autoloaded at `import torch`."""

from __future__ import annotations

import pytest
import torch  # noqa: F401 - autoloads flemu through its torch.backends entry point

import torch_fl
from support import flemu_handle


@pytest.fixture(scope="session")
def flemu() -> torch_fl.PluginHandle:
    return flemu_handle()
