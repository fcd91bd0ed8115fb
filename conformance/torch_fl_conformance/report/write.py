"""Writes a report as JSON, HTML, Markdown and JUnit XML into a directory."""

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
from torch_fl_conformance.requirements import LEVEL_NAMES

__all__ = ["write_all"]

BAD_SHOWN = (outcomes.FAIL, outcomes.ERROR, outcomes.CRASH, outcomes.TIMEOUT, outcomes.BLOCKED,
             outcomes.XFAIL, outcomes.XPASS, outcomes.NOT_RUN)


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
    lines = [f"# Conformance report: {r['plugin']['plugin_name']} {r['plugin']['version']}", "",
             f"**Level achieved: {lv['achieved']}** — {lv['summary']}", ""]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {k} | {_md_cell(v)} |" for k, v in _header_rows(r)]
    lines += ["", "## Levels", "", "| level | result | why |", "|---|---|---|"]
    for level, info in lv["levels"].items():
        state = "met" if info["met"] else ("not tested" if not info["tested"] else "NOT met")
        lines.append(f"| {level} {LEVEL_NAMES[level]} | {state} | "
                     f"{_md_cell('; '.join(info['why'][:4]))} |")
    lines += ["", "## Tests", "", "| " + " | ".join(outcomes.OUTCOMES) + " |",
              "|" + "---|" * len(outcomes.OUTCOMES),
              "| " + " | ".join(str(s[o]) for o in outcomes.OUTCOMES) + " |", ""]
    lines += ["| area | " + " | ".join(outcomes.OUTCOMES) + " |",
              "|---|" + "---|" * len(outcomes.OUTCOMES)]
    for area, c in r["errors"]["by_area"].items():
        lines.append(f"| {area} | " + " | ".join(str(c[o]) for o in outcomes.OUTCOMES) + " |")
    lines += ["", "## Requirements", "", "| id | strength | level | status | why |",
              "|---|---|---|---|---|"]
    for q in r["requirements"]:
        lines.append(f"| {q['id']} | {q['strength']} | {q['level']} | {q['status']} | "
                     f"{_md_cell(q['why'])} |")
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
        if cov["top_fallback_aten_ops"]:
            lines += ["", "Kernels whose absence sends the most cases to the CPU fallback: "
                      + ", ".join(f"`{x['op']}` ({x['cases']})"
                                  for x in cov["top_fallback_aten_ops"][:15]) + "."]
    bad = [t for t in r["tests"] if t["outcome"] in BAD_SHOWN]
    if bad:
        lines += ["", f"## Not passing ({len(bad)})", "", ("| outcome | test | requirement | "
                  "message |"), "|---|---|---|---|"]
        for t in bad[:200]:
            lines.append(f"| {t['outcome']} | `{t['id']}` | {t['requirement']} | "
                         f"{_md_cell(t['message'][:200])} |")
        if len(bad) > 200:
            lines.append(f"| … | {len(bad) - 200} more in report.json | | |")
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
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
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
"""


def render_html(r: dict[str, Any]) -> str:
    lv, p = r["level"], r["plugin"]
    achieved = lv["achieved"]
    color = {"none": "#c62828", "L0": "#ef6c00", "L1": "#558b2f", "L2": "#2e7d32",
             "L3": "#1b5e20"}[achieved]
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Conformance: {_h(p['plugin_name'])} {_h(p['version'])}</title>",
        f"<style>{CSS}</style></head><body>",
        (f"<h1>Conformance report: {_h(p['plugin_name'])} {_h(p['version'])} "
        f"({_h(p['vendor'])})</h1>"),
        (f"<p><span class='badge' style='background:{color}'>Level: {_h(achieved)}"
        f"{' ' + LEVEL_NAMES[achieved] if achieved in LEVEL_NAMES else ''}</span> "
        f"{_h(lv['summary'])}</p>"),
        "<table>",
    ]
    out += [f"<tr><th>{_h(k)}</th><td>{_h(v)}</td></tr>" for k, v in _header_rows(r)]
    out.append("</table>")

    out.append("<h2>Levels</h2><table><tr><th>level</th><th>result</th><th>why</th></tr>")
    for level, info in lv["levels"].items():
        state = "met" if info["met"] else ("not tested" if not info["tested"] else "NOT met")
        cls = "met" if info["met"] else ("not_tested" if not info["tested"] else "not_met")
        why = "<br>".join(_h(w) for w in info["why"][:8])
        should = info.get("should_not_met") or []
        if should:
            why += f"<br><i>SHOULD not met: {_h(', '.join(should))}</i>"
        out.append(f"<tr><td>{level} {LEVEL_NAMES[level]}</td><td class='{cls}'>{state}</td>"
                   f"<td>{why}</td></tr>")
    out.append("</table>")

    out.append("<h2>Results by area</h2>")
    by_area = r["errors"]["by_area"]
    out.append(svg.stacked_bars(list(by_area.items()), list(outcomes.OUTCOMES),
                                "Test outcomes per area"))

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
        top = [(x["op"], x["cases"]) for x in cov["top_fallback_aten_ops"][:15]]
        out.append(svg.bars(top, "Missing kernels: aten ops sending most cases to the CPU",
                            color="#f9a825"))

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

    out.append("<h2>Requirements</h2><table><tr><th>id</th><th>strength</th><th>level</th>"
               "<th>capability</th><th>status</th><th>tests</th><th>requirement</th>"
               "<th>why</th></tr>")
    for q in r["requirements"]:
        out.append(f"<tr><td>{_h(q['id'])}</td><td>{q['strength']}</td><td>{q['level']}</td>"
                   f"<td>{_h(q['capability'] or '—')}</td><td class='{q['status']}'>"
                   f"{_h(q['status'].replace('_', ' '))}</td><td>{q['tests']}</td>"
                   f"<td>{_h(q['text'])}</td><td>{_h(q['why'])}</td></tr>")
    out.append("</table>")

    bad = [t for t in r["tests"] if t["outcome"] in BAD_SHOWN]
    out.append(f"<h2>Tests not passing ({len(bad)})</h2>")
    if bad:
        out.append("<table><tr><th>outcome</th><th>test</th><th>requirement</th>"
                   "<th>message</th></tr>")
        for t in bad[:500]:
            detail = (f"<details><summary>detail</summary><pre>{_h(t['detail'])}</pre>"
                      "</details>") if t.get("detail") else ""
            out.append(f"<tr><td class='o-{t['outcome']}'>{t['outcome']}</td>"
                       f"<td><code>{_h(t['id'])}</code></td><td>{_h(t['requirement'])}</td>"
                       f"<td>{_h(t['message'][:400])}{detail}</td></tr>")
        out.append("</table>")
        if len(bad) > 500:
            out.append(f"<p>{len(bad) - 500} more in report.json.</p>")

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
