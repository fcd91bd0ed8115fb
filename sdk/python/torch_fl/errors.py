"""The torch-fl exception hierarchy: every load-time failure is a PluginError."""

from __future__ import annotations

__all__ = [
    "ABIMismatchError",
    "InvalidDeviceNameError",
    "MissingEntrySymbolError",
    "MissingFunctionsError",
    "NotASharedLibraryError",
    "PluginConflictError",
    "PluginError",
    "PluginInitializationError",
    "PluginUnavailableError",
    "PluginNotFoundError",
]


class PluginError(RuntimeError):
    """A plugin could not be found, loaded or registered."""


class PluginNotFoundError(PluginError, FileNotFoundError):
    """No plugin library at the given path, or no installed plugin of that name."""


class NotASharedLibraryError(PluginError):
    """The file exists but is not a loadable shared library."""


class MissingEntrySymbolError(PluginError):
    """The library does not export TFL_GetPluginApi."""


class ABIMismatchError(PluginError):
    """The plugin was built for another major version of the plugin ABI."""


class MissingFunctionsError(PluginError):
    """The plugin's function table lacks required functions."""


class PluginInitializationError(PluginError):
    """The plugin's Plugin_Initialize refused to start."""


class PluginUnavailableError(PluginInitializationError):
    """The plugin loads but its hardware or driver is absent on this machine
    (Plugin_Initialize returned TFL_ERR_UNAVAILABLE): installed, not usable here."""


class InvalidDeviceNameError(PluginError, ValueError):
    """The device name is not usable as a PyTorch device type."""


class PluginConflictError(PluginError):
    """PrivateUse1 is already taken: PyTorch allows one such backend per process."""


# Maps the kinds reported by torch_fl._C.load_plugin to exception classes.
LOAD_ERRORS: dict[str, type[PluginError]] = {
    "not_found": PluginNotFoundError,
    "not_shared_library": NotASharedLibraryError,
    "no_entry_symbol": MissingEntrySymbolError,
    "abi_mismatch": ABIMismatchError,
    "missing_functions": MissingFunctionsError,
    "initialize_failed": PluginInitializationError,
    "unavailable": PluginUnavailableError,
    "bad_plugin": PluginError,
}
