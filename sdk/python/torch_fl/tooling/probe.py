"""Capability probing over the plugin ABI's tunables group.

A plugin exposes integer parameters (flemu: its GEMM blocking) with candidate
values and a probe that times one candidate. `probe()` times every candidate
of every parameter, keeps the fastest, and writes the choice to a cache file
per plugin version and device; `apply_cached()` sets it again in a later
process. What happens at load (TORCH_FL_PROBE) and where the cache lives:
torch_fl.tooling.probe_cache, which registering a plugin imports without this
module.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from torch_fl.tooling.probe_cache import (
    CACHE_FORMAT,
    PROBE_MODES,
    _C,
    _device_indices,
    _handle,
    _handle_cache_path,
    _write_atomic,
    apply_at_load,
    apply_cached,
    cache_dir,
    cache_path,
    get_tunable,
    has_tunables,
    set_tunable,
)

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


def list_tunables(device: int = 0) -> list[Tunable]:
    """The plugin's tunable parameters on `device` (empty when the plugin has no
    tunables group)."""
    _handle()
    if not has_tunables():
        return []
    return [Tunable(t["name"], t["description"], tuple(t["candidates"]), t["default"])
            for t in _C().tunables_list(device)]


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
