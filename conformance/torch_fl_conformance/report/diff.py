"""Compares two reports: what changed in level, requirements, operator coverage
and test outcomes, and how the test set itself changed.

The two are kept apart. "Same test, different outcome" is a change in the
plugin (or in the bridge or torch under it); tests added or removed are a
change in what was asked, which follows torch: the OpInfo sweep is generated
from the running torch's op_db, so a report made under another torch release
holds other tests. Tests missing from the later report count as a regression
only when both runs used the same torch release and suite version, where the
test sets should be identical."""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch_fl_conformance.outcomes import RANK
from torch_fl_conformance.requirements import LEVELS

__all__ = ["diff_reports", "identity", "render"]

_LEVEL_RANK = {"none": -1, **{lv: i for i, lv in enumerate(LEVELS)}}
_REQ_RANK = {"met": 0, "skipped": 1, "not_tested": 1, "unverified": 2, "waived": 3,
             "not_met": 4}
_COV_RANK = {"native": 0, "decomposed": 1, "fallback": 2, "unsupported": 3, "error": 4,
             "blocked": 5, "wrong": 6, "timeout": 7, "crash": 8}
# Listed in full in --json; the text lists this many per section.
_SHOWN = 200


def _release(version: str) -> str:
    """"2.14" of "2.14.1+cpu": the unit a bridge is built for and op_db changes with."""
    return ".".join(version.split("+")[0].split(".")[:2])


def identity(r: dict[str, Any]) -> dict[str, Any]:
    """What a report was made with: plugin, library, torch, bridge, suite, when, level."""
    p, h = r["plugin"], r.get("host", {})
    return {
        "plugin": p["plugin_name"], "plugin_version": p["version"], "abi": p.get("abi", ""),
        "library_sha256": p.get("library_sha256", ""), "torch": h.get("torch", "unknown"),
        "torch_fl": h.get("torch_fl", "unknown"), "python": h.get("python", "unknown"),
        "suite": r["run"]["suite_version"], "started": r["run"]["started"],
        "level": r["level"]["achieved"], "tests": len(r["tests"]),
    }


