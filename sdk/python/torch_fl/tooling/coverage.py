"""Reading an operator-coverage table: how a plugin ran each operator and dtype.

Two sources carry one:

- a certification report of the conformance suite (`torchfl-conformance run
  --report DIR`, report.json, schema "torchfl-conformance-report" 1.x): its
  `op_stats.rows` count, per ATen operator and dtype, the calls that ran
  natively, decomposed, on the CPU fallback or failed during the run; its
  `coverage.ops` rows (OpInfo name, dtype, class) name the ATen operators that
  fell back (`fallback_ops`), and a class of error, wrong, crash or timeout
  marks the operator as failing;
- a `TORCH_FL_OP_STATS` file written at exit by any program on the device
  (`{"plugin", "device", "rows": [{op, dtype, native, decomposed,
  cpu_fallback, failed, ...}], "totals"}`): what that program measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torch_fl.tooling.op_map import op_base

__all__ = ["STATUSES", "Coverage", "CoverageTable", "ReportError", "load_coverage"]

# Worst last: a row's status is the worst way any of its calls ran.
STATUSES = ("native", "decomposed", "cpu_fallback", "failed")
CONFORMANCE_SCHEMA = "torchfl-conformance-report"
# Classes of the conformance op_db sweep that mean the operator does not work.
_FAILING_CLASSES = {"error", "wrong", "crash", "timeout"}
# The newest report schema major this reader understands.
_KNOWN_SCHEMA_MAJOR = 1


class ReportError(ValueError):
    """The file is not a usable coverage report; the message says what to do."""


@dataclass(frozen=True)
class Coverage:
    op: str  # as the report names it, e.g. "aten::add.Tensor"
    dtype: str
    status: str  # one of STATUSES
    detail: str = ""

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
    """The worst way any call of the row ran, from its counts."""
    counts = {s: row.get(s, 0) for s in STATUSES}
    if not all(isinstance(v, int) and v >= 0 for v in counts.values()):
        raise ReportError(f"{where}: the counts {counts} are not non-negative integers")
    if not any(counts.values()):
        raise ReportError(f"{where}: none of {', '.join(STATUSES)} is positive")
    return next(s for s in reversed(STATUSES) if counts[s] > 0)


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ReportError(
            f"no report at '{path}'; write one with `torchfl-conformance run --plugin <name> "
            "--report DIR` (DIR/report.json) or with TORCH_FL_OP_STATS=<file> python your_script.py"
        ) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read report '{path}' as JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReportError(f"report '{path}' is a JSON {type(doc).__name__}, expected an object")
    return doc


def _count_rows(rows: Any, where: str) -> list[Coverage]:
    if not isinstance(rows, list):
        raise ReportError(f"{where} must be a list of rows")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "op" not in row:
            raise ReportError(f"{where}[{i}] has no 'op' field")
        out.append(Coverage(str(row["op"]), str(row.get("dtype", "*")),
                            _status_of(row, f"{where}[{i}]")))
    return out


def _conformance_rows(doc: dict[str, Any], path: str) -> tuple[list[Coverage], list[str]]:
    from torch_fl.tooling.op_map import forward_ops_of_opinfo

    notes: list[str] = []
    stats = doc.get("op_stats")
    cov = doc.get("coverage")
    if not isinstance(stats, dict) and not isinstance(cov, dict):
        raise ReportError(
            f"conformance report '{path}' has neither 'op_stats' nor 'coverage'; it was cut "
            "short or written by an older suite: run `torchfl-conformance run` again")
    rows = _count_rows(stats.get("rows", []), f"report '{path}': op_stats.rows") \
        if isinstance(stats, dict) else []
    ops = cov.get("ops", []) if isinstance(cov, dict) else []
    if not ops:
        notes.append("the report has no op_db sweep (an L0 run): only the operators the suite "
                     "happened to run are known; run level L1 for the full table")
    for i, row in enumerate(ops):
        if not isinstance(row, dict) or "op" not in row or "class" not in row:
            raise ReportError(f"report '{path}': coverage.ops[{i}] lacks 'op' or 'class'")
        dtype = str(row.get("dtype", "*"))
        for aten in row.get("fallback_ops") or []:
            rows.append(Coverage(str(aten), dtype, "cpu_fallback"))
        if row["class"] in _FAILING_CLASSES:
            for aten in forward_ops_of_opinfo(str(row["op"])):
                rows.append(Coverage(aten, dtype, "failed",
                                     f"{row['class']} in the op_db sweep of {row['op']}"))
    return rows, notes


def load_coverage(path: str) -> CoverageTable:
    """Reads a certification report or an op-stats file. Raises ReportError
    naming the problem and how to get a usable file."""
    doc = _read_json(path)
    if doc.get("schema") == CONFORMANCE_SCHEMA:
        plugin = doc.get("plugin") if isinstance(doc.get("plugin"), dict) else {}
        table = CoverageTable(path=path, kind="certification report",
                              plugin=plugin.get("plugin_name"), plugin_version=plugin.get("version"))
        major = str(doc.get("schema_version", "")).split(".")[0]
        if major.isdigit() and int(major) > _KNOWN_SCHEMA_MAJOR:
            table.notes.append(
                f"report schema {doc['schema_version']} is newer than this torch-fl reads "
                f"({_KNOWN_SCHEMA_MAJOR}.x); fields may be missed — update torch-fl")
        table.rows, notes = _conformance_rows(doc, path)
        table.notes.extend(notes)
    elif isinstance(doc.get("rows"), list):
        table = CoverageTable(path=path, kind="op stats", plugin=doc.get("plugin"))
        table.rows = _count_rows(doc["rows"], f"op stats '{path}': rows")
    else:
        raise ReportError(
            f"'{path}' is neither a conformance report (schema {CONFORMANCE_SCHEMA!r}) nor a "
            f"TORCH_FL_OP_STATS file (a 'rows' list); top-level keys: "
            f"{', '.join(sorted(doc)) or 'none'}")
    if not table.rows:
        table.notes.append(f"'{path}' has no operator rows")
    return table
