"""Writes a report as JSON, HTML, Markdown and JUnit XML into a directory, and
renders the console summary of a run.

The console summary, the Markdown and the HTML say things in one order, the order
a vendor acts in: the verdict; the blockers (MUST failures of the lowest level not
met, each with its op, dtype, the plugin kernels it ran and a bisection command);
the next steps (kernels to write, most costly first); the SHOULD findings, one
line per requirement; the requirements by level, lowest first, with the ones not
tested counted per level and reason; then the details."""

from __future__ import annotations

import hashlib
import json
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from html import escape
from pathlib import Path
from typing import Any

from torch_fl_conformance import outcomes
from torch_fl_conformance.report import integrity, svg
from torch_fl_conformance.requirements import LEVEL_NAMES, LEVELS

__all__ = ["render_console", "write_all"]

BAD_SHOWN = (outcomes.FAIL, outcomes.ERROR, outcomes.CRASH, outcomes.TIMEOUT, outcomes.BLOCKED,
             outcomes.XFAIL, outcomes.XPASS, outcomes.NOT_RUN)
STEPS_SHOWN = 15  # next steps in the console and the Markdown (the HTML folds the rest)
BISECT_NOTE = ("Each bisection command re-runs the test with the plugin kernels it ran left "
               "to the fallback chain, in this run's environment. If it passes, the fault is "
               "in one of those kernels: keep half of the list and run again to find which.")


def _suspect_why(s: dict[str, Any]) -> str:
    parts = []
    if s.get("raised_or_hung"):
        parts.append("raised, crashed or hung itself")
    if s.get("own_entry_fails"):
        parts.append("its own op_db entry fails: " + ", ".join(s["own_entry_fails"]))
    parts.append(f"in {s['failing_cases']} failing case(s) of {s['ran_in_cases']} it ran in")
    return "; ".join(parts)


def write_all(report: dict[str, Any], directory: str) -> dict[str, str]:
    """Writes report.html, summary.md, junit.xml and report.json (last, with a manifest
    of the other files' SHA-256 inside its sealed content). Returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "report.html", "markdown": out / "summary.md",
             "junit": out / "junit.xml", "json": out / "report.json"}
    paths["html"].write_text(render_html(report), encoding="utf-8")
    paths["markdown"].write_text(render_markdown(report), encoding="utf-8")
    paths["junit"].write_bytes(render_junit(report))
    report["files"] = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for k, p in paths.items() if k != "json"
    }
    report["integrity"] = integrity.seal(report)
    tmp = paths["json"].with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=False, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    os.replace(tmp, paths["json"])
    return {k: str(p) for k, p in paths.items()}


# -- What every rendering says, in its order ------------------------------------
def _level_label(level: str) -> str:
    return f"{level} {LEVEL_NAMES.get(level, '')}".strip()


def _verdict(r: dict[str, Any]) -> str:
    lv = r["level"]
    return f"level achieved: {lv['achieved']} — {lv['summary']}"


def _blockers(r: dict[str, Any]) -> dict[str, Any]:
    return r.get("blockers") or {"level": None, "items": [], "more_tests": 0}


def _blocker_heading(b: dict[str, Any]) -> str:
    n = sum(x["kind"] == "test" for x in b["items"]) + b.get("more_tests", 0)
    parts = [f"{n} failing MUST test(s)"] if n else []
    reqs = [x for x in b["items"] if x["kind"] == "requirement"]
    if reqs:
        parts.append(f"{len(reqs)} MUST requirement(s) failing without a failing test")
    untested = [x for x in b["items"] if x["kind"] == "not_tested"]
    if untested:
        parts.append(f"{len(untested[0]['requirements'])} MUST requirement(s) not tested")
    return f"Blockers of {_level_label(b['level'])}: " + ", ".join(parts)


def _subject(x: dict[str, Any]) -> str:
    return (f"op {x['op'] or '—'}, dtype {x['dtype'] or 'not named by the test'}")


def _kernels_text(x: dict[str, Any]) -> str:
    if x["kernels"]:
        return "plugin kernels it ran: " + ", ".join(x["kernels"])
    if x["fallback_ops"]:
        return ("no plugin kernel ran in it (nothing to bisect): it ran on the CPU fallback "
                "for " + ", ".join(x["fallback_ops"]) + ", so the bridge or the fallback path "
                "is at fault")
    return "no plugin kernel ran in it (nothing to bisect)"


def _dtype_text(dtype: str) -> str:
    return "calls without tensor inputs" if dtype == "none" else dtype


def _step_action(x: dict[str, Any]) -> str:
    if x["action"] == "extend":
        return (f"add {_dtype_text(x['dtype'])} to the dtypes of the plugin's {x['kernel']} "
                f"kernel (its kernel-table entry; native now for "
                f"{', '.join(x['native_dtypes'])})")
    return (f"register {x['kernel']} for {_dtype_text(x['dtype'])} in the plugin's kernel "
            "table (Kernels_List)")


def _step_where(x: dict[str, Any]) -> str:
    if x["action"] == "extend":
        return (f"add the dtype to its entry in the plugin's kernel table (native now for "
                f"{', '.join(x['native_dtypes'])})")
    return "register it in the plugin's kernel table (Kernels_List)"


def _step_impact(x: dict[str, Any]) -> str:
    parts = []
    if x.get("zoo_fell_back_in"):
        parts.append("fell back in the zoo's training on the device: "
                     + ", ".join(x["zoo_fell_back_in"]))
    if x["zoo_calls"]:
        parts.append(f"zoo: {x['zoo_calls']} call(s), {x['zoo_time_ms']:.3g} ms per training "
                     f"step ({', '.join(x['zoo_models'])})")
    else:
        parts.append("zoo: not called")
    parts.append(f"this run: {x['fallback_calls']} CPU-fallback call(s), "
                 f"{x['fallback_time_ms']:.3g} ms, {x['cases']} op_db case(s)")
    called = [c for c in x["called_as"] if c != x["kernel"]]
    if called:
        parts.append("called as " + ", ".join(called))
    return "; ".join(parts)


def _steps_basis(ns: dict[str, Any]) -> str:
    zoo = ", ".join(ns.get("zoo_models") or []) or "none"
    text = (f"{ns.get('count', 0)} kernel(s) to write: operator and dtype pairs that ran on "
            "the CPU fallback while no kernel of that operator ran natively for that dtype; "
            "most costly first in one training step of the model zoo (" + zoo + "; calls and "
            "CPU time, traced on the CPU), then in this run's fallback calls and time.")
    if ns.get("zoo_error"):
        text += f" Zoo trace: {ns['zoo_error']}."
    return text


def _level_state(info: dict[str, Any]) -> str:
    return "met" if info["met"] else ("not tested" if not info["tested"] else "NOT met")


def _not_tested_text(g: dict[str, Any]) -> str:
    return (f"{g['count']} requirement(s) ({g['must']} MUST) of {_level_label(g['level'])} "
            f"not tested: {g['reason']}")


def _requirements_by_level(r: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Per level, lowest first: the requirements this run tested (not_tested ones are
    counted apart), those not met first."""
    order = {"not_met": 0, "waived": 1, "unverified": 2, "met": 3, "skipped": 4}
    out = []
    for level in LEVELS:
        reqs = [q for q in r["requirements"] if q["level"] == level
                and q["status"] != "not_tested"]
        reqs.sort(key=lambda q: (order.get(q["status"], 5), q["strength"] != "MUST", q["id"]))
        out.append((level, reqs))
    return out


