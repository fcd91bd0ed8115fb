"""What `torchfl scan` prints: the findings, and with a coverage table one line
per operator the scanned code is likely to run, saying per dtype how the plugin
runs it and where the code uses it.

How an operator is judged, per dtype (float32 and int64 for any code, and the
reduced precisions the code uses):

  native       a plugin kernel of the operator (any overload) ran in that dtype:
               the plugin declares one for it
  decomposed   it ran only as PyTorch's decomposition into native operators
  fallback     it ran only on the CPU fallback
  failed       its calls failed, or the op_db sweep found it wrong, raising,
               crashing or hanging in that dtype
  unsupported  the device does not advertise the dtype (fp64, fp16, bf16)
  untested     the report has no call of it in that dtype

The evidence is the report's per-call counts (`op_stats.rows` of a certification
report, `rows` of a TORCH_FL_OP_STATS file), which name the dtype each call ran
in. The op_db sweep's `fallback_ops` name the dtype of the OpInfo sample instead
(isfinite's float32 samples multiply booleans), so they count only for an
operator the counts do not cover at all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from torch_fl.tooling.coverage import CoverageTable
from torch_fl.tooling.op_map import OpUse, likely_ops, op_base
from torch_fl.tooling.scan import RULES, ScanResult

__all__ = ["OpCoverage", "OpsSection", "ops_section", "to_json", "to_text"]

# Dtypes that matter for any code: float32 math, int64 indices and labels.
_BASE_DTYPES = ("float32", "int64")
# Statuses in the order a line lists them; the first three keep an operator on the device.
STATUSES = ("native", "decomposed", "fallback", "failed", "unsupported", "untested")
_ON_DEVICE = {"native", "decomposed"}
_AT_RISK = {"fallback", "failed", "unsupported"}
# The device capability a dtype needs (float32 and the integer types need none).
_CAPABILITY = {"float64": "fp64", "float16": "fp16", "bfloat16": "bf16",
               "complex64": "complex", "complex128": "complex"}
_COUNTS = ("native", "decomposed", "cpu_fallback", "failed")
# Line width of the text output; lists are cut to fit, with "+N more".
WIDTH = 100
_SHOWN_SOURCES = 3


@dataclass(frozen=True)
class OpCoverage:
    """An operator the code likely runs: how the plugin runs it per dtype, and where
    the code leads to it."""

    op: str  # "aten::mul"
    phases: tuple[str, ...]
    sources: tuple[tuple[str, int, str], ...]  # (path, line, call), sorted
    dtypes: tuple[tuple[str, str], ...]  # (dtype, one of STATUSES), in the section's dtype order

    def with_status(self, *statuses: str) -> list[str]:
        return [dtype for dtype, status in self.dtypes if status in statuses]

    @property
    def lines(self) -> list[tuple[str, int]]:
        """The distinct source lines, in order."""
        return list(dict.fromkeys((path, line) for path, line, _ in self.sources))


@dataclass
class OpsSection:
    coverage: CoverageTable
    dtypes: tuple[str, ...]
    capabilities: tuple[str, ...] | None  # of the device the report is about, when it says
    at_risk: list[OpCoverage] = field(default_factory=list)  # some dtype leaves the device or fails
    untested: list[OpCoverage] = field(default_factory=list)  # no evidence in any judged dtype
    on_device: list[OpCoverage] = field(default_factory=list)  # every known dtype on the device


def _merge(uses: list[OpUse]) -> dict[str, tuple[set[str], set[tuple[str, int, str]]]]:
    merged: dict[str, tuple[set[str], set[tuple[str, int, str]]]] = {}
    for u in uses:
        phases, sources = merged.setdefault(u.op, (set(), set()))
        phases.add(u.phase)
        sources.update(u.sources)
    return merged


@dataclass
class _Evidence:
    """Per (operator, dtype): the calls the report counted, and the sweep's verdicts."""

    counts: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    counted_ops: set[str] = field(default_factory=set)
    sweep_failed: set[tuple[str, str]] = field(default_factory=set)
    sweep_fallback: set[tuple[str, str]] = field(default_factory=set)
    capabilities: tuple[str, ...] | None = None


