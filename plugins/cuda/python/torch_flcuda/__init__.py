"""NVIDIA GPUs for PyTorch as a torch-fl plugin: the 'flcuda' device.

This package only locates the native plugin (``libflcuda.so``) and hands it
to torch-fl; the device lives in that library. It imports neither torch nor
torch_fl at import time, so the ``torch.backends`` entry point stays cheap
and can never break ``import torch``. On a machine without an NVIDIA driver
or GPU the plugin refuses to initialize with a message saying which is
missing, and autoload moves on to the next installed plugin.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["DEVICE", "PRIORITY", "library_path", "plugin_spec"]
__version__ = "0.1.0"

DEVICE = "flcuda"
# Above flemu (0): where a GPU is present this plugin is the one autoloaded.
PRIORITY = 50
_LIBRARY_NAME = "libflcuda.so"
_LIBRARY_ENV = "FLCUDA_LIBRARY"


def library_path() -> str:
    """Absolute path of the plugin library (``FLCUDA_LIBRARY`` overrides it).

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
            f"with 'pip install --no-build-isolation plugins/cuda', or point {_LIBRARY_ENV} at a "
            "built library"
        )
    return str(path)


def plugin_spec() -> dict[str, object]:
    """What the ``torch_fl.plugins`` entry point reports to torch-fl."""
    return {"name": DEVICE, "library": library_path(), "priority": PRIORITY}


def _autoload() -> None:
    """The ``torch.backends`` entry point: registers the best installed plugin."""
    try:
        from torch_fl._autoload import autoload

        autoload()
    except Exception as exc:  # any failure must become a warning, never an exception
        warnings.warn(
            f"{DEVICE}: autoload failed: {exc}; the {DEVICE} device is not registered",
            RuntimeWarning,
            stacklevel=2,
        )
