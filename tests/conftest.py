"""Fixtures: the flemu device this test process autoloaded at `import torch`."""

from __future__ import annotations

import os

# The project's own tests run flemu with contract checking: every kernel
# verifies what the bridge promised it, and guard regions catch stray writes
# (FLEMU_CHECK_CONTRACTS=0 turns it off). Set before torch loads the plugin.
os.environ.setdefault("FLEMU_CHECK_CONTRACTS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402,F401 - autoloads flemu through its torch.backends entry point

import torch_fl  # noqa: E402
from support import flemu_handle  # noqa: E402


@pytest.fixture(scope="session")
def flemu() -> torch_fl.PluginHandle:
    return flemu_handle()
