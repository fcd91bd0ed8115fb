"""{{ cookiecutter.vendor_name }} {{ cookiecutter.chip_name }} for PyTorch: the torch-fl plugin for the '{{ cookiecutter.device_name }}' device.

This package only locates the native plugin (``lib{{ cookiecutter.device_name }}.so``) and hands
it to torch-fl; the device itself lives in that library. It imports neither
torch nor torch_fl at import time, so the ``torch.backends`` entry point stays
cheap and can never break ``import torch``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["DEVICE", "PRIORITY", "library_path", "plugin_spec"]
__version__ = "{{ cookiecutter.version }}"

DEVICE = "{{ cookiecutter.device_name }}"
# PyTorch allows one PrivateUse1 backend per process. Autoload registers the
# installed plugin with the highest priority; torch-fl's reference device,
# flemu, has 0, so with both installed this plugin is the one registered.
# TORCH_FL_PLUGINS entries come before any installed plugin (see torch-fl's
# user guide), so a user can still choose another one.
PRIORITY = 100
_LIBRARY_NAME = "lib{{ cookiecutter.device_name }}.so"
_LIBRARY_ENV = "{{ cookiecutter.c_prefix }}_LIBRARY"


def library_path() -> str:
    """Absolute path of the plugin library.

    ``{{ cookiecutter.c_prefix }}_LIBRARY`` overrides the copy installed inside this package
    (handy while iterating on a build tree).

    Raises:
        FileNotFoundError: if the library does not exist.
    """
    override = os.environ.get(_LIBRARY_ENV)
    if override:
        path = Path(override).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(
                f"{_LIBRARY_ENV}={override!r} does not name an existing file; "
                "unset it to use the library installed with this package"
            )
        return str(path)
    path = Path(__file__).resolve().parent / _LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{_LIBRARY_NAME} is not installed next to {__file__}; build and install the plugin "
            f"with 'pip install --no-build-isolation .', or point {_LIBRARY_ENV} at a built library"
        )
    return str(path)


def plugin_spec() -> dict[str, object]:
    """What the ``torch_fl.plugins`` entry point reports to torch-fl."""
    return {"name": DEVICE, "library": library_path(), "priority": PRIORITY}


def _autoload() -> None:
    """The ``torch.backends`` entry point: registers the best installed plugin.

    Never raises: a raising entry point would break every ``import torch``.
    """
    try:
        from torch_fl._autoload import autoload

        autoload()
    except Exception as exc:  # any failure must become a warning, never an exception
        warnings.warn(
            f"{DEVICE}: autoload failed: {exc}; the {DEVICE} device is not registered",
            RuntimeWarning,
            stacklevel=2,
        )