def _not_passing(r: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Tests not passing: the MUST ones (lowest level first, worst outcome first) and
    the SHOULD ones by requirement."""
    bad = [t for t in r["tests"] if t["outcome"] in BAD_SHOWN]
    must = sorted((t for t in bad if t["strength"] == "MUST"),
                  key=lambda t: (LEVELS.index(t["level"]), -outcomes.RANK[t["outcome"]],
                                 t["requirement"], t["id"]))
    should: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in bad:
        if t["strength"] != "MUST":
            should[t["requirement"]].append(t)
    return must, dict(sorted(should.items()))


# -- Console --------------------------------------------------------------------
def render_console(r: dict[str, Any]) -> str:
    """The end-of-run summary: verdict, blockers, next steps, SHOULD findings, levels."""
    lines = ["", _verdict(r)]
    b = _blockers(r)
    if b["items"]:
        lines += ["", _blocker_heading(b) + ":"]
        for x in b["items"]:
            if x["kind"] == "test":
                lines += [f"  {x['outcome']:<8} {x['test']}  ({x['requirement']} MUST)",
                          f"           {_subject(x)}: {x['message']}",
                          f"           {_kernels_text(x)}"]
                if x["bisect"]:
                    lines.append(f"           bisect: {x['bisect']}")
            elif x["kind"] == "requirement":
                lines.append(f"  {x['requirement']} {x['status'].replace('_', ' ')}: {x['why']}")
            else:
                lines.append(f"  {x['why']}: {', '.join(x['requirements'])}")
        if b.get("more_tests"):
            lines.append(f"  ... {b['more_tests']} more failing MUST test(s) in the report")
        if any(x.get("bisect") for x in b["items"]):
            lines.append(f"  ({BISECT_NOTE})")
    ns = r.get("next_steps") or {}
    if ns.get("items"):
        lines += ["", f"Next steps: {_steps_basis(ns)}"]
        for i, x in enumerate(ns["items"][:STEPS_SHOWN], 1):
            lines += [f"  {i:>2}. {_step_action(x)}", f"      {_step_impact(x)}"]
        if ns["count"] > STEPS_SHOWN:
            lines.append(f"  ... {ns['count'] - STEPS_SHOWN} more in the report")
    findings = r.get("should_findings") or []
    if findings:
        lines += ["", "SHOULD findings (they do not block a level):"]
        lines += [f"  {f['requirement']} ({f['level']}): {f['count']} test(s) not passing — "
                  f"{f['text']}" for f in findings]
    lines += ["", "Levels:"]
    untested = defaultdict(list)
    for g in r.get("not_tested") or []:
        untested[g["level"]].append(g)
    for level, info in r["level"]["levels"].items():
        if info["tested"]:
            should = info.get("should_not_met") or []
            lines.append(f"  {_level_label(level)}: {_level_state(info)} — "
                         + "; ".join(info["why"][:3])
                         + (f"; SHOULD not met: {', '.join(should)}" if should else ""))
        for g in untested.get(level, []):
            counted = f"{g['count']} requirement(s) ({g['must']} MUST)"
            if info["tested"]:
                lines.append(f"    and {counted} not tested: {g['reason']}")
            else:
                lines.append(f"  {_level_label(level)}: not tested — {counted}: {g['reason']}")
    s = r["summary"]["outcomes"]
    lines += ["", "tests: " + ", ".join(f"{k.lower()} {v}" for k, v in s.items() if v)]
    return "\n".join(lines)


# -- Markdown -----------------------------------------------------------------
def _header_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    p, h, run = r["plugin"], r["host"], r["run"]
    o = run["options"]
    return [
        ("plugin", f"{p['plugin_name']} {p['version']} ({p['vendor']})"),
        ("device type", f"{p['device_type']} × {p['device_count']}"),
        ("plugin ABI / host ABI", f"{p['abi']} / {p['host_abi']}"),
        ("library", p["library"]),
        ("library SHA-256", p["library_sha256"]),
        ("capabilities", ", ".join(p["capabilities"]) or "none"),
        ("torch / torch-fl / suite", f"{h['torch']} / {h['torch_fl']} / {h['suite']}"),
        ("host", f"{h['hostname']} ({h['platform']}, {h['cpu_count']} CPUs)"),
        ("run", (f"{run['started']} – {run['finished']} ({run['duration_s']:.0f} s, "
                f"{run['workers']} worker(s), {run['worker_restarts']} restart(s))")),
        ("options", f"level ≤ {o['level']}, seed {o['seed']}, timeout {o['timeout_s']:g} s, "
                    + (f"{o['samples']} samples/op" if o.get("samples")
                       else "samples per the sweep's budget")
                    + f", certify {'yes' if o['certify'] else 'no'}"
                    + (f", ops {o['ops']}" if o.get("ops") else "")
                    + (f", models {o['models']}" if o.get("models") else "")),
        ("expectations", o.get("expectations") or "none"),
    ]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(r: dict[str, Any]) -> str:
    lv = r["level"]
    s = r["summary"]["outcomes"]
    p, h = r["plugin"], r["host"]
    lines = [f"# Conformance report: {p['plugin_name']} {p['version']}", "",
             f"**Level achieved: {lv['achieved']}** — {_md_cell(lv['summary'])}", "",
             (f"{p['plugin_name']} {p['version']} ({p['vendor']}), library SHA-256 "
              f"`{p['library_sha256'][:16]}…`, torch {h['torch']}, run {r['run']['started']}."),
             ""]
    b = _blockers(r)
    if b["items"]:
        lines += [f"## {_blocker_heading(b)}", ""]
        for x in b["items"]:
            if x["kind"] == "test":
                lines += [(f"- **{x['outcome']}** `{x['test']}` ({x['requirement']} MUST) — "
                           f"{_subject(x)}: {_md_cell(x['message'])}"),
                          f"  - {_md_cell(_kernels_text(x))}"]
                if x["bisect"]:
                    lines.append(f"  - bisect: `{x['bisect']}`")
            elif x["kind"] == "requirement":
                lines.append(f"- **{x['requirement']}** {x['status'].replace('_', ' ')}: "
                             f"{_md_cell(x['why'])}")
            else:
                lines.append(f"- {x['why']}: {', '.join(x['requirements'])}")
        if b.get("more_tests"):
            lines.append(f"- … {b['more_tests']} more failing MUST test(s) in report.json")
        if any(x.get("bisect") for x in b["items"]):
            lines += ["", BISECT_NOTE]
        lines.append("")
    ns = r.get("next_steps") or {}
    if ns.get("items"):
        lines += ["## Next steps: kernels to write", "", _steps_basis(ns), "",
                  ("| # | kernel | dtype | what to do | zoo calls | zoo ms / step | "
                   "run fallback calls | op_db cases |"), "|---|---|---|---|---|---|---|---|"]
        for i, x in enumerate(ns["items"][:STEPS_SHOWN], 1):
            lines.append(f"| {i} | `{x['kernel']}` | {_dtype_text(x['dtype'])} | "
                         f"{_md_cell(_step_where(x))} | {x['zoo_calls']} | "
                         f"{x['zoo_time_ms']:.3g} | {x['fallback_calls']} | {x['cases']} |")
        if ns["count"] > STEPS_SHOWN:
            lines.append(f"| … | {ns['count'] - STEPS_SHOWN} more in report.json | | | | | | |")
        lines.append("")
    findings = r.get("should_findings") or []
    if findings:
        lines += ["## SHOULD findings", "", "They do not block a level.", ""]
        for f in findings:
            lines.append(f"- **{f['requirement']}** ({f['level']}): {f['count']} test(s) not "
                         f"passing — {_md_cell(f['text'])}")
            if f["tests"]:
                lines += ["", "  <details><summary>tests</summary>", ""]
                lines += [f"  - {t['outcome']} `{t['id']}`: {_md_cell(t['message'])}"
                          for t in f["tests"][:50]]
                lines += ["", "  </details>", ""]
        lines.append("")
    lines += ["## Requirements by level", ""]
    untested = defaultdict(list)
    for g in r.get("not_tested") or []:
        untested[g["level"]].append(g)
    for level, reqs in _requirements_by_level(r):
        info = lv["levels"][level]
        lines += [f"### {_level_label(level)}: {_level_state(info)}", "",
                  _md_cell("; ".join(info["why"][:4])), ""]
        if reqs:
            lines += ["| id | strength | status | why |", "|---|---|---|---|"]
            lines += [f"| {q['id']} | {q['strength']} | {q['status']} | {_md_cell(q['why'])} |"
                      for q in reqs]
            lines.append("")
        lines += [f"{_not_tested_text(g)}: {', '.join(g['requirements'])}.\n"
                  for g in untested.get(level, [])]
    lines += ["## Run", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {_md_cell(v)} |" for k, v in _header_rows(r)]
    lines += ["", "## Tests", "", "| " + " | ".join(outcomes.OUTCOMES) + " |",
              "|" + "---|" * len(outcomes.OUTCOMES),
              "| " + " | ".join(str(s[o]) for o in outcomes.OUTCOMES) + " |", ""]
    lines += ["| area | " + " | ".join(outcomes.OUTCOMES) + " |",
              "|---|" + "---|" * len(outcomes.OUTCOMES)]
    for area, c in r["errors"]["by_area"].items():
        lines.append(f"| {area} | " + " | ".join(str(c[o]) for o in outcomes.OUTCOMES) + " |")
    if r.get("suspects"):
        lines += ["", "## Suspect kernels", "",
                  "The plugin's kernels the failures point at, most suspect first.", "",
                  "| kernel | score | why | e.g. |", "|---|---|---|---|"]
        for x in r["suspects"][:10]:
            lines.append(f"| `{x['kernel']}` | {x['score']:g} | {_md_cell(_suspect_why(x))} | "
                         f"`{x['examples'][0] if x['examples'] else ''}` |")
    cov = r["coverage"]
    if cov["ops"]:
        t = cov["totals"]
        lines += ["", "## Operator coverage (op_db)", "",
                  f"{cov['op_count']} operators, {len(cov['ops'])} operator/dtype cases.", "",
                  "| dtype | " + " | ".join(cov["classes"]) + " |",
                  "|---|" + "---|" * len(cov["classes"])]
        for d, c in cov["by_dtype"].items():
            lines.append(f"| {d} | " + " | ".join(str(c[k]) for k in cov["classes"]) + " |")
        lines.append("| **all** | " + " | ".join(f"**{t[k]}**" for k in cov["classes"]) + " |")
        for cap, cases in (cov.get("capability_unsupported") or {}).items():
            lines += ["", f"Samples needing `{cap}` (not advertised) were not run on the device "
                      f"in {len(cases)} operator/dtype case(s): "
                      + ", ".join(f"`{c}`" for c in cases[:12])
                      + (" ..." if len(cases) > 12 else "") + "."]
        if cov.get("random_ops"):
            lines += ["", f"{len(cov['random_ops'])} random operator(s) compared by structure, "
                      "finiteness and same-seed reproducibility (the device's random stream "
                      "differs from the CPU's): " + ", ".join(f"`{o}`" for o in cov["random_ops"])
                      + "."]
    must, should = _not_passing(r)
    n_should = sum(len(v) for v in should.values())
    if must or should:
        lines += ["", f"## Not passing ({len(must) + n_should})", ""]
    if must:
        lines += [f"MUST ({len(must)}), lowest level first:", "",
                  "| outcome | test | requirement | message |", "|---|---|---|---|"]
        for t in must[:200]:
            lines.append(f"| {t['outcome']} | `{t['id']}` | {t['requirement']} | "
                         f"{_md_cell(t['message'][:200])} |")
        if len(must) > 200:
            lines.append(f"| … | {len(must) - 200} more in report.json | | |")
        lines.append("")
    if should:
        lines.append(f"SHOULD ({n_should}): "
                     + ", ".join(f"{rid} {len(ts)}" for rid, ts in should.items())
                     + " (listed under SHOULD findings).")
    ex = r["expectations"]
    if ex["stale"] or ex["xpassed"]:
        lines += ["", "## Expectation file", ""]
        lines += [f"- stale ({e['kind']}): `{e['id']}` — matches no test" for e in ex["stale"]]
        lines += [f"- unexpectedly passing: `{i}` — remove its xfail entry"
                  for i in ex["xpassed"]]
    lines += ["", "Verify this report: `torchfl-conformance verify report.json`.", ""]
    return "\n".join(lines)


# -- HTML ---------------------------------------------------------------------
_URL = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):(//)")


def _h(text: Any) -> str:
    """Escaped text; '://' is written as an entity, so no URL appears in the file
    (a message quoting a link must never become a resource or a link)."""
    return _URL.sub(r"\1&#58;\2", escape(str(text)))


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#212121;
max-width:1100px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 4px}.run-id{color:#616161;font-size:13px;margin:0 0 10px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f5f5f5}.badge{display:inline-block;padding:6px 12px;border-radius:6px;color:#fff;
font-weight:bold;font-size:18px}.met{color:#2e7d32;font-weight:bold}
.not_met,.waived,.unverified{color:#c62828;font-weight:bold}.skipped,.not_tested{color:#757575}
.o-PASS{color:#2e7d32}.o-FAIL,.o-ERROR,.o-CRASH,.o-TIMEOUT,.o-BLOCKED{color:#c62828;
font-weight:bold}
.o-SKIP{color:#757575}code{font-size:12px}pre{white-space:pre-wrap;font-size:11px;
background:#fafafa;padding:6px;max-height:240px;overflow:auto}
details{margin:6px 0}summary{cursor:pointer}
.blocker{border-left:4px solid #c62828;background:#fff5f5;padding:6px 10px;margin:8px 0}
.blocker p{margin:2px 0;font-size:13px}.bisect{background:#263238;color:#eceff1;
font-size:12px;margin:4px 0;max-height:none}.finding{font-size:13px}
.note{color:#616161;font-size:12px}
"""


def _html_blockers(r: dict[str, Any]) -> list[str]:
    b = _blockers(r)
    if not b["items"]:
        return []
    out = [f"<h2 id='blockers'>{_h(_blocker_heading(b))}</h2>"]
    for x in b["items"]:
        if x["kind"] == "test":
            out.append(
                f"<div class='blocker'><p><b class='o-{x['outcome']}'>{x['outcome']}</b> "
                f"<code class='blocker-test'>{_h(x['test'])}</code> ({_h(x['requirement'])} "
                f"MUST)</p><p>{_h(_subject(x))}: {_h(x['message'])}</p>"
                f"<p>{_h(_kernels_text(x))}</p>"
                + (f"<pre class='bisect'>{_h(x['bisect'])}</pre>" if x["bisect"] else "")
                + "</div>")
        elif x["kind"] == "requirement":
            out.append(f"<div class='blocker'><p><b>{_h(x['requirement'])}</b> "
                       f"{_h(x['status'].replace('_', ' '))}: {_h(x['why'])}</p>"
                       f"<p>{_h(x['text'])}</p></div>")
        else:
            out.append(f"<div class='blocker'><p>{_h(x['why'])}: "
                       f"{_h(', '.join(x['requirements']))}</p></div>")
    if b.get("more_tests"):
        out.append(f"<p>{b['more_tests']} more failing MUST test(s) in report.json.</p>")
    if any(x.get("bisect") for x in b["items"]):
        out.append(f"<p class='note'>{_h(BISECT_NOTE)}</p>")
    return out


def _html_next_steps(r: dict[str, Any]) -> list[str]:
    ns = r.get("next_steps") or {}
    if not ns.get("items"):
        return []
    out = ["<h2 id='next-steps'>Next steps: kernels to write</h2>",
           f"<p class='note'>{_h(_steps_basis(ns))}</p>"]

    def table(items: list[dict[str, Any]], start: int) -> str:
        rows = "".join(
            f"<tr><td>{i}</td><td><code>{_h(x['kernel'])}</code></td>"
            f"<td>{_h(_dtype_text(x['dtype']))}</td><td>{_h(_step_where(x))}</td>"
            f"<td>{x['zoo_calls']}</td><td>{x['zoo_time_ms']:.3g}</td>"
            f"<td>{_h(', '.join(x['zoo_fell_back_in'] or x['zoo_models']) or '—')}</td>"
            f"<td>{x['fallback_calls']}</td><td>{x['fallback_time_ms']:.3g}</td>"
            f"<td>{x['cases']}</td>"
            f"<td>{_h(', '.join(c for c in x['called_as'] if c != x['kernel']) or '—')}</td>"
            "</tr>" for i, x in enumerate(items, start))
        return ("<table class='next-steps'><tr><th>#</th><th>kernel</th><th>dtype</th>"
                "<th>what to do</th><th>zoo calls</th><th>zoo ms / step</th>"
                "<th>zoo models</th><th>run fallback calls</th><th>run ms</th>"
                f"<th>op_db cases</th><th>called as</th></tr>{rows}</table>")

    out.append(table(ns["items"][:STEPS_SHOWN], 1))
    rest = ns["items"][STEPS_SHOWN:]
    if rest:
        out.append(f"<details><summary>{len(rest)} more</summary>"
                   f"{table(rest, STEPS_SHOWN + 1)}</details>")
    if ns["count"] > len(ns["items"]):
        out.append(f"<p>{ns['count'] - len(ns['items'])} more in report.json.</p>")
    return out


def _html_findings(r: dict[str, Any]) -> list[str]:
    findings = r.get("should_findings") or []
    if not findings:
        return []
    out = ["<h2 id='should-findings'>SHOULD findings</h2>",
           "<p class='note'>They do not block a level.</p>"]
    for f in findings:
        rows = "".join(f"<tr class='should-test'><td class='o-{t['outcome']}'>{t['outcome']}"
                       f"</td><td><code>{_h(t['id'])}</code></td><td>{_h(t['message'])}</td>"
                       "</tr>" for t in f["tests"])
        out.append(f"<details class='finding'><summary><b>{_h(f['requirement'])}</b> "
                   f"({f['level']}): {f['count']} test(s) not passing — {_h(f['text'])}"
                   f"</summary><table>{rows}</table></details>")
    return out


def _html_requirements(r: dict[str, Any]) -> list[str]:
    lv = r["level"]
    untested = defaultdict(list)
    for g in r.get("not_tested") or []:
        untested[g["level"]].append(g)
    out = ["<h2 id='requirements'>Requirements by level</h2>"]
    for level, reqs in _requirements_by_level(r):
        info = lv["levels"][level]
        cls = "met" if info["met"] else ("not_tested" if not info["tested"] else "not_met")
        why = "<br>".join(_h(w) for w in info["why"][:8])
        out.append(f"<h3>{_h(_level_label(level))}: <span class='{cls}'>"
                   f"{_level_state(info)}</span></h3><p class='note'>{why}</p>")
        if reqs:
            out.append("<table><tr><th>id</th><th>strength</th><th>capability</th>"
                       "<th>status</th><th>tests</th><th>requirement</th><th>why</th></tr>")
            for q in reqs:
                out.append(f"<tr><td>{_h(q['id'])}</td><td>{q['strength']}</td>"
                           f"<td>{_h(q['capability'] or '—')}</td><td class='{q['status']}'>"
                           f"{_h(q['status'].replace('_', ' '))}</td><td>{q['tests']}</td>"
                           f"<td>{_h(q['text'])}</td><td>{_h(q['why'])}</td></tr>")
            out.append("</table>")
        for g in untested.get(level, []):
            out.append(f"<details><summary>{_h(_not_tested_text(g))}</summary><p>"
                       f"{_h(', '.join(g['requirements']))}</p></details>")
    return out


def _area_chart(r: dict[str, Any]) -> str:
    """Requirements per area by status: a MUST requirement not met is a red segment
    of its area's bar however many tests passed beside it."""
    keys = ["MUST not met", "SHOULD not met", "met", "skipped", "not tested"]
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for q in r["requirements"]:
        area = q["id"].split("-")[1]
        if q["status"] in ("not_met", "waived", "unverified"):
            rows[area][f"{q['strength']} not met"] += 1
        else:
            rows[area][q["status"].replace("_", " ")] += 1
    first_level = {}
    for q in r["requirements"]:
        area = q["id"].split("-")[1]
        first_level[area] = min(first_level.get(area, 9), LEVELS.index(q["level"]))
    ordered = sorted(rows.items(), key=lambda kv: (-kv[1]["MUST not met"],
                                                   -kv[1]["SHOULD not met"],
                                                   first_level[kv[0]], kv[0]))
    return svg.stacked_bars(ordered, keys, "Requirements per area",
                            emphasize=("MUST not met", "SHOULD not met"))


def _tests_chart(r: dict[str, Any]) -> str:
    """Test outcomes per area with failures split by strength."""
    keys = ["PASS", "MUST failing", "SHOULD failing", "SKIP", "XFAIL", "XPASS"]
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for t in r["tests"]:
        o = t["outcome"]
        key = f"{t['strength']} failing" if o in outcomes.BAD and o != outcomes.XFAIL else o
        rows[t["area"]][key] += 1
    return svg.stacked_bars(sorted(rows.items()), keys, "Test outcomes per area",
                            emphasize=("MUST failing", "SHOULD failing"))


def render_html(r: dict[str, Any]) -> str:
    lv, p, h = r["level"], r["plugin"], r["host"]
    achieved = lv["achieved"]
    color = {"none": "#c62828", "L0": "#ef6c00", "L1": "#558b2f", "L2": "#2e7d32",
             "L3": "#1b5e20"}[achieved]
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Conformance: {_h(p['plugin_name'])} {_h(p['version'])}</title>",
        f"<style>{CSS}</style></head><body>",
        (f"<h1>Conformance report: {_h(p['plugin_name'])} {_h(p['version'])} "
         f"({_h(p['vendor'])})</h1>"),
        (f"<p class='run-id'>library SHA-256 {_h(p['library_sha256'][:16])}…, torch "
         f"{_h(h['torch'])}, torch-fl {_h(h['torch_fl'])}, suite {_h(h['suite'])}, run "
         f"{_h(r['run']['started'])} (the full header is under Run)</p>"),
        (f"<p id='verdict'><span class='badge' style='background:{color}'>Level: "
         f"{_h(achieved)}{' ' + LEVEL_NAMES[achieved] if achieved in LEVEL_NAMES else ''}"
         f"</span> {_h(lv['summary'])}</p>"),
    ]
    out += _html_blockers(r)
    out += _html_next_steps(r)
    out += _html_findings(r)
    out += _html_requirements(r)

    out.append("<h2>Results by area</h2>")
    out.append(_area_chart(r))
    out.append(_tests_chart(r))

    out.append("<h2 id='run'>Run</h2><table>")
    out += [f"<tr><th>{_h(k)}</th><td>{_h(v)}</td></tr>" for k, v in _header_rows(r)]
    out.append("</table>")

    cov = r["coverage"]
    if cov["ops"]:
        out.append("<h2>Operator coverage (op_db sweep)</h2>")
        t = cov["totals"]
        out.append(f"<p>{cov['op_count']} operators, {len(cov['ops'])} operator/dtype cases: "
                   + ", ".join(f"{_h(k)} {t[k]}" for k in cov["classes"]) + ".</p>")
        rows = list(cov["by_dtype"].items()) + [("all dtypes", t)]
        out.append(svg.stacked_bars(rows, cov["classes"],
                                    "Native vs decomposed vs CPU fallback, per dtype"))
        for cap, cases in (cov.get("capability_unsupported") or {}).items():
            out.append(f"<p>Samples needing <b>{_h(cap)}</b> (not advertised) were not run on "
                       f"the device in {len(cases)} operator/dtype case(s): "
                       f"{_h(', '.join(cases[:30]))}{' ...' if len(cases) > 30 else ''}.</p>")
        if cov.get("random_ops"):
            out.append(f"<p>{len(cov['random_ops'])} random operator(s) compared by structure, "
                       "finiteness and same-seed reproducibility (the device's random stream "
                       f"differs from the CPU's): {_h(', '.join(cov['random_ops']))}.</p>")

    kinds = [(k["kind"], k["count"]) for k in r["errors"]["by_kind"][:15]]
    out.append("<h2>Error distribution</h2>")
    out.append(svg.bars(kinds, "Failures by kind"))

    if r.get("suspects"):
        out.append("<h2>Suspect kernels</h2><p>The plugin's kernels the failures point at, "
                   "most suspect first.</p><table><tr><th>kernel</th><th>score</th>"
                   "<th>why</th><th>examples</th></tr>")
        for x in r["suspects"]:
            out.append(f"<tr><td><code>{_h(x['kernel'])}</code></td><td>{x['score']:g}</td>"
                       f"<td>{_h(_suspect_why(x))}</td><td>"
                       + "<br>".join(f"<code>{_h(e)}</code>" for e in x["examples"])
                       + "</td></tr>")
        out.append("</table>")

    must, should = _not_passing(r)
    n_should = sum(len(v) for v in should.values())
    out.append(f"<h2>Tests not passing ({len(must) + n_should})</h2>")

    def rows_of(tests: list[dict[str, Any]]) -> str:
        cells = []
        for t in tests:
            detail = (f"<details><summary>detail</summary><pre>{_h(t['detail'])}</pre>"
                      "</details>") if t.get("detail") else ""
            cells.append(f"<tr><td class='o-{t['outcome']}'>{t['outcome']}</td>"
                         f"<td><code>{_h(t['id'])}</code></td><td>{_h(t['requirement'])}</td>"
                         f"<td>{_h(t['message'][:400])}{detail}</td></tr>")
        return ("<table><tr><th>outcome</th><th>test</th><th>requirement</th>"
                "<th>message</th></tr>" + "".join(cells) + "</table>")

    if must:
        out.append(f"<h3>MUST ({len(must)}), lowest level first</h3>")
        out.append(rows_of(must[:500]))
        if len(must) > 500:
            out.append(f"<p>{len(must) - 500} more in report.json.</p>")
    for rid, tests in should.items():
        out.append(f"<details><summary>SHOULD {_h(rid)}: {len(tests)} test(s)</summary>"
                   f"{rows_of(tests[:500])}</details>")

    skips = Counter(t["message"][:120] for t in r["tests"] if t["outcome"] == outcomes.SKIP)
    if skips:
        out.append("<h2>Skipped, by reason</h2><table><tr><th>tests</th><th>reason</th></tr>")
        out += [f"<tr><td>{n}</td><td>{_h(m)}</td></tr>" for m, n in skips.most_common(30)]
        out.append("</table>")

    if cov["ops"]:
        out.append("<h2>Operator coverage table</h2><details><summary>every operator and "
                   f"dtype ({len(cov['ops'])} rows)</summary><table><tr><th>op</th>"
                   "<th>dtype</th><th>class</th><th>forward</th><th>backward</th>"
                   "<th>max abs err</th><th>CPU fallback for</th><th>note</th></tr>")
        for row in cov["ops"]:
            note = row.get("wrong") or row.get("grad_wrong") or row.get("forward_error") \
                or row.get("backward_error") or row.get("message") or ""
            failed = [c for c, o in row.get("checks", {}).items()
                      if o not in (outcomes.PASS, outcomes.SKIP)]
            if failed:
                note = f"not passing: {', '.join(failed)}" + (f"; {note}" if note else "")
            if row.get("unsupported_samples"):
                note = (note + "; " if note else "") + ", ".join(
                    f"{n} sample(s) need {c} (not advertised)"
                    for c, n in sorted(row["unsupported_samples"].items()))
            elif row.get("random") and not note:
                note = "random: compared by properties"
            out.append(f"<tr><td>{_h(row['op'])}</td><td>{row['dtype']}</td>"
                       f"<td style='color:{svg.COLORS.get(row['class'], '#000')}'>"
                       f"{row['class']}</td><td>{_h(row.get('forward', ''))}</td>"
                       f"<td>{_h(row.get('backward') or '')}</td>"
                       f"<td>{row.get('max_abs', 0):.2g}</td>"
                       f"<td>{_h(', '.join(row.get('fallback_ops', [])[:4]))}</td>"
                       f"<td>{_h(note[:160])}</td></tr>")
        out.append("</table></details>")

    stats = sorted(r["op_stats"]["rows"], key=lambda x: -x["cpu_fallback"])
    if stats:
        tot = r["op_stats"]["totals"]
        out.append("<h2>ATen operator calls during the run</h2>"
                   f"<p>native {tot['native']}, decomposed {tot['decomposed']}, "
                   f"CPU fallback {tot['cpu_fallback']}, failed {tot['failed']}.</p>"
                   f"<details><summary>per operator and dtype ({len(stats)} rows)</summary>"
                   "<table><tr><th>op</th><th>dtype</th><th>native</th><th>decomposed</th>"
                   "<th>CPU fallback</th><th>failed</th></tr>")
        for s in stats:
            out.append(f"<tr><td>{_h(s['op'])}</td><td>{_h(s['dtype'])}</td>"
                       f"<td>{s['native']}</td><td>{s['decomposed']}</td>"
                       f"<td>{s['cpu_fallback']}</td><td>{s['failed']}</td></tr>")
        out.append("</table></details>")

    ex = r["expectations"]
    out.append("<h2>Expectation file</h2>")
    out.append(f"<p>{_h(ex.get('file') or 'none')}; {ex['applied']} test(s) affected.</p>")
    if ex["stale"] or ex["xpassed"]:
        out.append("<ul>")
        out += [f"<li>stale {e['kind']}: <code>{_h(e['id'])}</code> matches no test</li>"
                for e in ex["stale"]]
        out += [f"<li>unexpectedly passing: <code>{_h(i)}</code></li>" for i in ex["xpassed"]]
        out.append("</ul>")
    out.append("<p>Check that report.json is unaltered with <code>torchfl-conformance verify "
               "report.json</code>.</p></body></html>")
    return "\n".join(out)


