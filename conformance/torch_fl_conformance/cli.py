"""torchfl-conformance: certify a torch-fl plugin and work with its reports.

    torchfl-conformance run --plugin flemu --level L1 --report out/ -j 2
    torchfl-conformance diff before/report.json after/report.json
    torchfl-conformance verify out/report.json
    torchfl-conformance requirements --format md
    torchfl-conformance zoo --plugin flemu --steps 10 --out zoo-table
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from torch_fl_conformance import __version__

EXIT_OK, EXIT_NOT_MET, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchfl-conformance",
        description="Certification of torch-fl plugins: run the conformance suite, compare "
                    "and verify reports.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="certify a plugin and write the report",
                       description="Runs the suite against a plugin in isolated worker "
                                   "processes and writes JSON, HTML, Markdown and JUnit "
                                   "reports. Exit status 0 when the requested level is "
                                   "reached, 1 when not, 2 on a usage error.")
    r.add_argument("--plugin", help="installed plugin name, path of its library, or NAME=PATH")
    r.add_argument("--level", default="L2", choices=("L0", "L1", "L2", "L3"),
                   help="highest level to test (default L2)")
    r.add_argument("--report", default="conformance-report", metavar="DIR",
                   help="report directory (default ./conformance-report)")
    r.add_argument("--expectations", metavar="FILE", help="expectation file (TOML)")
    r.add_argument("--certify", action="store_true",
                   help="certification mode: refuse expected failures/skips of MUST "
                        "requirements and any filter")
    r.add_argument("-j", "--jobs", type=int, default=1, metavar="N", help="worker processes")
    r.add_argument("--seed", type=int, default=None, help="base random seed")
    r.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="time limit of one test (default 300)")
    r.add_argument("--ops", metavar="NAMES", help="only these op_db names (globs allowed)")
    r.add_argument("--models", metavar="NAMES", help="only these model zoo names")
    r.add_argument("--samples", type=int, default=None,
                   help="OpInfo samples per op and dtype (default: the sweep's budget)")
    r.add_argument("pytest_args", nargs="*", help="extra pytest arguments after --, e.g. -k")

    d = sub.add_parser("diff", help="regressions and improvements between two reports",
                       description="Compares two reports, e.g. one plugin library under two "
                                   "torch releases: a header naming both runs' plugin, torch, "
                                   "torch-fl and suite versions; regressions and improvements "
                                   "of level, requirements and coverage; the tests in both "
                                   "whose outcome changed; and, apart, the tests added and "
                                   "removed (op_db follows torch). Exit status 1 when there "
                                   "are regressions.")
    d.add_argument("before")
    d.add_argument("after")
    d.add_argument("--json", action="store_true", help="print the changes as JSON")

    v = sub.add_parser("verify", help="check that a report has not been altered")
    v.add_argument("report")

    e = sub.add_parser("expect", help="draft an expectation file from a report's failures",
                       description="Prints [[xfail]] entries for the tests a report shows "
                                   "failing, each with the observed message as its reason. "
                                   "SHOULD requirements only unless --include-must: a "
                                   "certification refuses expected failures of MUST ones.")
    e.add_argument("report")
    e.add_argument("--include-must", action="store_true")

    z = sub.add_parser("zoo", help="train the model zoo on a device and the CPU: regression table",
                       description="Trains each zoo model for --steps steps on the plugin's "
                                   "device and on the CPU side by side and writes a table "
                                   "(Markdown and JSON) of loss delta, output/gradient errors, "
                                   "step times and their ratio, peak memory and fallbacks. "
                                   "Exit status 1 when a model misses its tolerances.")
    z.add_argument("--plugin", help="installed plugin name, path of its library, or NAME=PATH")
    z.add_argument("--steps", type=int, default=10, help="training steps per model (default 10)")
    z.add_argument("--models", metavar="NAMES", help="comma-separated zoo names (default all)")
    z.add_argument("--out", default="zoo-table", metavar="DIR",
                   help="directory for zoo-table.md and zoo-table.json (default ./zoo-table)")

    q = sub.add_parser("requirements", help="print the requirement catalogue")
    q.add_argument("--format", choices=("md", "json"), default="md")
    return p


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"torchfl-conformance: no report at '{path}'") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"torchfl-conformance: '{path}' is not JSON ({exc}); a report is "
                         "the report.json a run writes") from None


def cmd_run(args: argparse.Namespace) -> int:
    from torch_fl_conformance.runner import RunConfig, RunError, run
    from torch_fl_conformance.session import DEFAULT_SEED, DEFAULT_TIMEOUT

    if not args.plugin:
        from torch_fl_conformance.target import describe_choices

        print(f"torchfl-conformance: {describe_choices()}", file=sys.stderr)
        return EXIT_USAGE
    if args.certify and (args.ops or args.models or args.pytest_args):
        print("torchfl-conformance: --certify runs the whole suite; drop --ops, --models and "
              "extra pytest arguments", file=sys.stderr)
        return EXIT_USAGE
    if args.expectations and not os.path.exists(args.expectations):
        print(f"torchfl-conformance: expectation file '{args.expectations}' does not exist",
              file=sys.stderr)
        return EXIT_USAGE
    cfg = RunConfig(
        plugin=args.plugin, level=args.level, report_dir=args.report,
        expectations=args.expectations, certify=args.certify, jobs=args.jobs,
        seed=DEFAULT_SEED if args.seed is None else args.seed,
        timeout=DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
        ops=args.ops, models=args.models, samples=args.samples, pytest_args=args.pytest_args,
    )
    try:
        report = run(cfg)
    except RunError as exc:
        print(f"torchfl-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    lv = report["level"]
    s = report["summary"]["outcomes"]
    print(f"\nlevel achieved: {lv['achieved']} — {lv['summary']}")
    print("tests: " + ", ".join(f"{k.lower()} {v}" for k, v in s.items() if v))
    cov = report["coverage"]["totals"]
    if any(cov.values()):
        print("op coverage (op/dtype cases): "
              + ", ".join(f"{k} {v}" for k, v in cov.items() if v))
    stale = report["expectations"]["stale"]
    if stale:
        print(f"warning: {len(stale)} stale expectation entries (see the report)")
    print(f"report: {Path(report['files']['html']).resolve()}")
    print(f"        {Path(report['files']['json']).resolve()}")
    requested = lv["requested"]
    return EXIT_OK if lv["levels"][requested]["met"] and lv["achieved"] == requested \
        else EXIT_NOT_MET


def cmd_diff(args: argparse.Namespace) -> int:
    from torch_fl_conformance.report.diff import diff_reports, render

    a, b = _load(args.before), _load(args.after)
    changes = diff_reports(a, b)
    print(json.dumps(changes, indent=2) if args.json else render(a, b, changes))
    return EXIT_NOT_MET if changes["regressions"] else EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    import hashlib

    from torch_fl_conformance.report import integrity
    from torch_fl_conformance.report.schema import validate

    report = _load(args.report)
    problems = integrity.check(report)
    problems += [f"schema: {e}" for e in validate(report)[:20]]
    base = Path(args.report).parent
    for name, digest in (report.get("files") or {}).items():
        path = base / name
        if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(f"{name}: SHA-256 differs from the one recorded in the report")
    if problems:
        print(f"{args.report}: ALTERED or invalid")
        for p in problems:
            print(f"  - {p}")
        return EXIT_NOT_MET
    p = report["plugin"]
    print(f"{args.report}: intact (sha256 {report['integrity']['digest'][:16]}…"
          f"{', HMAC checked' if 'hmac_sha256' in report['integrity'] else ''}): "
          f"{p['plugin_name']} {p['version']}, level {report['level']['achieved']}, "
          f"library sha256 {p['library_sha256'][:16]}…")
    return EXIT_OK


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def cmd_expect(args: argparse.Namespace) -> int:
    report = _load(args.report)
    p = report["plugin"]
    lines = [(f"# Expected failures of {p['plugin_name']} {p['version']}, drafted from the "
              f"report of {report['run']['started']}"),
             "# (torchfl-conformance expect). Review every reason.", ""]
    bad = ("FAIL", "ERROR", "CRASH", "TIMEOUT", "XFAIL")
    n = 0
    for t in report["tests"]:
        if t["outcome"] not in bad or (t["strength"] == "MUST" and not args.include_must):
            continue
        first = t["message"].splitlines()[0] if t.get("message") else "no message"
        reason = (t.get("expectation") or {}).get("reason") or (
            f"{t['outcome']} ({t['requirement']} {t['strength']}): {first}")
        lines += ["[[xfail]]", f"id = {_toml_str(t['id'])}", f"reason = {_toml_str(reason[:300])}",
                  ""]
        n += 1
    sys.stdout.write("\n".join(lines))
    print(f"# {n} entries", file=sys.stderr)
    return EXIT_OK


def cmd_requirements(args: argparse.Namespace) -> int:
    from torch_fl_conformance.requirements import render_json, render_markdown

    sys.stdout.write(render_markdown() + "\n" if args.format == "md" else render_json())
    return EXIT_OK


def cmd_zoo(args: argparse.Namespace) -> int:
    from torch_fl_conformance.target import NoPluginChosen, load_target
    from torch_fl_conformance.zoo import all_models, get_model
    from torch_fl_conformance.zoo.parity import check_parity
    from torch_fl_conformance.zoo.table import build_table, render_markdown

    if args.steps < 1:
        print(f"torchfl-conformance: --steps must be at least 1, got {args.steps}", file=sys.stderr)
        return EXIT_USAGE
    try:
        target = load_target(args.plugin)
        specs = ([get_model(n.strip()) for n in args.models.split(",") if n.strip()]
                 if args.models else list(all_models()))
    except NoPluginChosen as exc:
        print(f"torchfl-conformance: {exc.code}", file=sys.stderr)
        return EXIT_USAGE
    except KeyError as exc:
        print(f"torchfl-conformance: {exc.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    results = []
    for spec in specs:
        print(f"training {spec.name} for {args.steps} steps on {target.device()} and the CPU ...",
              flush=True)
        results.append(check_parity(spec, device=target.device(), steps=args.steps))
    table = build_table(results, target.header(), args.steps)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(table)
    (out / "zoo-table.md").write_text(markdown, encoding="utf-8")
    (out / "zoo-table.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    print(markdown)
    print(f"table: {(out / 'zoo-table.md').resolve()}")
    print(f"       {(out / 'zoo-table.json').resolve()}")
    return EXIT_OK if table["passed"] else EXIT_NOT_MET


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"run": cmd_run, "diff": cmd_diff, "verify": cmd_verify, "expect": cmd_expect,
               "requirements": cmd_requirements, "zoo": cmd_zoo}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
