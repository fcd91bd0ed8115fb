"""The plugin registered in this process. PyTorch has one PrivateUse1 backend per
process, so there is at most one; registration sets it, everything else reads it."""

from __future__ import annotations

from torch_fl._handle import PluginHandle

__all__ = ["get_plugin", "set_plugin"]

_handle: PluginHandle | None = None


def get_plugin() -> PluginHandle | None:
    """The registered plugin, or None."""
    return _handle


def set_plugin(handle: PluginHandle) -> None:
    global _handle
    _handle = handle
