"""The snapshot types of torch_fl.op_stats: one row per operator and dtype, and
the table print() ranks. They are defined on first use, not when `import
torch` autoloads the plugin: each frozen dataclass costs about a millisecond
to create."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

__all__ = ["OpStat", "OpStatsTable"]


@dataclass(frozen=True)
class OpStat:
    op: str
    dtype: str
    native: int = 0
    decomposed: int = 0
    cpu_fallback: int = 0
    failed: int = 0
    time_ns: int = 0  # host time in the op path, the plugin's launches included
    bytes_copied: int = 0
    plugin_time_ns: int = 0  # of time_ns, inside the plugin's kernel functions

    @property
    def bridge_time_ns(self) -> int:
        """The bridge's own host time: time_ns less the plugin's launches."""
        return self.time_ns - self.plugin_time_ns

    @property
    def calls(self) -> int:
        return self.native + self.decomposed + self.cpu_fallback + self.failed

    @property
    def fallback_share(self) -> float:
        return self.cpu_fallback / self.calls if self.calls else 0.0

    def __sub__(self, other: OpStat) -> OpStat:
        return OpStat(
            self.op, self.dtype,
            *(getattr(self, f) - getattr(other, f) for f in _COUNTS),
        )


_COUNTS = ("native", "decomposed", "cpu_fallback", "failed", "time_ns", "bytes_copied", "plugin_time_ns")


@dataclass(frozen=True)
class OpStatsTable:
    """A snapshot of the counters; print it for a ranked table.

    setup_ns is one-time set-up outside any operator: the time the op path
    spent importing Python modules that PyTorch's meta functions and
    decompositions load on first use (torch._dynamo among them)."""

    rows: tuple[OpStat, ...] = field(default_factory=tuple)
    setup_ns: int = 0

    def __iter__(self) -> Iterator[OpStat]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, op: str, dtype: str | None = None) -> OpStat:
        """The counts of `op` (schema name, e.g. "aten::add.Tensor"), summed over
        dtypes unless one is given; all zero when it never ran."""
        picked = [r for r in self.rows if r.op == op and (dtype is None or r.dtype == dtype)]
        total = OpStat(op, dtype or "*")
        for r in picked:
            total = OpStat(op, total.dtype, *(getattr(total, f) + getattr(r, f) for f in _COUNTS))
        return total

    def totals(self) -> OpStat:
        total = OpStat("*", "*")
        for r in self.rows:
            total = OpStat("*", "*", *(getattr(total, f) + getattr(r, f) for f in _COUNTS))
        return total

    def fallbacks(self) -> list[OpStat]:
        return [r for r in self.rows if r.cpu_fallback or r.failed]

    def to_dict(self) -> dict:
        return {
            "rows": [asdict(r) for r in self.rows],
            "totals": asdict(self.totals()),
            "setup_ns": self.setup_ns,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __sub__(self, before: OpStatsTable) -> OpStatsTable:
        old = {(r.op, r.dtype): r for r in before.rows}
        rows = []
        for r in self.rows:
            d = r - old.get((r.op, r.dtype), OpStat(r.op, r.dtype))
            if d.calls:
                rows.append(d)
        return OpStatsTable(tuple(rows), self.setup_ns - before.setup_ns)

    def __str__(self) -> str:
        setup = (f"one-time set-up outside any operator (modules imported on first use): "
                 f"{self.setup_ns / 1e6:.1f} ms")
        if not self.rows:
            return "op stats: no operator ran on the device" + (
                f"; {setup}" if self.setup_ns else "")
        ranked = sorted(self.rows, key=lambda r: (-r.time_ns, r.op, r.dtype))
        header = ("op", "dtype", "native", "decomp", "cpu", "failed", "ms", "in plugin", "copied")

        def cells(r: OpStat, op: str, dtype: str) -> tuple[str, ...]:
            return (op, dtype, str(r.native), str(r.decomposed), str(r.cpu_fallback), str(r.failed),
                    f"{r.time_ns / 1e6:.3f}", f"{r.plugin_time_ns / 1e6:.3f}", _bytes(r.bytes_copied))

        lines = [cells(r, r.op, r.dtype) for r in ranked]
        lines.append(cells(self.totals(), "total", ""))
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]

        def fmt(row: tuple[str, ...]) -> str:
            return "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )

        rule = "-" * len(fmt(header))
        table = [fmt(header), rule, *map(fmt, lines[:-1]), rule, fmt(lines[-1])]
        return "\n".join(table + ([setup] if self.setup_ns else []))


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
