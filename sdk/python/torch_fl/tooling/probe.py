"""Capability probing over the plugin ABI's tunables group.

A plugin exposes integer parameters (flemu: its GEMM blocking) with candidate
values and a probe that times one candidate. `probe()` times every candidate
of every parameter, keeps the fastest, and writes the choice to a cache file
per plugin version and device; `apply_cached()` sets it again in a later
process. At load, TORCH_FL_PROBE decides what happens:

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
import platform
import re
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "PROBE_MODES",
    "ProbeResult",
    "Tunable",
    "apply_at_load",
    "apply_cached",
    "cache_dir",
    "cache_path",
    "get_tunable",
    "list_tunables",
    "probe",
    "set_tunable",
]

PROBE_MODES = ("cache", "1", "force", "0")
CACHE_FORMAT = 1
# A candidate replaces the current value only when it is at least this much
# faster: smaller differences are within the noise of a shared machine.
MIN_GAIN = 0.05


@dataclass(frozen=True)
class Tunable:
    name: str
    description: str
    candidates: tuple[int, ...]
    default: int


@dataclass
class ProbeResult:
    """What probing one device found."""

    plugin: str
    version: str
    device: int
    device_name: str
    chosen: dict[str, int]
    defaults: dict[str, int]
    timings: dict[str, dict[int, float]]  # best seconds per candidate
    rounds: int
    seconds: float  # wall time of the whole probe
    cache_file: str | None = None
    created: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["timings"] = {n: {str(v): s for v, s in t.items()} for n, t in self.timings.items()}
        return d

    def __str__(self) -> str:
        lines = [(f"{self.plugin} {self.version}, device {self.device} ({self.device_name}): "
                  f"probed in {self.seconds:.1f} s, best of {self.rounds} round(s)")]
        for name, times in self.timings.items():
            best = min(times.values())
            cells = []
            for value, s in times.items():
                mark = "*" if value == self.chosen[name] else ""
                mark += "d" if value == self.defaults[name] else ""
                cells.append(f"{value}{'[' + mark + ']' if mark else ''}={s * 1e3:.2f}ms"
                             f"({best / s * 100:.0f}%)")
            lines.append(f"  {name}: chose {self.chosen[name]} (default {self.defaults[name]}); "
                         + " ".join(cells))
        lines.append("  [*] chosen  [d] default  (nn%) speed relative to the fastest candidate")
        lines.extend(f"  note: {n}" for n in self.notes)
        if self.cache_file:
            lines.append(f"  saved to {self.cache_file}")
        return "\n".join(lines)


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


def list_tunables(device: int = 0) -> list[Tunable]:
    """The plugin's tunable parameters on `device` (empty when the plugin has no
    tunables group)."""
    _handle()
    if not has_tunables():
        return []
    return [Tunable(t["name"], t["description"], tuple(t["candidates"]), t["default"])
            for t in _C().tunables_list(device)]


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
            known = {t.name for t in list_tunables(d)}
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


# ---------------------------------------------------------------------------
# probing
# ---------------------------------------------------------------------------

def _probe_device(handle: Any, device: int, rounds: int) -> ProbeResult:
    start = time.perf_counter()
    tunables = list_tunables(device)
    defaults = {t.name: t.default for t in tunables}
    chosen: dict[str, int] = {}
    timings: dict[str, dict[int, float]] = {}
    notes: list[str] = []
    # Coordinate descent: each parameter is probed with the choices made for
    # the ones before it in place. Rounds visit the candidates in alternating
    # order so slow drift of the machine does not favour one end.
    for t in tunables:
        current = get_tunable(t.name, device)
        values = list(dict.fromkeys([*t.candidates, current]))
        best: dict[int, float] = {}
        for r in range(rounds):
            for v in values if r % 2 == 0 else reversed(values):
                s = float(_C().tunables_probe(device, t.name, v))
                best[v] = min(best.get(v, s), s)
        fastest = min(best, key=lambda v: (best[v], v != current))
        pick = fastest if best[fastest] < best[current] * (1 - MIN_GAIN) else current
        if pick != fastest:
            notes.append(f"{t.name}: {fastest} was within {MIN_GAIN:.0%} of {current}; kept {current}")
        set_tunable(t.name, pick, device)
        chosen[t.name] = pick
        timings[t.name] = dict(sorted(best.items()))
    return ProbeResult(
        plugin=handle.plugin_name, version=handle.version, device=device,
        device_name=handle.devices[device].name, chosen=chosen, defaults=defaults,
        timings=timings, rounds=rounds, seconds=time.perf_counter() - start,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), notes=notes,
    )


def probe(device: int | None = None, rounds: int = 3, save: bool = True,
          reset: bool = True) -> list[ProbeResult]:
    """Probes the registered plugin's tunables on `device` (all when None), sets
    the fastest values, and (save=True) writes them to the cache. With reset,
    every parameter starts from the plugin's default, so an earlier choice
    does not steer the search."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    handle = _handle()
    if not has_tunables():
        raise NotImplementedError(
            f"plugin '{handle.plugin_name}' has no tunables group: there is nothing to probe"
        )
    results = []
    for d in _device_indices(handle, device):
        if reset:
            for t in list_tunables(d):
                set_tunable(t.name, t.default, d)
        result = _probe_device(handle, d, rounds)
        if save:
            path = _handle_cache_path(handle, d)
            _write_atomic(path, {
                "format": CACHE_FORMAT, "plugin": result.plugin, "version": result.version,
                "device": d, "device_name": result.device_name, "host": platform.node(),
                "created": result.created, "chosen": result.chosen, "defaults": result.defaults,
                "timings": result.to_dict()["timings"],
            })
            result.cache_file = str(path)
        results.append(result)
    return results


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
            handle = _handle()
            for d in range(len(handle.devices)):
                if d not in applied:
                    applied[d] = probe(d).pop().chosen
        return applied
    except Exception as exc:  # noqa: BLE001 - loading must not fail because of probing
        warnings.warn(f"torch_fl: applying probed settings failed ({type(exc).__name__}: "
                      f"{exc}); the plugin keeps its defaults", RuntimeWarning, stacklevel=2)
        return {}
