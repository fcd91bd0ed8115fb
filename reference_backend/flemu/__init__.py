"""flemu: the FL-2000 emulator, torch-fl's CPU-emulated reference accelerator.

This package only locates the native plugin (``libflemu.so``) and hands it to
torch-fl. It imports neither torch nor torch_fl at import time, so the
``torch.backends`` entry point stays cheap and can never break ``import torch``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["library_path", "plugin_spec"]
__version__ = "0.1.0"

_LIBRARY_NAME = "libflemu.so"


def library_path() -> str:
    """Absolute path of the flemu plugin library.

    ``FLEMU_LIBRARY`` overrides the copy installed inside this package.

    Raises:
        FileNotFoundError: if the library does not exist.
    """
    override = os.environ.get("FLEMU_LIBRARY")
    if override:
        path = Path(override).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(
                f"FLEMU_LIBRARY={override!r} does not name an existing file; "
                "unset it to use the library installed with the flemu package"
            )
        return str(path)
    path = Path(__file__).resolve().parent / _LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{_LIBRARY_NAME} is not installed next to {__file__}; build and install flemu with "
            "'pip install --no-build-isolation ./reference_backend', or point FLEMU_LIBRARY at a built library"
        )
    return str(path)


def plugin_spec() -> dict[str, object]:
    """What the ``torch_fl.plugins`` entry point reports to torch-fl."""
    return {"name": "flemu", "library": library_path(), "priority": 0}


def _autoload() -> None:
    """The ``torch.backends`` entry point: registers the flemu device.

    Never raises: a failing backend entry point would break every ``import torch``.
    """
    try:
        from torch_fl._autoload import autoload

        autoload()
    except Exception as exc:  # noqa: BLE001 - any failure must become a warning
        warnings.warn(
            f"flemu: autoload failed: {exc}; the flemu device is not registered",
            RuntimeWarning,
            stacklevel=2,
        )
