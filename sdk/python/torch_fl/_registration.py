"""Loading a plugin and making its device a PyTorch device."""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
import warnings
from typing import Any

import torch

from torch_fl import _decomp
from torch_fl._active import get_plugin, set_plugin
from torch_fl._discovery import PluginSpec, discover_plugins
from torch_fl._handle import PluginHandle
from torch_fl.device_module import _after_fork_in_child, make_device_module
from torch_fl.errors import (
    LOAD_ERRORS,
    InvalidDeviceNameError,
    PluginConflictError,
    PluginNotFoundError,
)
from torch_fl.op_stats import FALLBACK_MODES, op_stats, set_fallback_mode

__all__ = ["PluginHandle", "autoload_best_plugin", "get_plugin", "register_device_plugin"]

_DEVICE_NAME = re.compile(r"[a-z_]+")
_lock = threading.Lock()


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _DEVICE_NAME.fullmatch(name):
        raise InvalidDeviceNameError(
            f"invalid device name {name!r}: a torch-fl device name must match [a-z_]+ "
            "(lowercase letters and underscores only; PyTorch accepts names such as "
            "'fl2000' when renaming PrivateUse1 but then cannot parse 'fl2000:0')"
        )
    reserved = {"cpu", "cuda", "meta", "mps", "xpu", "xla", "hpu", "mtia", "ipu", "lazy",
                "vulkan", "fpga", "maia", "privateuseone", "hip", "ve", "ort", "opengl",
                "opencl", "ideep", "mkldnn"}
    if name in reserved:
        raise InvalidDeviceNameError(
            f"invalid device name {name!r}: it is one of PyTorch's built-in device types; "
            "choose a name of your own"
        )


def _resolve_library(name: str, plugin_path: str | os.PathLike[str] | None) -> tuple[str, PluginSpec | None]:
    if plugin_path is not None:
        path = os.fspath(plugin_path)
        if not os.path.exists(path):
            raise PluginNotFoundError(
                f"no plugin library at '{path}'; pass the path of the plugin's shared library"
            )
        return os.path.abspath(path), None
    specs = discover_plugins()
    for spec in specs:
        if spec.name == name and spec.error is None:
            if not os.path.exists(spec.library):
                raise PluginNotFoundError(
                    f"plugin {name!r} ({spec.source}) names the library '{spec.library}', "
                    "which does not exist; reinstall the plugin"
                )
            return os.path.abspath(spec.library), spec
    known = ", ".join(sorted({s.name for s in specs})) or "none"
    raise PluginNotFoundError(
        f"no installed plugin is named {name!r} (found: {known}); install the plugin package, "
        "add it to TORCH_FL_PLUGINS as name=/path/to/lib.so, or pass plugin_path="
    )


def _fallback_mode_from_env() -> str:
    mode = os.environ.get("TORCH_FL_FALLBACK", "warn").strip().lower() or "warn"
    if mode not in FALLBACK_MODES:
        raise ValueError(
            f"TORCH_FL_FALLBACK={mode!r} is not a fallback mode; use one of {FALLBACK_MODES}"
        )
    return mode


def _disabled_kernels() -> list[str]:
    value = os.environ.get("TORCH_FL_DISABLE_KERNELS", "")
    return [op.strip() for op in value.split(",") if op.strip()]


def _at_exit() -> None:
    from torch_fl import _C

    path = os.environ.get("TORCH_FL_OP_STATS")
    active = get_plugin()
    if path and active is not None:
        try:
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"plugin": active.plugin_name, "device": active.name,
                           **op_stats().to_dict()}, f, indent=2)
        except OSError as exc:
            warnings.warn(f"torch_fl: cannot write TORCH_FL_OP_STATS file '{path}': {exc}",
                          RuntimeWarning, stacklevel=1)
    _C.shutdown()


