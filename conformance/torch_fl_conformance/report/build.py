"""Builds the report dictionary from per-test results: requirement status, level
achieved and why, op coverage, error statistics."""

from __future__ import annotations

import re
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from torch_fl_conformance import outcomes
from torch_fl_conformance.report import integrity
from torch_fl_conformance.report.suspects import rank_suspects
from torch_fl_conformance.requirements import LEVEL_NAMES, LEVELS, load_requirements
from torch_fl_conformance.session import opinfo_case_of

SCHEMA = "torchfl-conformance-report"
# 1.1: the BLOCKED outcome, "suspects", per-test "kernels", the sweep's variant checks
SCHEMA_VERSION = "1.1"
COVERAGE_CLASSES = ("native", "decomposed", "fallback", "error", "wrong", "crash", "timeout",
                    "blocked", "unsupported")
_EXC = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Failure))\b")


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def merge_op_stats(tables: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Sums the cumulative op_stats snapshots of several worker processes."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in tables:
        for r in rows:
            k = (r["op"], r["dtype"])
            if k not in acc:
                acc[k] = dict(r)
            else:
                for f in ("native", "decomposed", "cpu_fallback", "failed", "time_ns",
                          "bytes_copied"):
                    acc[k][f] += r[f]
    return sorted(acc.values(), key=lambda r: (r["op"], r["dtype"]))


def _requirement_status(reqs: dict[str, Any], tests: list[dict[str, Any]],
                        capabilities: set[str]) -> list[dict[str, Any]]:
    by_req: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in tests:
        by_req[t["requirement"]].append(t)
    out = []
    for rid, r in sorted(reqs.items()):
        if r.retired:
            continue
        ts = by_req.get(rid, [])
        counts = Counter(t["outcome"] for t in ts)
        bad = [t for t in ts if t["outcome"] in outcomes.BAD]
        waived = [t for t in ts if t["outcome"] == outcomes.SKIP
                  and (t.get("expectation") or {}).get("kind") == "skip"]
        cap_missing = bool(r.capability) and r.capability not in capabilities
        if not ts:
            status, why = "not_tested", "no test of it was selected in this run"
        elif bad:
            status = "not_met"
            worst = Counter(t["outcome"] for t in bad).most_common()
            why = ", ".join(f"{n} {o}" for o, n in worst)
        elif waived:
            status, why = "waived", f"{len(waived)} test(s) skipped by the expectation file"
        elif counts.get(outcomes.SKIP, 0) == len(ts):
            if cap_missing:
                status, why = "skipped", f"{r.capability} not advertised"
            else:
                caps = {t.get("capability") for t in ts} - {""}
                if caps and not caps & capabilities:
                    status, why = "skipped", f"{', '.join(sorted(caps))} not advertised"
                else:
                    status, why = "unverified", "every test of it was skipped"
        else:
            status, why = "met", (f"{counts.get(outcomes.PASS, 0) + counts.get(outcomes.XPASS, 0)}" \
                                 " test(s) passed")
        out.append({
            "id": rid, "strength": r.strength, "level": r.level, "capability": r.capability,
            "text": r.text, "status": status, "why": why, "tests": len(ts),
            "outcomes": dict(sorted(counts.items())),
            "failing": [t["id"] for t in bad][:25],
        })
    return out


def _levels(reqs: list[dict[str, Any]], requested: str, partial: bool) -> dict[str, Any]:
    levels: dict[str, Any] = {}
    achieved = "none"
    chain = True
    for level in LEVELS:
        must = [r for r in reqs if r["level"] == level and r["strength"] == "MUST"]
        if LEVELS.index(level) > LEVELS.index(requested):
            levels[level] = {"met": False, "tested": False,
                             "why": [f"not tested (the run stopped at {requested})"]}
            chain = False
            continue
        blocking = [r for r in must if r["status"] not in ("met", "skipped")]
        why = [f"{r['id']} {r['status'].replace('_', ' ')}: {r['why']}" for r in blocking
               if r["status"] != "not_tested"]
        untested = [r["id"] for r in blocking if r["status"] == "not_tested"]
        if untested:
            why.append(f"{len(untested)} MUST requirement(s) not tested in this run: "
                       + ", ".join(untested))
        met = not blocking
        if met:
            n_met = sum(r["status"] == "met" for r in must)
            n_skip = sum(r["status"] == "skipped" for r in must)
            why = [(f"all {len(must)} MUST requirements hold ({n_met} met, {n_skip} skipped "
                   "for capabilities the plugin does not advertise)")]
        levels[level] = {"met": met, "tested": True, "why": why,
                         "should_not_met": [r["id"] for r in reqs if r["level"] == level
                                            and r["strength"] == "SHOULD"
                                            and r["status"] in ("not_met", "waived")]}
        if met and chain:
            achieved = level
        else:
            chain = False
    if achieved == "none":
        summary = "no level: " + "; ".join(levels["L0"]["why"][:3])
    else:
        nxt = LEVELS.index(achieved) + 1
        summary = f"{achieved} ({LEVEL_NAMES[achieved]})"
        if nxt < len(LEVELS):
            blocker = levels[LEVELS[nxt]]["why"]
            summary += f"; {LEVELS[nxt]} not reached: " + "; ".join(blocker[:3])
    if partial:
        summary += " [partial run: filters applied, not a certification]"
    return {"requested": requested, "achieved": achieved, "summary": summary,
            "levels": levels}


def _coverage(tests: list[dict[str, Any]]) -> dict[str, Any]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for t in tests:
        parsed = opinfo_case_of(t["id"])
        if parsed is None:
            continue
        key = (parsed[0], parsed[1])
        data = (t.get("data") or {}).get("opinfo")
        row = rows.setdefault(key, {"op": key[0], "dtype": key[1], "class": None,
                                    "checks": {}})
        row["checks"][parsed[2]] = t["outcome"]
        if data and "class" in data:
            for f in ("forward", "backward", "samples", "fallback_ops", "decomposed_ops",
                      "max_abs", "max_rel", "grad_max_abs", "grad_max_rel", "forward_error",
                      "backward_error", "wrong", "grad_wrong", "shape_only", "random",
                      "unsupported_samples", "variants"):
                if f in data:
                    row[f] = data[f]
            row["class"] = data["class"]
        if t["outcome"] == outcomes.CRASH:
            row["class"], row["message"] = "crash", t.get("message", "")
        elif t["outcome"] == outcomes.TIMEOUT and row["class"] != "crash":
            row["class"], row["message"] = "timeout", t.get("message", "")
        elif t["outcome"] == outcomes.BLOCKED and row["class"] in (None, "unsupported"):
            row["class"], row["message"] = "blocked", t.get("message", "")
    for row in rows.values():
        if row["class"] is None:
            row["class"] = "unsupported"
    table = sorted(rows.values(), key=lambda r: (r["op"], r["dtype"]))
    totals = Counter(r["class"] for r in table)
    by_dtype: dict[str, Counter[str]] = defaultdict(Counter)
    for r in table:
        by_dtype[r["dtype"]][r["class"]] += 1
    ops = sorted({r["op"] for r in table})
    fallback_ops = Counter(o for r in table for o in r.get("fallback_ops", []))
    # capability -> cases with samples set aside because the plugin lacks it
    set_aside: dict[str, list[str]] = defaultdict(list)
    for r in table:
        for cap in sorted(r.get("unsupported_samples") or {}):
            set_aside[cap].append(f"{r['op']}-{r['dtype']}")
    return {
        "capability_unsupported": {c: v for c, v in sorted(set_aside.items())},
        "random_ops": sorted({r["op"] for r in table if r.get("random")}),
        "classes": list(COVERAGE_CLASSES),
        "ops": table,
        "totals": {c: totals.get(c, 0) for c in COVERAGE_CLASSES},
        "by_dtype": {d: {c: v.get(c, 0) for c in COVERAGE_CLASSES}
                     for d, v in sorted(by_dtype.items())},
        "op_count": len(ops),
        "top_fallback_aten_ops": [{"op": o, "cases": n} for o, n in fallback_ops.most_common(40)],
    }


def _errors(tests: list[dict[str, Any]]) -> dict[str, Any]:
    by_outcome = Counter(t["outcome"] for t in tests)
    by_area: dict[str, Counter[str]] = defaultdict(Counter)
    for t in tests:
        by_area[t["area"]][t["outcome"]] += 1
    exc: Counter[str] = Counter()
    example: dict[str, str] = {}
    for t in tests:
        if t["outcome"] not in (outcomes.FAIL, outcomes.ERROR, outcomes.XFAIL):
            continue
        m = _EXC.search(t.get("message", "")) or _EXC.search(t.get("detail", "")[-600:])
        name = m.group(1) if m else ("mismatch" if "differs" in t.get("message", "")
                                     else "other")
        exc[name] += 1
        example.setdefault(name, t["id"])
    for o in (outcomes.CRASH, outcomes.TIMEOUT, outcomes.BLOCKED):
        if by_outcome.get(o):
            exc[o.lower()] = by_outcome[o]
            example.setdefault(o.lower(), next(t["id"] for t in tests if t["outcome"] == o))
    return {
        "by_outcome": {o: by_outcome.get(o, 0) for o in outcomes.OUTCOMES},
        "by_area": {a: {o: c.get(o, 0) for o in outcomes.OUTCOMES}
                    for a, c in sorted(by_area.items())},
        "by_kind": [{"kind": k, "count": n, "example": example[k]} for k, n in exc.most_common()],
    }


def build_report(*, target: dict[str, Any], host: dict[str, Any], options: dict[str, Any],
                 tests: list[dict[str, Any]], op_stats: list[dict[str, Any]],
                 stale: list[dict[str, str]], started: float, finished: float,
                 deselected: int, workers: int, restarts: int) -> dict[str, Any]:
    reqs = load_requirements()
    caps = set(target["capabilities"])
    req_status = _requirement_status(reqs, tests, caps)
    partial = bool(options.get("ops") or options.get("models"))
    level = _levels(req_status, options["level"], partial)
    level["certify_mode"] = bool(options.get("certify"))
    level["partial"] = partial
    for t in tests:
        t.setdefault("detail", "")
        if t["outcome"] == outcomes.PASS:
            t["detail"] = ""
    totals = {k: sum(r[k] for r in op_stats) for k in
              ("native", "decomposed", "cpu_fallback", "failed", "time_ns", "bytes_copied")}
    xpassed = [t["id"] for t in tests if t["outcome"] == outcomes.XPASS]
    report = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run": {
            "started": _iso(started), "finished": _iso(finished),
            "duration_s": round(finished - started, 2), "suite_version": host["suite"],
            "command": " ".join(sys.argv), "options": options, "workers": workers,
            "worker_restarts": restarts, "deselected_by_level": deselected,
        },
        "host": host,
        "plugin": target,
        "level": level,
        "summary": {
            "tests": len(tests),
            "outcomes": {o: sum(t["outcome"] == o for t in tests) for o in outcomes.OUTCOMES},
            "requirements": dict(Counter(r["status"] for r in req_status)),
        },
        "requirements": req_status,
        "tests": tests,
        "coverage": _coverage(tests),
        "suspects": rank_suspects(tests),
        "op_stats": {"rows": op_stats, "totals": totals},
        "errors": _errors(tests),
        "expectations": {
            "file": options.get("expectations"),
            "applied": sum(1 for t in tests if t.get("expectation")),
            "stale": stale,
            "xpassed": xpassed,
        },
    }
    report["integrity"] = integrity.seal(report)
    return report
