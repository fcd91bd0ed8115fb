"""Loading a plugin and making its device a PyTorch device."""

from __future__ import annotations

import atexit
import difflib
import json
import os
import re
import threading
import warnings
from typing import Any

import torch

from torch_fl import _decomp
from torch_fl._active import get_plugin, set_plugin
from torch_fl._discovery import PluginSpec, discover_plugins, from_environment
from torch_fl._handle import PluginHandle
from torch_fl.device_module import _after_fork_in_child, make_device_module
from torch_fl.errors import (
    LOAD_ERRORS,
    InvalidDeviceNameError,
    PluginConflictError,
    PluginNotFoundError,
    PluginUnavailableError,
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
    unusable = [s for s in specs if s.name == name]
    if unusable:
        raise PluginNotFoundError(
            f"plugin {name!r} ({unusable[0].source}) is unusable: {unusable[0].error}; "
            "reinstall it, fix its TORCH_FL_PLUGINS entry, or pass plugin_path="
        )
    raise PluginNotFoundError(_unknown_plugin_message(name, specs))


def _unknown_plugin_message(name: str, specs: list[PluginSpec]) -> str:
    names = sorted({s.name for s in specs})
    installed = ", ".join(f"{s.name} ({s.source})" for s in specs) or "none"
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    active = get_plugin()
    if active is not None:
        hint += f" ('{active.name}' is the plugin registered in this process.)"
    return (
        f"unknown plugin {name!r}; installed plugins: {installed}.{hint} To add one, install "
        f"its package, list it as TORCH_FL_PLUGINS={name}=/path/to/lib{name}.so, or pass "
        "plugin_path= with the path of its shared library."
    )


def _how_to_choose(name: str, library: str | None) -> str:
    """How to get plugin `name` instead of the one already registered: the ways that
    work in this code base, with the library filled in when it is known."""
    lib = library or f"/path/to/lib{name}.so"
    return (
        f"To use {name!r}, start a fresh Python process with it selected before torch is "
        f"imported: `TORCH_FL_PLUGINS={name}={lib} python ...` (TORCH_FL_PLUGINS entries are "
        "registered before installed plugins), or `TORCH_FL_AUTOLOAD=0 python ...` and call "
        f"torch_fl.register_device_plugin({name!r}"
        + (f", plugin_path={lib!r}" if library else "")
        + ") before anything uses a device."
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

    Registering the same plugin again returns the existing handle. An unknown
    name raises PluginNotFoundError listing the installed plugins. PyTorch has
    one PrivateUse1 backend per process, so a second, different plugin raises
    PluginConflictError, which says how to get that plugin in a fresh process,
    and leaves the first one working.
    """
    _check_name(name)
    with _lock:
        active = get_plugin()
        if active is not None and active.name == name and (
            plugin_path is None or os.path.abspath(os.fspath(plugin_path)) == active.library
        ):
            return active
        # Finding the plugin comes first: a mistyped name is "unknown", not a conflict.
        library, spec = _resolve_library(name, plugin_path)
        if active is not None:
            raise PluginConflictError(
                f"cannot register {name!r} ({library}): PyTorch allows one PrivateUse1 backend "
                f"per process and '{active.name}' ({active.library}, from {active.source}) is "
                f"already registered. {_how_to_choose(name, library)}"
            )
        taken = torch._C._get_privateuse1_backend_name()
        if taken != "privateuseone":
            raise PluginConflictError(
                f"cannot register {name!r}: PrivateUse1 is already the '{taken}' backend of "
                "another extension; PyTorch allows one such backend per process. Register "
                f"{name!r} in a process that does not import that extension."
            )
        mode = _fallback_mode_from_env()
        options = {str(k): str(v) for k, v in (metadata or {}).items()}

        from torch_fl import _C

        ok, kind, message, info = _C.load_plugin(library, options)
        if not ok:
            raise LOAD_ERRORS.get(kind, LOAD_ERRORS["bad_plugin"])(message)

        torch.utils.rename_privateuse1_backend(name)
        report = _C.register_backend(_disabled_kernels())
        for message in report["warnings"]:
            # A kernel refused by the schema guard: its plugin names a schema
            # this PyTorch does not have (TFL_KernelDesc.schema).
            warnings.warn(f"torch-fl: {message} (torch {torch.__version__})", RuntimeWarning,
                          stacklevel=2)
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
        from torch_fl._device_hint import install as _install_device_hint

        _install_device_hint()

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
            adapted_kernels=tuple(tuple(r) for r in report["adapted"]),
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
        from torch_fl.tooling.probe_cache import apply_at_load

        apply_at_load()  # probed tunables from the cache (never raises)
        return handle


def _same_plugin(a: PluginSpec, b: PluginSpec) -> bool:
    """One plugin found twice (an entry point and a TORCH_FL_PLUGINS entry naming
    its library): nothing to choose between."""
    return a.name == b.name and os.path.realpath(a.library) == os.path.realpath(b.library)


def _conflicts(chosen: PluginSpec, others: list[PluginSpec]) -> list[str]:
    """What the selection rule had to decide between installed plugins, with why
    `chosen` won and how to get the other: two libraries claiming one device name,
    or different plugins at the same priority. A TORCH_FL_PLUGINS entry is an
    explicit choice and conflicts with nothing."""
    if from_environment(chosen):
        return []
    lines = []
    for other in others:
        if from_environment(other):
            continue
        if other.name == chosen.name:
            why = (f"higher priority ({chosen.priority} > {other.priority})"
                   if chosen.priority > other.priority else "equal priorities go in library path order")
            lines.append(
                f"two installed libraries claim the device name '{chosen.name}': "
                f"{chosen.library} ({chosen.source}, priority {chosen.priority}) and "
                f"{other.library} ({other.source}, priority {other.priority}); registered the "
                f"first ({why}). To use the other, set TORCH_FL_PLUGINS={other.name}="
                f"{other.library}, or uninstall one of them"
            )
        elif other.priority == chosen.priority:
            lines.append(
                f"'{chosen.name}' ({chosen.source}) and '{other.name}' ({other.source}) are "
                f"installed with the same priority {chosen.priority}; registered "
                f"'{chosen.name}' (equal priorities go in name order). To use '{other.name}', "
                f"set TORCH_FL_PLUGINS={other.name}={other.library}, or give the plugins "
                "different priorities in their plugin_spec()"
            )
    return lines


def autoload_best_plugin() -> PluginHandle | None:
    """Registers the first plugin of discover_plugins() that loads (TORCH_FL_PLUGINS
    entries first, then installed plugins by priority and name). The others are
    recorded in the handle's passed_over; a warning is given only for what the
    rule had to decide (see _conflicts) and for plugins that failed to load."""
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
    failures: list[str] = []
    failed: list[PluginSpec] = []
    # A plugin whose hardware is absent here is installed, not broken: no warning.
    unavailable: list[str] = []
    for spec in usable:
        rest = [s for s in usable if s is not spec and not _same_plugin(s, spec)]
        others = tuple(dict.fromkeys(f"{s.name} (priority {s.priority})" for s in rest))
        try:
            handle = register_device_plugin(
                spec.name, spec.library, priority=spec.priority,
                _source=spec.source, _passed_over=others,
            )
        except PluginUnavailableError as exc:
            unavailable.append(f"{spec.name}: {exc}")
            failed.append(spec)
            continue
        except Exception as exc:
            failures.append(f"{spec.name}: {exc}")
            failed.append(spec)
            continue
        # Plugins that failed before it were not chosen against: their warning says why.
        for conflict in _conflicts(spec, [s for s in rest if not any(s is f for f in failed)]):
            warnings.warn(
                f"torch_fl: {conflict}. PyTorch allows one PrivateUse1 backend per process.",
                RuntimeWarning, stacklevel=2,
            )
        if failures:
            warnings.warn(
                "torch_fl: plugins that failed before it: " + "; ".join(failures),
                RuntimeWarning, stacklevel=2,
            )
        return handle
    if failures:
        raise RuntimeError("no installed plugin could be registered: " + "; ".join(failures + unavailable))
    return None