def register_device_plugin(
    name: str,
    plugin_path: str | os.PathLike[str] | None = None,
    priority: int = 0,
    metadata: dict[str, Any] | None = None,
    *,
    _source: str = "register_device_plugin",
    _passed_over: tuple[str, ...] = (),
) -> PluginHandle:
    """Loads a plugin and registers its device as the PyTorch device `name`.

    plugin_path: the plugin's shared library; when omitted the plugin is found
        by name among installed plugins (`torch_fl.plugins` entry points) and
        TORCH_FL_PLUGINS.
    priority: recorded in the handle; autoload uses it to choose among plugins.
    metadata: options passed to the plugin's Plugin_Initialize as strings.

    Registering the same plugin again returns the existing handle. PyTorch has
    one PrivateUse1 backend per process, so a second, different plugin raises
    PluginConflictError and leaves the first one working.
    """
    _check_name(name)
    with _lock:
        active = get_plugin()
        if active is not None:
            same_library = plugin_path is None or os.path.abspath(os.fspath(plugin_path)) == active.library
            if active.name == name and same_library:
                return active
            raise PluginConflictError(
                f"cannot register {name!r}: PyTorch allows one PrivateUse1 backend per process "
                f"and '{active.name}' ({active.library}) is already registered"
            )
        taken = torch._C._get_privateuse1_backend_name()
        if taken != "privateuseone":
            raise PluginConflictError(
                f"cannot register {name!r}: PrivateUse1 is already the '{taken}' backend of "
                "another extension; PyTorch allows one such backend per process"
            )
        mode = _fallback_mode_from_env()
        library, spec = _resolve_library(name, plugin_path)
        options = {str(k): str(v) for k, v in (metadata or {}).items()}

        from torch_fl import _C

        ok, kind, message, info = _C.load_plugin(library, options)
        if not ok:
            raise LOAD_ERRORS.get(kind, LOAD_ERRORS["bad_plugin"])(message)

        torch.utils.rename_privateuse1_backend(name)
        report = _C.register_backend(_disabled_kernels())
        torch._register_device_module(name, make_device_module(name, info))
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
        set_fallback_mode(mode)
        _C.set_meta_cache_enabled(os.environ.get("TORCH_FL_META_CACHE", "1") != "0")
        _decomp.install(name)

        from torch_fl.compile.device_interface import register as _register_with_compilers
        from torch_fl.custom_ops import register_custom_ops

        _register_with_compilers(name)
        from torch_fl.ipc import install as _install_ipc_refusal

        _install_ipc_refusal(name)
        from torch_fl._printing import install as _install_printing

        _install_printing(name)

        custom = register_custom_ops(info)
        module = getattr(torch, name)
        handle = PluginHandle(
            name=name,
            library=library,
            plugin_name=info["name"],
            vendor=info["vendor"],
            version=info["version"],
            abi=tuple(info["abi"]),
            host_abi=tuple(_C.abi_version()),
            devices=tuple(module.get_device_properties(i) for i in range(len(info["devices"]))),
            groups=dict(info["groups"]),
            kernels=tuple(report["registered"]),
            rejected_kernels=tuple(tuple(r) for r in report["rejected"]),
            symbol_kernels=tuple(info["symbol_kernels"]),
            custom_ops=tuple(custom),
            priority=spec.priority if spec is not None and priority == 0 else priority,
            metadata=options,
            source=spec.source if spec is not None and _source == "register_device_plugin" else _source,
            passed_over=_passed_over,
        )
        set_plugin(handle)
        atexit.register(_at_exit)
        os.register_at_fork(after_in_child=_after_fork_in_child)
        if handle.groups.get("collectives"):
            # Registered after _at_exit: atexit runs last-in first-out, so process
            # groups are closed while the plugin is still up.
            from torch_fl.distributed import register_backend as _register_distributed

            _register_distributed(name)
        from torch_fl.tooling.probe import apply_at_load

        apply_at_load()  # probed tunables from the cache (never raises)
        return handle


def autoload_best_plugin() -> PluginHandle | None:
    """Registers the highest-priority installed plugin that loads; reports the rest."""
    if get_plugin() is not None:
        return get_plugin()
    specs = discover_plugins()
    for spec in specs:
        if spec.error is not None:
            warnings.warn(
                f"torch_fl: plugin {spec.name!r} ({spec.source}) is unusable: {spec.error}",
                RuntimeWarning, stacklevel=2,
            )
    usable = [s for s in specs if s.error is None]
    failures = []
    for i, spec in enumerate(usable):
        others = tuple(f"{s.name} (priority {s.priority})" for s in usable if s is not spec)
        try:
            handle = register_device_plugin(
                spec.name, spec.library, priority=spec.priority,
                _source=spec.source, _passed_over=others,
            )
        except Exception as exc:
            failures.append(f"{spec.name}: {exc}")
            continue
        if others:
            warnings.warn(
                f"torch_fl: registered '{spec.name}' (priority {spec.priority}); not loaded: "
                f"{', '.join(others)} — PyTorch allows one PrivateUse1 backend per process",
                RuntimeWarning, stacklevel=2,
            )
        if failures:
            warnings.warn(
                "torch_fl: plugins that failed before it: " + "; ".join(failures),
                RuntimeWarning, stacklevel=2,
            )
        return handle
    if failures:
        raise RuntimeError("no installed plugin could be registered: " + "; ".join(failures))
    return None
