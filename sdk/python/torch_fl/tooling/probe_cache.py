"""The tunables a plugin exposes and the cache of probed choices: what
registering a plugin needs (apply_at_load), without the probing itself
(torch_fl.tooling.probe), so that `import torch` pays for no more.

At load, TORCH_FL_PROBE decides what happens:

    unset or "cache"  apply a cached choice when one exists (default)
    "1"               also probe devices that have no cached choice, and save
    "force"           probe every device again, and save
    "0"               leave the plugin's defaults alone

The cache lives under $TORCH_FL_CACHE_DIR, else $XDG_CACHE_HOME/torch_fl,
else ~/.cache/torch_fl, in probe/<plugin>-<version>-<device index>-<device name>.json.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = [
    "CACHE_FORMAT",
    "PROBE_MODES",
    "apply_at_load",
    "apply_cached",
    "cache_dir",
    "cache_path",
    "get_tunable",
    "has_tunables",
    "set_tunable",
]

PROBE_MODES = ("cache", "1", "force", "0")
CACHE_FORMAT = 1


def _C():  # the extension module, imported late
    from torch_fl import _C as ext

    return ext


def _handle():
    # Not torch_fl.get_plugin: at autoload the package is still being imported.
    from torch_fl._active import get_plugin

    handle = get_plugin()
    if handle is None:
        raise RuntimeError(
            "no plugin is registered in this process: `import torch` autoloads one, or call "
            "torch_fl.register_device_plugin(name) first"
        )
    return handle


def _device_indices(handle: Any, device: int | None) -> list[int]:
    if device is None:
        return list(range(len(handle.devices)))
    if not 0 <= device < len(handle.devices):
        raise IndexError(f"device {device} is out of range: plugin '{handle.plugin_name}' has "
                         f"{len(handle.devices)} device(s)")
    return [device]


def has_tunables() -> bool:
    return bool(_C().has_tunables())


def get_tunable(name: str, device: int = 0) -> int:
    return int(_C().tunables_get(device, name))


def set_tunable(name: str, value: int, device: int = 0) -> None:
    _C().tunables_set(device, name, int(value))


# ---------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------

def cache_dir() -> Path:
    env = os.environ.get("TORCH_FL_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "torch_fl"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "device"


def cache_path(plugin: str, version: str, device: int, device_name: str) -> Path:
    """The cache file of one plugin version and device."""
    return cache_dir() / "probe" / f"{_slug(plugin)}-{_slug(version)}-{device}-{_slug(device_name)}.json"


def _handle_cache_path(handle: Any, device: int) -> Path:
    return cache_path(handle.plugin_name, handle.version, device, handle.devices[device].name)


def _write_atomic(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _read_cache(path: Path, handle: Any, device: int) -> dict[str, int]:
    """The settings of a cache file; ValueError says why one is unusable."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
        raise ValueError(f"unknown cache format {doc.get('format') if isinstance(doc, dict) else doc!r}")
    expected = {"plugin": handle.plugin_name, "version": handle.version, "device": device,
                "device_name": handle.devices[device].name}
    for key, value in expected.items():
        if doc.get(key) != value:
            raise ValueError(f"it was written for {key} {doc.get(key)!r}, this is {value!r}")
    settings = doc.get("chosen")
    if not isinstance(settings, dict) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in settings.items()
    ):
        raise ValueError("its 'chosen' entry is not a name -> integer map")
    return settings


def apply_cached(device: int | None = None) -> dict[int, dict[str, int]]:
    """Sets the cached choices of the registered plugin on `device` (all when
    None). Returns what was applied per device; devices without a cache file
    are left out. An unusable file is skipped with a warning."""
    handle = _handle()
    applied: dict[int, dict[str, int]] = {}
    if not has_tunables():
        return applied
    for d in _device_indices(handle, device):
        path = _handle_cache_path(handle, d)
        if not path.exists():
            continue
        try:
            settings = _read_cache(path, handle, d)
            known = {t["name"] for t in _C().tunables_list(d)}
            for name, value in settings.items():
                if name not in known:
                    raise ValueError(f"the plugin has no tunable {name!r} any more")
            for name, value in settings.items():
                set_tunable(name, value, d)
        except (OSError, ValueError, RuntimeError) as exc:
            warnings.warn(
                f"torch_fl: ignoring probe cache '{path}': {exc}; run `torchfl probe` to "
                "probe again", RuntimeWarning, stacklevel=2)
            continue
        applied[d] = dict(settings)
    return applied


def apply_at_load() -> dict[int, dict[str, int]]:
    """What the bridge runs right after registering a plugin (TORCH_FL_PROBE).
    Never raises: a failure is a warning and leaves the plugin's defaults."""
    mode = os.environ.get("TORCH_FL_PROBE", "cache").strip().lower() or "cache"
    if mode not in PROBE_MODES:
        warnings.warn(f"torch_fl: TORCH_FL_PROBE={mode!r} is not one of {PROBE_MODES}; "
                      "using 'cache'", RuntimeWarning, stacklevel=2)
        mode = "cache"
    if mode == "0":
        return {}
    try:
        if not has_tunables():
            return {}
        applied = {} if mode == "force" else apply_cached()
        if mode in ("1", "force"):
            from torch_fl.tooling.probe import probe

            handle = _handle()
            for d in range(len(handle.devices)):
                if d not in applied:
                    applied[d] = probe(d).pop().chosen
        return applied
    except Exception as exc:  # noqa: BLE001 - loading must not fail because of probing
        warnings.warn(f"torch_fl: applying probed settings failed ({type(exc).__name__}: "
                      f"{exc}); the plugin keeps its defaults", RuntimeWarning, stacklevel=2)
        return {}
