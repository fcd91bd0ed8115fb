"""Finding installed plugins: `torch_fl.plugins` entry points and TORCH_FL_PLUGINS."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import entry_points

__all__ = ["PluginSpec", "discover_plugins"]

ENTRY_POINT_GROUP = "torch_fl.plugins"


@dataclass(frozen=True)
class PluginSpec:
    """Where a plugin can be loaded from, and how it was found."""

    name: str
    library: str
    priority: int = 0
    source: str = ""  # "entry point <dist>", "TORCH_FL_PLUGINS"
    error: str | None = None  # why the spec itself could not be read


def _from_env(value: str) -> list[PluginSpec]:
    """TORCH_FL_PLUGINS: os.pathsep-separated `name=/path/lib.so[@priority]` entries."""
    specs = []
    for raw in value.split(os.pathsep):
        entry = raw.strip()
        if not entry:
            continue
        priority = 0
        if "@" in entry:
            entry, _, prio = entry.rpartition("@")
            try:
                priority = int(prio)
            except ValueError:
                specs.append(
                    PluginSpec(entry, "", 0, "TORCH_FL_PLUGINS",
                               f"priority {prio!r} in {raw!r} is not an integer")
                )
                continue
        name, sep, library = entry.partition("=")
        if not sep:
            specs.append(
                PluginSpec(entry, "", 0, "TORCH_FL_PLUGINS",
                           f"entry {raw!r} is not of the form name=/path/to/lib.so")
            )
            continue
        specs.append(PluginSpec(name.strip(), library.strip(), priority, "TORCH_FL_PLUGINS"))
    return specs


def _from_entry_points() -> list[PluginSpec]:
    specs = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {ep.value}"
        try:
            info = ep.load()()
            specs.append(
                PluginSpec(
                    str(info.get("name", ep.name)),
                    str(info["library"]),
                    int(info.get("priority", 0)),
                    source,
                )
            )
        except Exception as exc:  # a broken plugin package must not hide the others
            specs.append(PluginSpec(ep.name, "", 0, source, f"{type(exc).__name__}: {exc}"))
    return specs


def discover_plugins() -> list[PluginSpec]:
    """Every plugin torch-fl can find, highest priority first (TORCH_FL_PLUGINS wins ties)."""
    specs = _from_env(os.environ.get("TORCH_FL_PLUGINS", "")) + _from_entry_points()
    order = {id(s): i for i, s in enumerate(specs)}
    return sorted(specs, key=lambda s: (-s.priority, order[id(s)]))
