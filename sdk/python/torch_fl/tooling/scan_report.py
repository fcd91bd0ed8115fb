"""What `torchfl scan` prints: the findings, and with a coverage table the
operators the scanned code is likely to run that the plugin does not run
natively."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from torch_fl.tooling.coverage import CoverageTable
from torch_fl.tooling.op_map import OpUse, likely_ops
from torch_fl.tooling.scan import RULES, ScanResult

__all__ = ["OpRisk", "OpsSection", "ops_section", "to_json", "to_text"]

# Dtypes whose coverage rows matter for any code: float32 math, int64 indices and labels.
_BASE_DTYPES = ("float32", "int64", "*")


@dataclass(frozen=True)
class OpRisk:
    """An operator the code likely runs, and how the plugin ran it in the report."""

    op: str
    phases: tuple[str, ...]
    sources: tuple[tuple[str, int, str], ...]
    rows: tuple[tuple[str, str, str], ...]  # (report op, dtype, status)


@dataclass
class OpsSection:
    coverage: CoverageTable
    dtypes: tuple[str, ...]
    cpu_or_failed: list[OpRisk] = field(default_factory=list)
    not_in_report: list[OpRisk] = field(default_factory=list)
    native: list[str] = field(default_factory=list)  # ops whose relevant rows are all on device


def _merge(uses: list[OpUse]) -> dict[str, tuple[set[str], set[tuple[str, int, str]]]]:
    merged: dict[str, tuple[set[str], set[tuple[str, int, str]]]] = {}
    for u in uses:
        phases, sources = merged.setdefault(u.op, (set(), set()))
        phases.add(u.phase)
        sources.update(u.sources)
    return merged


def ops_section(result: ScanResult, coverage: CoverageTable) -> OpsSection:
    dtypes = tuple(sorted(set(_BASE_DTYPES) | result.dtypes))
    section = OpsSection(coverage=coverage, dtypes=dtypes)
    for op, (phases, sources) in sorted(_merge(likely_ops(result.calls)).items()):
        rows = coverage.lookup(op)
        relevant = [r for r in rows if r.dtype in dtypes] or rows
        risk = OpRisk(op, tuple(sorted(phases)), tuple(sorted(sources)),
                      tuple((r.op, r.dtype, r.status) for r in relevant
                            if r.status in ("cpu_fallback", "failed")))
        if not rows:
            section.not_in_report.append(risk)
        elif risk.rows:
            section.cpu_or_failed.append(risk)
        else:
            section.native.append(op)
    return section


def _where(sources: tuple[tuple[str, int, str], ...], limit: int = 3) -> str:
    shown = [f"{p}:{line} ({name})" for p, line, name in sources[:limit]]
    more = len(sources) - limit
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")


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
        lines.append("")
        lines.append(f"operators against {ops.coverage.describe()}, dtypes {', '.join(ops.dtypes)}:")
        lines.extend(f"  note: {n}" for n in ops.coverage.notes)
        if ops.cpu_or_failed:
            lines.append("  likely to run on the CPU fallback or fail:")
            for r in ops.cpu_or_failed:
                statuses = ", ".join(f"{dtype} {status}" for _, dtype, status in r.rows)
                lines.append(f"    {r.op} [{'/'.join(r.phases)}]: {statuses}")
                lines.append(f"        from {_where(r.sources)}")
        else:
            lines.append("  none of the likely operators runs on the CPU fallback or fails")
        if ops.not_in_report:
            lines.append("  not in the report (untested, status unknown):")
            for r in ops.not_in_report:
                lines.append(f"    {r.op} [{'/'.join(r.phases)}] from {_where(r.sources, 1)}")
        lines.append(f"  on the device: {len(ops.native)} operator(s)")
    return "\n".join(lines)


def to_json(result: ScanResult, ops: OpsSection | None = None) -> str:
    doc = {"format": "torchfl-scan", "version": 1, "rules": RULES, **result.to_dict()}
    if ops is not None:
        def risk(r: OpRisk) -> dict:
            return {
                "op": r.op, "phases": list(r.phases),
                "sources": [{"path": p, "line": line, "call": n} for p, line, n in r.sources],
                "rows": [{"op": o, "dtype": d, "status": s} for o, d, s in r.rows],
            }

        doc["ops"] = {
            "coverage": {"path": ops.coverage.path, "kind": ops.coverage.kind,
                         "plugin": ops.coverage.plugin, "version": ops.coverage.plugin_version,
                         "notes": ops.coverage.notes},
            "dtypes": list(ops.dtypes),
            "cpu_or_failed": [risk(r) for r in ops.cpu_or_failed],
            "not_in_report": [risk(r) for r in ops.not_in_report],
            "native": ops.native,
        }
    return json.dumps(doc, indent=2)
