"""Finding installed plugins: `torch_fl.plugins` entry points and TORCH_FL_PLUGINS.

The order of discover_plugins() is the order autoload tries them in, and the
rule is total, so the same install always registers the same plugin:

1. TORCH_FL_PLUGINS entries come first (setting it is an explicit choice),
   higher @priority first, then in the order listed;
2. then installed plugins (entry points), higher priority first, then by
   device name, then by library path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, distributions

__all__ = ["PluginSpec", "discover_plugins"]

ENTRY_POINT_GROUP = "torch_fl.plugins"
ENV_SOURCE = "TORCH_FL_PLUGINS"


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
                    PluginSpec(entry, "", 0, ENV_SOURCE,
                               f"priority {prio!r} in {raw!r} is not an integer")
                )
                continue
        name, sep, library = entry.partition("=")
        if not sep:
            specs.append(
                PluginSpec(entry, "", 0, ENV_SOURCE,
                           f"entry {raw!r} is not of the form name=/path/to/lib.so")
            )
            continue
        specs.append(PluginSpec(name.strip(), library.strip(), priority, ENV_SOURCE))
    return specs


def _installed_entry_points() -> Iterator[EntryPoint]:
    """importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), the same
    entry points in the same order (the first distribution of a name on
    sys.path hides later ones), without parsing the entry points of every
    installed distribution: autoload runs inside `import torch`, and there
    the full parse cost 3-6 ms in an environment of 76 distributions."""
    seen: set[str] = set()
    for dist in distributions():
        name = getattr(dist, "_normalized_name", None)
        if name is None:
            name = re.sub(r"[-_.]+", "_", str(dist.metadata["Name"] or "")).lower()
        if name in seen:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and ENTRY_POINT_GROUP in text:
            yield from dist.entry_points.select(group=ENTRY_POINT_GROUP)


def _from_entry_points() -> list[PluginSpec]:
    specs = []
    for ep in _installed_entry_points():
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


def from_environment(spec: PluginSpec) -> bool:
    """True for a spec that TORCH_FL_PLUGINS listed."""
    return spec.source == ENV_SOURCE


def discover_plugins() -> list[PluginSpec]:
    """Every plugin torch-fl can find, in the order autoload tries them (see the
    module docstring): TORCH_FL_PLUGINS entries first, then installed plugins by
    priority, name and library path."""
    listed = _from_env(os.environ.get("TORCH_FL_PLUGINS", ""))
    position = {id(s): i for i, s in enumerate(listed)}
    listed.sort(key=lambda s: (-s.priority, position[id(s)]))
    installed = sorted(_from_entry_points(), key=lambda s: (-s.priority, s.name, s.library))
    return listed + installed