def _read_counts(coverage: CoverageTable, evidence: _Evidence) -> bool:
    """The per-call counts of the file the table was read from (load_coverage has
    checked its shape). False when the file has none (an older report)."""
    try:
        with open(coverage.path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(doc, dict):
        return False
    plugin = doc.get("plugin")
    if isinstance(plugin, dict) and isinstance(plugin.get("capabilities"), list):
        evidence.capabilities = tuple(str(c) for c in plugin["capabilities"])
    stats = doc.get("op_stats")
    rows = stats.get("rows") if isinstance(stats, dict) else doc.get("rows")
    if not isinstance(rows, list) or not rows:
        return False
    for row in rows:
        key = (op_base(str(row["op"])), str(row.get("dtype", "*")))
        total = evidence.counts.setdefault(key, dict.fromkeys(_COUNTS, 0))
        for name in _COUNTS:
            value = row.get(name, 0)
            total[name] += value if isinstance(value, int) else 0
        evidence.counted_ops.add(key[0])
    return True


def _evidence(coverage: CoverageTable) -> _Evidence:
    evidence = _Evidence()
    has_counts = _read_counts(coverage, evidence)
    for row in coverage.rows:
        key = (row.base, row.dtype)
        if row.status == "failed" and row.detail:  # a verdict of the op_db sweep
            evidence.sweep_failed.add(key)
        elif not has_counts:
            # No per-call counts in the file: its rows are all there is.
            total = evidence.counts.setdefault(key, dict.fromkeys(_COUNTS, 0))
            total["cpu_fallback" if row.status == "cpu_fallback" else row.status] += 1
            evidence.counted_ops.add(row.base)
        elif row.status == "cpu_fallback":
            evidence.sweep_fallback.add(key)
    return evidence


def _status(op: str, dtype: str, evidence: _Evidence) -> str:
    needs = _CAPABILITY.get(dtype)
    if needs and evidence.capabilities is not None and needs not in evidence.capabilities:
        return "unsupported"
    if (op, dtype) in evidence.sweep_failed:
        return "failed"
    counts = evidence.counts.get((op, dtype))
    if counts is not None:
        if counts["native"]:
            return "native"
        if counts["decomposed"]:
            return "decomposed"
        if counts["cpu_fallback"]:
            return "fallback"
        if counts["failed"]:
            return "failed"
    if op not in evidence.counted_ops and (op, dtype) in evidence.sweep_fallback:
        return "fallback"
    return "untested"


def ops_section(result: ScanResult, coverage: CoverageTable) -> OpsSection:
    dtypes = tuple(dict.fromkeys([*_BASE_DTYPES, *sorted(result.dtypes)]))
    evidence = _evidence(coverage)
    section = OpsSection(coverage=coverage, dtypes=dtypes, capabilities=evidence.capabilities)
    for op, (phases, sources) in sorted(_merge(likely_ops(result.calls)).items()):
        judged = OpCoverage(op, tuple(sorted(phases)), tuple(sorted(sources)),
                            tuple((d, _status(op, d, evidence)) for d in dtypes))
        statuses = {s for _, s in judged.dtypes}
        if statuses & _AT_RISK:
            section.at_risk.append(judged)
        elif statuses & _ON_DEVICE:
            section.on_device.append(judged)
        else:
            section.untested.append(judged)
    return section


# ---------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------


def _fit(head: str, items: list[str], width: int = WIDTH, total: int | None = None,
         sep: str = ", ") -> str:
    """`head` and as many of `items` as fit in `width` characters, then "+N more"."""
    total = len(items) if total is None else total
    line = head
    for i, item in enumerate(items):
        rest = total - i - 1
        more = f"{sep}+{rest} more" if rest else ""
        candidate = line + (sep if i else "") + item
        if len(candidate + more) > width and i:
            return line + f"{sep}+{total - i} more"
        line = candidate
    if total > len(items):
        line += f"{sep}+{total - len(items)} more"
    return line


def _wrap(text: str, indent: str, width: int = WIDTH) -> list[str]:
    """`text` broken at spaces into lines of at most `width` characters where its
    words allow; continuation lines get `indent`."""
    lead = text[: len(text) - len(text.lstrip(" "))]
    lines: list[str] = []
    line = lead
    for word in text.lstrip(" ").split(" "):
        candidate = f"{line} {word}" if line.strip() else line + word
        if len(candidate) > width and line.strip():
            lines.append(line)
            line = indent + word
        else:
            line = candidate
    lines.append(line)
    return lines


def _source_root(files: list[str]) -> str:
    """The directory source locations are shown relative to: the one holding the
    scanned files."""
    dirs = [os.path.dirname(os.path.abspath(f)) for f in files]
    if not dirs:
        return ""
    try:
        return os.path.commonpath(dirs)
    except ValueError:  # different drives
        return ""


def _label(path: str, root: str) -> str:
    return os.path.relpath(os.path.abspath(path), root) if root else path


def _used_at(judged: OpCoverage, root: str, head: str) -> str:
    """`head`, the first few source lines that lead to the operator, and their count."""
    lines = judged.lines
    shown = []
    for i, (path, number) in enumerate(lines[:_SHOWN_SOURCES]):
        same_file = i > 0 and lines[i - 1][0] == path
        shown.append(str(number) if same_file else f"{_label(path, root)}:{number}")
    count = f" ({len(lines)} line{'s' if len(lines) != 1 else ''})"
    return _fit(head, shown, WIDTH - len(count), total=len(lines)) + count


def _verdict(judged: OpCoverage) -> str:
    """The dtypes by status; untested ones are left out (the header lists every
    judged dtype, the JSON output has them)."""
    parts = []
    for status in STATUSES[:-1]:
        dtypes = judged.with_status(status)
        if dtypes:
            parts.append(f"{status} {', '.join(dtypes)}")
    return " | ".join(parts)


def to_text(result: ScanResult, ops: OpsSection | None = None) -> str:
    lines: list[str] = []
    for f in result.findings:
        lines.append(f"{f.location}: {f.rule}: {f.code}")
        lines.append(f"    why: {f.why}")
        lines.append(f"    fix: {f.fix}")
    for path, message in result.errors:
        lines.append(f"{path}: error: {message}")
    n_files = len(result.files)
    if result.findings:
        counts = ", ".join(f"{rule} {n}" for rule, n in result.by_rule().items())
        lines.append(f"{len(result.findings)} CUDA-specific uses in {n_files} file(s): {counts}")
    else:
        lines.append(f"no CUDA-specific uses in {n_files} file(s)")
    if ops is not None:
        lines.extend(_ops_text(result, ops))
    return "\n".join(lines)


def _ops_text(result: ScanResult, ops: OpsSection) -> list[str]:
    root = _source_root(result.files)
    lines = [""]
    lines.extend(_wrap(f"operators against {ops.coverage.describe()}", "    "))
    lines.extend(_wrap(f"  dtypes judged: {', '.join(ops.dtypes)}; source lines relative to "
                       f"{root or '.'}", "    "))
    for note in ops.coverage.notes:
        lines.extend(_wrap(f"  note: {note}", "        "))
    if ops.at_risk:
        lines.append(f"  likely to run on the CPU fallback, fail or be unsupported "
                     f"({len(ops.at_risk)} operators):")
        for judged in ops.at_risk:
            lines.extend(_wrap(f"    {judged.op} [{'/'.join(judged.phases)}]: {_verdict(judged)}",
                               "        "))
            lines.append(_used_at(judged, root, "        used at "))
    else:
        lines.append("  none of the likely operators runs on the CPU fallback, fails or is "
                     "unsupported")
    if ops.untested:
        lines.append(f"  not run in these dtypes by the report (status unknown, "
                     f"{len(ops.untested)} operators):")
        for judged in ops.untested:
            lines.append(_used_at(judged, root, f"    {judged.op} [{'/'.join(judged.phases)}] "
                                                "used at "))
    if ops.on_device:
        names = [j.op for j in ops.on_device]
        lines.extend(_fit_lines(f"  on the device ({len(names)} operators): ", names, " " * 4))
    return lines


def _fit_lines(head: str, items: list[str], indent: str, max_lines: int = 4) -> list[str]:
    """`items` after `head`, wrapped onto at most `max_lines` lines, the last one
    cut with "+N more" when they do not all fit."""
    lines: list[str] = []
    line, start = head, 0
    for i, item in enumerate(items):
        candidate = line + (", " if i > start else "") + item
        if len(candidate) + 1 > WIDTH and i > start:
            if len(lines) + 1 == max_lines:
                return [*lines, _fit(indent if lines else head, items[start:])]
            lines.append(line + ",")
            line, start = indent + item, i
        else:
            line = candidate
    return [*lines, line]


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------


def _judged(items: Iterable[OpCoverage]) -> list[dict]:
    return [{
        "op": j.op,
        "phases": list(j.phases),
        "dtypes": {d: s for d, s in j.dtypes},
        "sources": [{"path": p, "line": line, "call": n} for p, line, n in j.sources],
    } for j in items]


def to_json(result: ScanResult, ops: OpsSection | None = None) -> str:
    doc = {"format": "torchfl-scan", "version": 2, "rules": RULES, **result.to_dict()}
    if ops is not None:
        doc["ops"] = {
            "coverage": {"path": ops.coverage.path, "kind": ops.coverage.kind,
                         "plugin": ops.coverage.plugin, "version": ops.coverage.plugin_version,
                         "notes": ops.coverage.notes},
            "dtypes": list(ops.dtypes),
            "statuses": list(STATUSES),
            "capabilities": list(ops.capabilities) if ops.capabilities is not None else None,
            "at_risk": _judged(ops.at_risk),
            "untested": _judged(ops.untested),
            "on_device": _judged(ops.on_device),
        }
    return json.dumps(doc, indent=2)
