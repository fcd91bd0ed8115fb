"""The requirement catalogue: loading, validation and rendering of requirements.toml."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources

import tomllib

__all__ = [
    "LEVELS",
    "Requirement",
    "RequirementsError",
    "load_requirements",
    "render_json",
    "render_markdown",
]

LEVELS = ("L0", "L1", "L2", "L3")
LEVEL_NAMES = {"L0": "smoke", "L1": "eager", "L2": "training", "L3": "scale"}
STRENGTHS = ("MUST", "SHOULD")
KNOWN_CAPABILITIES = (
    "", "fp64", "fp16", "bf16", "complex", "unified_memory", "peer_access", "host_mapping",
    "timing_events", "async_copy", "amp", "multi_device", "collectives", "graph",
)
_ID = re.compile(r"TFL-([A-Z]+)-(\d{3})")


class RequirementsError(ValueError):
    """requirements.toml is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Requirement:
    id: str
    strength: str
    level: str
    capability: str
    text: str
    retired: bool = False

    @property
    def area(self) -> str:
        match = _ID.fullmatch(self.id)
        assert match is not None
        return match.group(1)

    @property
    def is_must(self) -> bool:
        return self.strength == "MUST"


def parse_requirements(text: str, origin: str = "requirements.toml") -> dict[str, Requirement]:
    data = tomllib.loads(text)
    entries = data.get("requirement")
    if not isinstance(entries, list) or not entries:
        raise RequirementsError(f"{origin}: no [[requirement]] tables")
    out: dict[str, Requirement] = {}
    for i, entry in enumerate(entries):
        where = f"{origin}: requirement #{i + 1} ({entry.get('id', 'no id')})"
        unknown = set(entry) - {"id", "strength", "level", "capability", "text", "retired"}
        if unknown:
            raise RequirementsError(f"{where}: unknown fields {sorted(unknown)}")
        for key in ("id", "strength", "level", "capability", "text"):
            if not isinstance(entry.get(key), str):
                raise RequirementsError(f"{where}: field '{key}' must be a string")
        if not _ID.fullmatch(entry["id"]):
            raise RequirementsError(f"{where}: id must look like TFL-<AREA>-<NNN>")
        if entry["id"] in out:
            raise RequirementsError(f"{where}: duplicate id")
        if entry["strength"] not in STRENGTHS:
            raise RequirementsError(f"{where}: strength must be one of {STRENGTHS}")
        if entry["level"] not in LEVELS:
            raise RequirementsError(f"{where}: level must be one of {LEVELS}")
        if entry["capability"] not in KNOWN_CAPABILITIES:
            raise RequirementsError(
                f"{where}: capability {entry['capability']!r} is not one of {KNOWN_CAPABILITIES}"
            )
        if not entry["text"].strip().endswith("."):
            raise RequirementsError(f"{where}: text must be one sentence ending with '.'")
        out[entry["id"]] = Requirement(**entry)
    return out


@lru_cache(maxsize=1)
def load_requirements() -> dict[str, Requirement]:
    """The catalogue shipped with this package, by id."""
    text = resources.files("torch_fl_conformance").joinpath("requirements.toml").read_text(
        encoding="utf-8"
    )
    return parse_requirements(text)


def render_markdown(reqs: dict[str, Requirement] | None = None) -> str:
    reqs = load_requirements() if reqs is None else reqs
    lines = [
        "# Conformance requirements",
        "",
        "Generated from `conformance/torch_fl_conformance/requirements.toml` by",
        "`torchfl-conformance requirements --format md`; do not edit by hand.",
        "",
        "A plugin reaches a level when every MUST requirement of that level and of every",
        "level below it is met. A requirement whose capability the plugin does not advertise",
        "is skipped with that reason and does not block the level.",
        "",
    ]
    counts = []
    for level in LEVELS:
        at = [r for r in reqs.values() if r.level == level and not r.retired]
        must = sum(r.is_must for r in at)
        counts.append(f"| {level} {LEVEL_NAMES[level]} | {must} | {len(at) - must} |")
    lines += ["| level | MUST | SHOULD |", "|---|---|---|", *counts, ""]
    for level in LEVELS:
        lines += [f"## {level} — {LEVEL_NAMES[level]}", "",
                  "| id | strength | capability | requirement |", "|---|---|---|---|"]
        for r in sorted(reqs.values(), key=lambda r: r.id):
            if r.level != level:
                continue
            text = f"~~{r.text}~~ (retired)" if r.retired else r.text
            lines.append(f"| {r.id} | {r.strength} | {r.capability or '—'} | {text} |")
        lines.append("")
    return "\n".join(lines)


def render_json(reqs: dict[str, Requirement] | None = None) -> str:
    reqs = load_requirements() if reqs is None else reqs
    return json.dumps([asdict(r) | {"area": r.area} for r in reqs.values()], indent=2) + "\n"
