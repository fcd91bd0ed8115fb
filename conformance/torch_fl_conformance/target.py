"""The plugin under test: choosing it, loading it, and what it advertises."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NoPluginChosen", "Target", "describe_choices", "load_target", "sha256_file"]

#  Dtypes the sweeps run, with the capability each needs ("" = always).
SWEEP_DTYPES: dict[str, str] = {
    "float32": "",
    "float64": "fp64",
    "float16": "fp16",
    "bfloat16": "bf16",
    "int64": "",
    "bool": "",
}


class NoPluginChosen(SystemExit):
    """Raised (exit status 2) when no plugin was named; the message says how to name one."""


def describe_choices() -> str:
    """How to choose a plugin, with the plugins torch_fl can find."""
    lines = [
        "no plugin chosen: name the plugin to certify with --plugin NAME (an installed plugin",
        "or one listed in TORCH_FL_PLUGINS=name=/path/lib.so), --plugin /path/to/libNAME.so or",
        "--plugin NAME=/path/to/lib.so (for pytest: --torchfl-plugin=...).",
    ]
    try:
        import torch_fl

        specs = torch_fl.discover_plugins()
    except Exception as exc:  # noqa: BLE001 - guidance must not need a healthy install
        lines.append(f"(could not list installed plugins: {type(exc).__name__}: {exc})")
        return "\n".join(lines)
    if specs:
        lines.append("plugins torch_fl can find:")
        for s in specs:
            state = f"unusable: {s.error}" if s.error else s.library
            lines.append(f"  {s.name:<16} priority {s.priority:<3} {s.source}: {state}")
    else:
        lines.append("torch_fl finds no installed plugin (entry points or TORCH_FL_PLUGINS).")
    return "\n".join(lines)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Target:
    """A loaded plugin as the suite sees it. Everything comes from the PluginHandle."""

    device_type: str
    plugin_name: str
    vendor: str
    version: str
    abi: str
    host_abi: str
    library: str
    library_sha256: str
    device_count: int
    devices: list[dict[str, Any]]
    groups: dict[str, bool]
    capabilities: list[str]
    kernels: int
    handle: Any = field(repr=False, default=None)

    def has(self, capability: str) -> bool:
        return not capability or capability in self.capabilities

    def device(self, index: int = 0) -> str:
        return f"{self.device_type}:{index}"

    def sweep_dtypes(self) -> dict[str, str]:
        """Sweep dtype -> "" when advertised, else the missing capability."""
        return {d: ("" if self.has(cap) else cap) for d, cap in SWEEP_DTYPES.items()}

    def header(self) -> dict[str, Any]:
        return {
            "device_type": self.device_type,
            "plugin_name": self.plugin_name,
            "vendor": self.vendor,
            "version": self.version,
            "abi": self.abi,
            "host_abi": self.host_abi,
            "library": self.library,
            "library_sha256": self.library_sha256,
            "device_count": self.device_count,
            "devices": self.devices,
            "groups": self.groups,
            "capabilities": self.capabilities,
            "native_kernels": self.kernels,
        }


def _capabilities(handle: Any) -> list[str]:
    caps: set[str] = set()
    if handle.devices:
        caps.update(handle.devices[0].capabilities)
    caps.update(g for g, present in handle.groups.items() if present)
    if len(handle.devices) >= 2:
        caps.add("multi_device")
    if {"fp16", "bf16"} & caps:
        caps.add("amp")
    return sorted(caps)


def load_target(plugin: str | None) -> Target:
    """Registers `plugin` (a name or a shared-library path) and describes it.

    A plugin already registered in this process (autoload) is used when it is the
    one asked for; a different one is a conflict PyTorch cannot resolve in-process.
    """
    if not plugin:
        raise NoPluginChosen(describe_choices())
    import torch_fl

    active = torch_fl.get_plugin()
    name, sep, path = plugin.partition("=")
    if not sep:
        name, path = "", plugin
    is_path = bool(sep) or os.sep in plugin or plugin.endswith((".so", ".dylib", ".dll"))
    if is_path:
        plugin = path
    if active is not None and (
        (is_path and os.path.abspath(plugin) == active.library)
        or (not is_path and plugin in (active.name, active.plugin_name))
    ):
        handle = active
    elif is_path:
        if not os.path.exists(plugin):
            raise NoPluginChosen(f"--plugin {plugin}: no such file\n" + describe_choices())
        name = name or _device_name_of(plugin)
        handle = torch_fl.register_device_plugin(name, plugin_path=plugin)
    else:
        try:
            handle = torch_fl.register_device_plugin(plugin)
        except torch_fl.PluginNotFoundError as exc:
            raise NoPluginChosen(f"--plugin {plugin}: {exc}\n" + describe_choices()) from exc
    return Target(
        device_type=handle.name,
        plugin_name=handle.plugin_name,
        vendor=handle.vendor,
        version=handle.version,
        abi=f"{handle.abi[0]}.{handle.abi[1]}",
        host_abi=f"{handle.host_abi[0]}.{handle.host_abi[1]}",
        library=handle.library,
        library_sha256=sha256_file(handle.library),
        device_count=len(handle.devices),
        devices=[
            {
                "index": d.index,
                "name": d.name,
                "total_memory": d.total_memory,
                "capabilities": list(d.capabilities),
                "memory_alignment": d.memory_alignment,
                "compute_units": d.compute_units,
            }
            for d in handle.devices
        ],
        groups=dict(handle.groups),
        capabilities=_capabilities(handle),
        kernels=len(handle.kernels),
        handle=handle,
    )


def _device_name_of(path: str) -> str:
    """The device name for a plugin given by path: libfoo.so -> foo (NAME=PATH overrides)."""
    base = os.path.basename(path).split(".")[0]
    return base.removeprefix("lib")


def host_info() -> dict[str, Any]:
    import torch

    import torch_fl_conformance

    try:
        import torch_fl

        fl_version = torch_fl.__version__
    except Exception:  # noqa: BLE001 - reported as unknown, not fatal
        fl_version = "unknown"
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_fl": fl_version,
        "suite": torch_fl_conformance.__version__,
    }
