"""Makes the {{ cookiecutter.device_name }} device the one this test session (and every process it
starts) runs on, even when other torch-fl plugins are installed next to it."""

from __future__ import annotations

import os

import pytest

import {{ cookiecutter.package_slug }}

DEVICE = {{ cookiecutter.package_slug }}.DEVICE

# PyTorch allows one PrivateUse1 backend per process. TORCH_FL_PLUGINS entries
# are registered before any installed plugin, whatever its priority: list this
# one there before torch is imported here or in a subprocess.
LIBRARY = {{ cookiecutter.package_slug }}.library_path()
_SELECTION = f"{DEVICE}={LIBRARY}"
_listed = os.environ.get("TORCH_FL_PLUGINS", "")
if not any(entry.startswith(f"{DEVICE}=") for entry in _listed.split(os.pathsep)):
    os.environ["TORCH_FL_PLUGINS"] = os.pathsep.join(e for e in (_SELECTION, _listed) if e)

import torch  # noqa: E402 - after the selection above: autoload runs at import
import torch_fl  # noqa: E402


@pytest.fixture(scope="session")
def plugin() -> torch_fl.PluginHandle:
    """The registered {{ cookiecutter.device_name }} plugin."""
    handle = torch_fl.get_plugin()
    if handle is None:
        # Autoload is off (TORCH_FL_AUTOLOAD=0 or TORCH_DEVICE_BACKEND_AUTOLOAD=0).
        handle = torch_fl.register_device_plugin(DEVICE, plugin_path=LIBRARY)
    if handle.name != DEVICE:
        pytest.fail(
            f"torch registered the '{handle.name}' device ({handle.library}), not '{DEVICE}': "
            "torch was imported before tests/conftest.py could select this plugin. Set "
            f"TORCH_FL_PLUGINS={_SELECTION} or uninstall the other plugin."
        )
    return handle


@pytest.fixture(scope="session")
def device(plugin: torch_fl.PluginHandle) -> torch.device:
    return torch.device(DEVICE, 0)
