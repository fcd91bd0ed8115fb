"""The bridge, torch_fl._C, is compiled against one torch release: loaded under
another it can crash in its first registration. So before the extension loads,
the running torch is compared with the one it was built for, and a mismatch is
an ImportError naming both and what to do. It surfaces where the bridge is
first needed (registering a plugin); autoload turns it into a warning and
leaves the device unregistered, so `import torch` keeps working.

Importing this module installs the check (torch_fl/__init__.py does, first of
all): the one import-time effect of the package, because the check must be in
place before anything can import the extension."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["BridgeVersionError", "check_torch_version", "install"]


class BridgeVersionError(ImportError):
    """torch_fl's compiled bridge was built for another torch release."""


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a torch version string such as "2.13.0+cpu"."""
    parts = version.split("+")[0].split(".")
    return tuple(int(p) for p in parts[:2] if p.isdigit())


def check_torch_version(running: str | None = None, built: str | None = None) -> None:
    if running is None:
        import torch

        running = torch.__version__
    if built is None:
        from torch_fl._build_info import TORCH_VERSION as built
    if _release(running) != _release(built):
        raise BridgeVersionError(
            f"torch_fl's bridge (torch_fl._C) was built for torch {built}, but torch {running} "
            f"is installed; a bridge only loads into the torch release it was built against. "
            f"Rebuild it against this torch (from a torch-fl checkout: "
            f"`pip install --no-build-isolation .`), or install the torch-fl build made for "
            f"torch {'.'.join(map(str, _release(running)))}. Plugins need no rebuild: their ABI "
            f"does not depend on torch."
        )


class _Guard(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torch_fl._C":
            check_torch_version()
            sys.meta_path.remove(self)
        return None


def install() -> None:
    """Checks the torch version when torch_fl._C is first imported."""
    if "torch_fl._C" not in sys.modules and not any(isinstance(f, _Guard) for f in sys.meta_path):
        sys.meta_path.insert(0, _Guard())


install()
