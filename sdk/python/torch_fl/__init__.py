"""torch-fl: plug a new AI accelerator into PyTorch with one shared library.

    import torch_fl
    torch_fl.register_device_plugin("flemu")      # or autoloaded at `import torch`
    x = torch.randn(4, 4, device="flemu:0")
    print(torch_fl.op_stats())                      # what ran natively, what fell back
"""

from __future__ import annotations

import os

# isort: off
# Before anything can import torch_fl._C, autoload included: importing it
# installs the check of the torch release the bridge was built for.
import torch_fl._build_check  # noqa: F401

# torch first: its import runs plugin autoload, which loads the modules below;
# importing them before torch would hand autoload half-initialized modules.
import torch  # noqa: F401
# isort: on

from torch_fl._active import get_plugin
from torch_fl._discovery import PluginSpec, discover_plugins
from torch_fl._handle import PluginHandle
from torch_fl._registration import register_device_plugin
from torch_fl.device_module import DeviceProperties
from torch_fl.errors import (
    ABIMismatchError,
    InvalidDeviceNameError,
    MissingEntrySymbolError,
    MissingFunctionsError,
    NotASharedLibraryError,
    PluginConflictError,
    PluginError,
    PluginInitializationError,
    PluginNotFoundError,
    PluginUnavailableError,
)
from torch_fl.op_stats import (
    fallback_mode,
    get_fallback_mode,
    op_stats,
    op_stats_scope,
    reset_op_stats,
    set_fallback_mode,
)
__version__ = "0.1.0"

# torch.compile(backend="torchfl"): registered when Dynamo loads, not imported here.
from torch_fl.compile._hook import install_backend_hook as _install_compile_backend  # noqa: E402

_install_compile_backend()

__all__ = [
    "ABIMismatchError",
    "DeviceProperties",
    "InvalidDeviceNameError",
    "MissingEntrySymbolError",
    "MissingFunctionsError",
    "NotASharedLibraryError",
    "OpStat",
    "OpStatsTable",
    "PluginConflictError",
    "PluginError",
    "PluginHandle",
    "PluginInitializationError",
    "PluginUnavailableError",
    "PluginNotFoundError",
    "PluginSpec",
    "abi_version",
    "discover_plugins",
    "fallback_mode",
    "get_fallback_mode",
    "cmake_prefix_path",
    "get_include",
    "get_plugin",
    "native_kernels",
    "op_stats",
    "op_stats_scope",
    "register_device_plugin",
    "reset_op_stats",
    "set_fallback_mode",
    "test_compatibility",
]


def get_include() -> str:
    """The directory holding torch_fl/*.h, the plugin ABI headers."""
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, "include")
    if os.path.isdir(installed):
        return installed
    return os.path.normpath(os.path.join(here, "..", "..", "include"))


def cmake_prefix_path() -> str:
    """A CMAKE_PREFIX_PATH entry under which find_package(TorchFL) finds the ABI
    (target torch_fl::abi)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "share", "cmake")


def abi_version() -> tuple[int, int]:
    """The plugin ABI version this torch_fl speaks (major, minor)."""
    from torch_fl import _C

    return tuple(_C.abi_version())


def native_kernels() -> dict[str, list[str]]:
    """Operator overloads served by the registered plugin, with their dtypes."""
    from torch_fl import _C

    return dict(_C.native_kernels())


def __getattr__(name: str):  # noqa: ANN202
    # Imported on first use: `import torch` autoloads this package, and neither
    # the doctor's module nor the op-stats snapshot types are needed to
    # register a plugin.
    if name == "test_compatibility":
        from torch_fl.tooling.doctor import test_compatibility

        return test_compatibility
    if name in ("OpStat", "OpStatsTable"):
        from torch_fl import _op_table

        return getattr(_op_table, name)
    raise AttributeError(f"module 'torch_fl' has no attribute {name!r}")