# -- JUnit --------------------------------------------------------------------
def render_junit(r: dict[str, Any]) -> bytes:
    suites = ET.Element("testsuites", name=f"torchfl-conformance {r['plugin']['plugin_name']}",
                        tests=str(len(r["tests"])), time=f"{r['run']['duration_s']:.2f}")
    by_area: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in r["tests"]:
        by_area[t["area"]].append(t)
    for area, tests in by_area.items():
        c = Counter(t["outcome"] for t in tests)
        suite = ET.SubElement(
            suites, "testsuite", name=area, tests=str(len(tests)),
            failures=str(c[outcomes.FAIL] + c[outcomes.XPASS]),
            errors=str(c[outcomes.ERROR] + c[outcomes.CRASH] + c[outcomes.TIMEOUT]
                       + c[outcomes.NOT_RUN] + c[outcomes.BLOCKED]),
            skipped=str(c[outcomes.SKIP] + c[outcomes.XFAIL]),
            time=f"{sum(t['duration_s'] for t in tests):.3f}")
        props = ET.SubElement(suite, "properties")
        for k in ("plugin_name", "version", "vendor", "abi", "library_sha256"):
            ET.SubElement(props, "property", name=k, value=str(r["plugin"][k]))
        for t in tests:
            file, _, name = t["id"].partition("::")
            case = ET.SubElement(suite, "testcase", classname=file.removesuffix(".py"),
                                 name=name, time=f"{t['duration_s']:.3f}")
            tp = ET.SubElement(case, "properties")
            ET.SubElement(tp, "property", name="requirement", value=t["requirement"])
            ET.SubElement(tp, "property", name="strength", value=t["strength"])
            o, msg = t["outcome"], t.get("message", "")
            if o in (outcomes.FAIL, outcomes.XPASS):
                el = ET.SubElement(case, "failure", message=msg[:500], type=o)
                el.text = t.get("detail", "")
            elif o in (outcomes.ERROR, outcomes.CRASH, outcomes.TIMEOUT, outcomes.NOT_RUN,
                       outcomes.BLOCKED):
                el = ET.SubElement(case, "error", message=msg[:500], type=o)
                el.text = t.get("detail", "")
            elif o in (outcomes.SKIP, outcomes.XFAIL):
                ET.SubElement(case, "skipped", message=f"{o}: {msg}"[:500])
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)