def diff_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Changes from report a (before) to report b (after).

    Returns "before"/"after" (identity()), "regressions" and "improvements" (lines:
    level, requirements, coverage and tests present in both runs), "outcome_changes"
    (the tests present in both whose outcome differs), "added" and "removed" (the
    tests only in b or only in a, with their outcome), and "test_set_should_match"
    (same torch release and suite: then a removed test is also a regression)."""
    ida, idb = identity(a), identity(b)
    same_set = _release(ida["torch"]) == _release(idb["torch"]) and ida["suite"] == idb["suite"]
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

    ca = {(c["op"], c["dtype"]): c["class"] for c in a["coverage"]["ops"]}
    cb = {(c["op"], c["dtype"]): c["class"] for c in b["coverage"]["ops"]}
    for k, cls in cb.items():
        if k not in ca or ca[k] == cls:
            continue
        line = f"op {k[0]} {k[1]}: {ca[k]} -> {cls}"
        (reg if _COV_RANK[cls] > _COV_RANK[ca[k]] else imp).append(line)
    summary = {"regressions": list(reg), "improvements": list(imp)}

    ta = {t["id"]: t for t in a["tests"]}
    tb = {t["id"]: t for t in b["tests"]}
    changed: list[dict[str, Any]] = []
    for tid, t in tb.items():
        old = ta.get(tid)
        if old is None or old["outcome"] == t["outcome"]:
            continue
        oa, ob = old["outcome"], t["outcome"]
        worse = RANK[ob] > RANK[oa]
        changed.append({"id": tid, "before": oa, "after": ob, "worse": worse,
                        "message": t.get("message", "")[:160]})
        line = f"test {tid}: {oa} -> {ob}"
        if worse:
            reg.append(f"{line}: {t.get('message', '')[:160]}")
        else:
            imp.append(line)
    added = [{"id": tid, "outcome": t["outcome"], "message": t.get("message", "")[:160]}
             for tid, t in sorted(tb.items()) if tid not in ta]
    removed = [{"id": tid, "outcome": t["outcome"]}
               for tid, t in sorted(ta.items()) if tid not in tb]
    if same_set:
        reg += [f"test {t['id']}: present before, missing now" for t in removed]
    return {
        "before": ida, "after": idb, "test_set_should_match": same_set,
        "regressions": reg, "improvements": imp, "summary": summary,
        "outcome_changes": changed,
        "added": added, "removed": removed,
        "coverage_added": [f"{op} {dt}" for op, dt in sorted(set(cb) - set(ca))],
        "coverage_removed": [f"{op} {dt}" for op, dt in sorted(set(ca) - set(cb))],
    }


def _ident_line(i: dict[str, Any]) -> str:
    sha = i["library_sha256"]
    lib = f", library {sha[:12]}" if sha else ""
    return (f"{i['plugin']} {i['plugin_version']}{lib} under torch {i['torch']}, "
            f"torch-fl {i['torch_fl']}, suite {i['suite']} ({i['started']}, "
            f"level {i['level']}, {i['tests']} tests)")


def _versions(a: dict[str, Any], b: dict[str, Any]) -> str:
    parts = []
    for key, name in (("torch", "torch"), ("torch_fl", "torch-fl"), ("suite", "suite"),
                      ("plugin_version", a["plugin"])):
        parts.append(f"{name} {a[key]} -> {b[key]}" if a[key] != b[key] else f"{name} {a[key]}")
    same_lib = a["library_sha256"] and a["library_sha256"] == b["library_sha256"]
    parts.append("same plugin library" if same_lib else "plugin library differs")
    return "; ".join(parts)


def _listed(items: list[str], indent: str = "  ") -> list[str]:
    out = [f"{indent}{x}" for x in items[:_SHOWN]]
    if len(items) > _SHOWN:
        out.append(f"{indent}... {len(items) - _SHOWN} more (--json lists all)")
    return out


def render(a: dict[str, Any], b: dict[str, Any], changes: dict[str, Any]) -> str:
    ia, ib = changes["before"], changes["after"]
    lines = [f"before: {_ident_line(ia)}", f"after:  {_ident_line(ib)}",
             f"versions: {_versions(ia, ib)}"]
    oc = changes["outcome_changes"]
    worse = sum(c["worse"] for c in oc)
    missing = len(changes["removed"]) if changes["test_set_should_match"] else 0
    tests_moved = {"regressions": (worse, missing), "improvements": (len(oc) - worse, 0)}
    for key, title in (("regressions", "Regressions"), ("improvements", "Improvements")):
        items = changes["summary"][key]
        n_tests, n_missing = tests_moved[key]
        lines.append(f"{title} ({len(changes[key])}):")
        lines += _listed([f"- {x}" for x in items])
        if n_tests:
            lines.append(f"  - {n_tests} test(s) in both runs: see \"Same test, different outcome\"")
        if n_missing:
            lines.append(f"  - {n_missing} test(s) missing now: see \"Test set changed\"")
        if not (items or n_tests or n_missing):
            lines.append("  none")

    common = len(b["tests"]) - len(changes["added"])
    lines.append(f"Same test, different outcome ({len(oc)} of {common} tests in both runs: "
                 f"{worse} worse, {len(oc) - worse} better):")
    ordered = sorted(oc, key=lambda c: (not c["worse"], c["id"]))
    lines += _listed([f"{'worse' if c['worse'] else 'better'}: {c['id']}: "
                      f"{c['before']} -> {c['after']}"
                      + (f": {c['message']}" if c["worse"] and c["message"] else "")
                      for c in ordered]) or ["  none"]

    added, removed = changes["added"], changes["removed"]
    if changes["test_set_should_match"]:
        why = "same torch release and suite: the sets should match"
    else:
        moved = [f"{name} {ia[k]} -> {ib[k]}" for k, name in (("torch", "torch"), ("suite", "suite"))
                 if ia[k] != ib[k]]
        why = f"expected with {' and '.join(moved)}: op_db and the suite decide the tests"
    lines.append(f"Test set changed (+{len(added)} added, -{len(removed)} removed; {why}):")
    if not added and not removed:
        lines.append("  none")

    def tally(ts: list[dict[str, Any]]) -> str:
        return ", ".join(f"{o} {n}" for o, n in sorted(Counter(t["outcome"] for t in ts).items()))

    if added:
        lines.append(f"  Added ({len(added)}: {tally(added)}):")
        # The ones that do not pass first: they are what the new torch asks that the plugin misses.
        first_failing = sorted(added, key=lambda t: (-RANK[t["outcome"]], t["id"]))
        lines += _listed([f"+ {t['id']}: {t['outcome']}"
                          + (f": {t['message']}" if RANK[t["outcome"]] > RANK["SKIP"]
                             and t["message"] else "") for t in first_failing], "    ")
    if removed:
        lines.append(f"  Removed ({len(removed)}; outcome before: {tally(removed)}):")
        lines += _listed([f"- {t['id']}: was {t['outcome']}" for t in removed], "    ")
    cov_a, cov_r = changes["coverage_added"], changes["coverage_removed"]
    if cov_a or cov_r:
        lines.append(f"  Operator coverage rows: +{len(cov_a)} only after, "
                     f"-{len(cov_r)} only before")
        lines += _listed([f"+ {x}" for x in cov_a] + [f"- {x}" for x in cov_r], "    ")
    return "\n".join(lines)
