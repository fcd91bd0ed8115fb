"""Compares two reports: regressions and improvements in level, requirements,
tests and operator coverage."""

from __future__ import annotations

from typing import Any

from torch_fl_conformance.outcomes import RANK
from torch_fl_conformance.requirements import LEVELS

_LEVEL_RANK = {"none": -1, **{lv: i for i, lv in enumerate(LEVELS)}}
_REQ_RANK = {"met": 0, "skipped": 1, "not_tested": 1, "unverified": 2, "waived": 3,
             "not_met": 4}
_COV_RANK = {"native": 0, "decomposed": 1, "fallback": 2, "unsupported": 3, "error": 4,
             "blocked": 5, "wrong": 6, "timeout": 7, "crash": 8}


def diff_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[str]]:
    """Changes from report a (before) to report b (after)."""
    reg: list[str] = []
    imp: list[str] = []
    la, lb = a["level"]["achieved"], b["level"]["achieved"]
    if _LEVEL_RANK[lb] < _LEVEL_RANK[la]:
        reg.append(f"level: {la} -> {lb}")
    elif _LEVEL_RANK[lb] > _LEVEL_RANK[la]:
        imp.append(f"level: {la} -> {lb}")

    ra = {r["id"]: r for r in a["requirements"]}
    for r in b["requirements"]:
        old = ra.get(r["id"])
        if old is None:
            continue
        sa, sb = _REQ_RANK[old["status"]], _REQ_RANK[r["status"]]
        line = f"requirement {r['id']} ({r['strength']}): {old['status']} -> {r['status']}"
        if sb > sa:
            reg.append(f"{line} ({r['why']})")
        elif sb < sa:
            imp.append(line)

    ta = {t["id"]: t for t in a["tests"]}
    tb = {t["id"]: t for t in b["tests"]}
    for tid, t in tb.items():
        old = ta.get(tid)
        if old is None:
            continue
        oa, ob = old["outcome"], t["outcome"]
        if oa == ob:
            continue
        line = f"test {tid}: {oa} -> {ob}"
        if RANK[ob] > RANK[oa]:
            reg.append(f"{line}: {t.get('message', '')[:160]}")
        else:
            imp.append(line)
    missing = sorted(set(ta) - set(tb))
    reg += [f"test {tid}: present before, missing now" for tid in missing[:200]]
    if len(missing) > 200:
        reg.append(f"... {len(missing) - 200} more tests missing")

    ca = {(c["op"], c["dtype"]): c["class"] for c in a["coverage"]["ops"]}
    for c in b["coverage"]["ops"]:
        k = (c["op"], c["dtype"])
        if k not in ca or ca[k] == c["class"]:
            continue
        line = f"op {c['op']} {c['dtype']}: {ca[k]} -> {c['class']}"
        (reg if _COV_RANK[c["class"]] > _COV_RANK[ca[k]] else imp).append(line)
    return {"regressions": reg, "improvements": imp}


def render(a: dict[str, Any], b: dict[str, Any], changes: dict[str, list[str]]) -> str:
    def ident(r: dict[str, Any]) -> str:
        p = r["plugin"]
        return (f"{p['plugin_name']} {p['version']} (suite {r['run']['suite_version']}, "
                f"{r['run']['started']}, level {r['level']['achieved']})")

    lines = [f"before: {ident(a)}", f"after:  {ident(b)}"]
    for key, title in (("regressions", "Regressions"), ("improvements", "Improvements")):
        items = changes[key]
        lines.append(f"{title} ({len(items)}):")
        lines += [f"  - {x}" for x in items] or ["  none"]
    return "\n".join(lines)
