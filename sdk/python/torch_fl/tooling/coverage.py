"""Reading an operator-coverage table: how a plugin ran each operator and dtype.

Two sources carry one:

- a certification report of the conformance suite (`torchfl-conformance run
  --report DIR`): its op-coverage table lists, per operator and dtype, whether
  the plugin ran it natively, decomposed, on the CPU fallback, or failed;
- a `TORCH_FL_OP_STATS` file written at exit by any program on the device
  (`{"plugin", "device", "rows": [{op, dtype, native, decomposed,
  cpu_fallback, failed, ...}], "totals"}`): what that program measured.

Only these fields are read: the table (under "op_coverage", "coverage" or
"rows"), each row's "op" and "dtype" and either a "status" or the four
counts; the plugin's name and version when present.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torch_fl.tooling.op_map import op_base

__all__ = ["STATUSES", "Coverage", "CoverageTable", "ReportError", "load_coverage"]

# Worst last: a row's status is the worst way any of its calls ran.
STATUSES = ("native", "decomposed", "cpu_fallback", "failed")
_STATUS_ALIASES = {
    "cpu": "cpu_fallback", "fallback": "cpu_fallback", "cpu-fallback": "cpu_fallback",
    "decomp": "decomposed", "error": "failed", "fail": "failed", "crash": "failed",
    "pass": "native", "passed": "native",
}
_TABLE_KEYS = ("op_coverage", "coverage", "rows")
# The newest report schema major this reader understands.
_KNOWN_SCHEMA_MAJOR = 1


class ReportError(ValueError):
    """The file is not a usable coverage report; the message says what to do."""


@dataclass(frozen=True)
class Coverage:
    op: str  # as the report names it, e.g. "aten::add.Tensor"
    dtype: str
    status: str  # one of STATUSES

    @property
    def base(self) -> str:
        return op_base(self.op)


@dataclass
class CoverageTable:
    path: str
    kind: str  # "certification report" or "op stats"
    plugin: str | None = None
    plugin_version: str | None = None
    rows: list[Coverage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lookup(self, op: str) -> list[Coverage]:
        """Every row of operator `op` (any overload, any dtype)."""
        base = op_base(op)
        return [r for r in self.rows if r.base == base]

    def describe(self) -> str:
        who = self.plugin or "unknown plugin"
        if self.plugin_version:
            who += f" {self.plugin_version}"
        return f"{self.kind} {self.path} ({who}, {len(self.rows)} op/dtype rows)"


def _status_of(row: dict[str, Any], where: str) -> str:
    if "status" in row:
        raw = str(row["status"]).strip().lower()
        status = _STATUS_ALIASES.get(raw, raw)
        if status not in STATUSES:
            raise ReportError(f"{where}: status {row['status']!r} is not one of {STATUSES}")
        return status
    counts = {s: row.get(s, 0) for s in STATUSES}
    if not any(isinstance(v, int) and v > 0 for v in counts.values()):
        raise ReportError(
            f"{where}: a row needs a 'status' or at least one positive count of "
            f"{', '.join(STATUSES)}; got {sorted(row)}"
        )
    return next(s for s in reversed(STATUSES) if isinstance(counts[s], int) and counts[s] > 0)


def _plugin_fields(doc: dict[str, Any]) -> tuple[str | None, str | None]:
    plugin = doc.get("plugin")
    if isinstance(plugin, dict):
        return plugin.get("name"), plugin.get("version")
    if isinstance(plugin, str):
        return plugin, doc.get("plugin_version")
    header = doc.get("header")
    if isinstance(header, dict):
        return _plugin_fields(header)
    return None, None


def load_coverage(path: str) -> CoverageTable:
    """Reads a certification report or an op-stats file. Raises ReportError
    naming the problem and how to get a usable file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ReportError(
            f"no report at '{path}'; write one with `torchfl-conformance run --plugin <name> "
            "--report DIR` or with TORCH_FL_OP_STATS=<file> python your_script.py"
        ) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read report '{path}' as JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReportError(f"report '{path}' is a JSON {type(doc).__name__}, expected an object")

    table_key = next((k for k in _TABLE_KEYS if k in doc), None)
    if table_key is None:
        raise ReportError(
            f"report '{path}' has no op-coverage table (looked for {', '.join(_TABLE_KEYS)}; "
            f"top-level keys: {', '.join(sorted(doc)) or 'none'}). Reports from a run that "
            "skipped the op sweep (level L0) have none: run the conformance suite at level L1 "
            "or later, or pass a TORCH_FL_OP_STATS file"
        )
    raw = doc[table_key]
    if isinstance(raw, dict):
        # {op: {dtype: status-or-counts}} is accepted as well as a list of rows.
        flat = []
        for op, per_dtype in raw.items():
            if not isinstance(per_dtype, dict):
                raise ReportError(f"report '{path}': {table_key}[{op!r}] is not an object")
            for dtype, value in per_dtype.items():
                row = dict(value) if isinstance(value, dict) else {"status": value}
                flat.append({"op": op, "dtype": dtype, **row})
        raw = flat
    if not isinstance(raw, list):
        raise ReportError(f"report '{path}': {table_key} must be a list of rows or an object")

    kind = "op stats" if table_key == "rows" else "certification report"
    plugin, version = _plugin_fields(doc)
    table = CoverageTable(path=path, kind=kind, plugin=plugin, plugin_version=version)
    schema = doc.get("schema_version")
    if schema is not None:
        major = str(schema).split(".")[0]
        if major.isdigit() and int(major) > _KNOWN_SCHEMA_MAJOR:
            table.notes.append(
                f"report schema {schema} is newer than this torch-fl reads ({_KNOWN_SCHEMA_MAJOR}.x); "
                "fields may be missed — update torch-fl"
            )
    for i, row in enumerate(raw):
        where = f"report '{path}': {table_key}[{i}]"
        if not isinstance(row, dict) or "op" not in row:
            raise ReportError(f"{where} has no 'op' field")
        table.rows.append(Coverage(str(row["op"]), str(row.get("dtype", "*")),
                                   _status_of(row, where)))
    if not table.rows:
        table.notes.append(f"the op-coverage table of '{path}' is empty")
    return table
