"""The op-statistics view: which operators cost the most on the device, and how
much of that went through the CPU fallback.

    from torch_fl.tooling.profile_view import profile_view
    print(profile_view())                 # the live counters of this process
    print(profile_view(scope.table))      # an op_stats_scope() table
    print(load_op_stats("stats.json"))    # a TORCH_FL_OP_STATS file
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torch_fl.op_stats import OpStat, OpStatsTable

__all__ = ["SORT_KEYS", "ProfileView", "load_op_stats", "profile_view"]

SORT_KEYS = ("time", "calls", "fallback", "bytes")
_ROW_FIELDS = ("op", "dtype", "native", "decomposed", "cpu_fallback", "failed", "time_ns",
               "bytes_copied")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass
class ProfileView:
    """A ranked table of an OpStatsTable. str() renders it."""

    table: OpStatsTable
    sort_by: str = "time"
    top: int | None = None
    plugin: str | None = None
    device: str | None = None
    source: str | None = None
    _ranked: list[OpStat] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.sort_by not in SORT_KEYS:
            raise ValueError(f"sort_by must be one of {SORT_KEYS}, got {self.sort_by!r}")
        if self.top is not None and self.top < 1:
            raise ValueError(f"top must be a positive number of rows, got {self.top}")
        key = {
            "time": lambda r: (-r.time_ns, -r.calls),
            "calls": lambda r: (-r.calls, -r.time_ns),
            "fallback": lambda r: (-(r.cpu_fallback + r.failed), -r.time_ns),
            "bytes": lambda r: (-r.bytes_copied, -r.time_ns),
        }[self.sort_by]
        self._ranked = sorted(self.table.rows, key=lambda r: (*key(r), r.op, r.dtype))

    @property
    def ranked(self) -> list[OpStat]:
        return self._ranked[: self.top] if self.top else list(self._ranked)

    def summary(self) -> dict[str, Any]:
        t = self.table.totals()
        fallback_time = sum(r.time_ns for r in self.table.rows if r.cpu_fallback)
        return {
            "ops": len(self.table.rows),
            "calls": t.calls,
            "native": t.native,
            "decomposed": t.decomposed,
            "cpu_fallback": t.cpu_fallback,
            "failed": t.failed,
            "fallback_call_share": t.cpu_fallback / t.calls if t.calls else 0.0,
            "fallback_time_share": fallback_time / t.time_ns if t.time_ns else 0.0,
            "time_ns": t.time_ns,
            "bytes_copied": t.bytes_copied,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "plugin": self.plugin, "device": self.device, "sort_by": self.sort_by,
            "rows": [
                {"rank": i + 1, "op": r.op, "dtype": r.dtype, "calls": r.calls,
                 "time_ns": r.time_ns, "fallback_share": r.fallback_share,
                 "native": r.native, "decomposed": r.decomposed,
                 "cpu_fallback": r.cpu_fallback, "failed": r.failed,
                 "bytes_copied": r.bytes_copied}
                for i, r in enumerate(self.ranked)
            ],
            "summary": self.summary(),
        }

    def __str__(self) -> str:
        title = "op statistics"
        if self.plugin or self.device:
            title += f" of {self.plugin or '?'} (device '{self.device or '?'}')"
        if self.source:
            title += f" from {self.source}"
        if not self.table.rows:
            return f"{title}: no operator ran on the device"
        total_ns = self.table.totals().time_ns
        header = ("#", "op", "dtype", "calls", "ms", "time%", "fallback%", "native", "decomp",
                  "cpu", "failed", "copied")
        body = [
            (str(i + 1), r.op, r.dtype, str(r.calls), f"{r.time_ns / 1e6:.3f}",
             f"{100 * r.time_ns / total_ns:.1f}" if total_ns else "-",
             f"{100 * r.fallback_share:.0f}", str(r.native), str(r.decomposed),
             str(r.cpu_fallback), str(r.failed), _bytes(r.bytes_copied))
            for i, r in enumerate(self.ranked)
        ]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

        def fmt(row: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) if i in (1, 2) else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths)))

        s = self.summary()
        lines = [f"{title}, ranked by {self.sort_by}:", fmt(header), "-" * len(fmt(header))]
        lines.extend(fmt(row) for row in body)
        hidden = len(self.table.rows) - len(body)
        if hidden > 0:
            lines.append(f"... {hidden} more operator/dtype rows (raise --top to see them)")
        lines.append(
            f"total: {s['calls']} calls over {s['ops']} op/dtype rows, {s['time_ns'] / 1e6:.3f} ms; "
            f"CPU fallback {s['cpu_fallback']} calls ({100 * s['fallback_call_share']:.1f}% of calls, "
            f"{100 * s['fallback_time_share']:.1f}% of time), failed {s['failed']}, "
            f"copied {_bytes(s['bytes_copied'])}"
        )
        fallbacks = sorted(self.table.fallbacks(), key=lambda r: (-r.time_ns, r.op))[:3]
        if fallbacks:
            lines.append("most costly fallbacks (worth a native kernel): " + ", ".join(
                f"{r.op} {r.dtype} ({r.time_ns / 1e6:.3f} ms)" for r in fallbacks))
        return "\n".join(lines)


def profile_view(table: OpStatsTable | None = None, sort_by: str = "time",
                 top: int | None = None) -> ProfileView:
    """The ranked view of `table`, or of this process's counters (torch_fl.op_stats())."""
    plugin = device = None
    if table is None:
        import torch_fl

        table = torch_fl.op_stats()
        handle = torch_fl.get_plugin()
        if handle is not None:
            plugin, device = handle.plugin_name, handle.name
    return ProfileView(table, sort_by=sort_by, top=top, plugin=plugin, device=device)


def load_op_stats(path: str, sort_by: str = "time", top: int | None = None) -> ProfileView:
    """Reads a TORCH_FL_OP_STATS file. Raises ValueError naming what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ValueError(
            f"no op statistics file at '{path}'; write one by running a program with "
            "TORCH_FL_OP_STATS=<file>"
        ) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read op statistics file '{path}' as JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError(  # noqa: TRY004 - a malformed file, whatever its JSON type
            f"'{path}' is not a TORCH_FL_OP_STATS file: expected an object with a 'rows' list "
            '({"plugin", "device", "rows": [{op, dtype, native, ...}], "totals"})'
        )
    rows = []
    for i, row in enumerate(doc["rows"]):
        missing = [k for k in _ROW_FIELDS if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(f"'{path}': rows[{i}] lacks {', '.join(missing)}")
        counts = [row[k] for k in _ROW_FIELDS[2:]]
        if not all(isinstance(c, int) and c >= 0 for c in counts):
            raise ValueError(f"'{path}': rows[{i}] has counts that are not non-negative integers")
        rows.append(OpStat(str(row["op"]), str(row["dtype"]), *counts))
    return ProfileView(OpStatsTable(tuple(rows)), sort_by=sort_by, top=top,
                       plugin=doc.get("plugin"), device=doc.get("device"), source=path)
