"""torchfl-conformance: certify a torch-fl plugin and work with its reports.

    torchfl-conformance run --plugin flemu --level L1 --report out/ -j 2
    torchfl-conformance kernel aten::add.Tensor --plugin flemu
    torchfl-conformance diff before/report.json after/report.json
    torchfl-conformance verify out/report.json
    torchfl-conformance keygen release-key
    torchfl-conformance run --plugin flemu --sign release-key --report out/
    torchfl-conformance verify --key release-key.pub out/report.json
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
    r.add_argument("--sign", metavar="KEY",
                   help="sign report.json with this Ed25519 private key (torchfl-conformance "
                        "keygen writes one)")
    r.add_argument("pytest_args", nargs="*", help="extra pytest arguments after --, e.g. -k")

    k = sub.add_parser("kernel", help="check one operator's kernels: every dtype, sample and "
                                      "variant in seconds",
                       description="Runs the suite's OpInfo sweep for one operator only: "
                                   "every dtype the CPU supports, every sample op_db gives "
                                   "(up to the sweep's pool), every variant (non-contiguous, "
                                   "offset, broadcast, in-place, out=, gradients), and prints "
                                   "a verdict per dtype and variant: PASS, FAIL (with the "
                                   "max abs/rel error and the tolerance), NOT NATIVE (ran on "
                                   "the CPU fallback), SKIP (with the reason), CRASH, TIMEOUT. "
                                   "No report is written. Exit status 1 when a variant fails, "
                                   "2 on a usage error.")
    k.add_argument("op", metavar="OP",
                   help="op_db name (add, div.trunc_rounding, nn.functional.relu) or ATen "
                        "operator (aten::add, aten::add.Tensor)")
    k.add_argument("--plugin", help="installed plugin name, path of its library, or NAME=PATH")
    k.add_argument("--dtypes", metavar="NAMES",
                   help="comma-separated dtypes (default: every sweep dtype the CPU supports)")
    k.add_argument("--samples", type=int, default=None, metavar="N",
                   help="samples per dtype, each also deriving every variant (default: "
                        "every sample of the sweep's pool)")
    k.add_argument("--seed", type=int, default=None, help="base random seed (as run's)")
    k.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="time limit of one dtype case (default 120)")
    k.add_argument("--require-native", action="store_true",
                   help="exit 1 also when a variant ran on the CPU fallback")
    k.add_argument("--json", action="store_true", help="print the verdicts as JSON")

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

    v = sub.add_parser("verify", help="check that a report has not been altered",
                       description="Recomputes the report's digest (tamper evidence only: "
                                   "anyone can recompute it), validates the schema, checks "
                                   "the files beside it and, with --key, its Ed25519 "
                                   "signature. Exit status 1 when anything does not match.")
    v.add_argument("report")
    v.add_argument("--key", metavar="PUB",
                   help="the signer's public key (KEY.pub of keygen): the report must carry "
                        "a signature it verifies")

    g = sub.add_parser("keygen", help="write an Ed25519 key pair for signing reports",
                       description="Writes OUT (the private key, PEM, mode 0600: keep it "
                                   "where only the signer reads it) and OUT.pub (the public "
                                   "key to hand to whoever verifies). Never replaces a file.")
    g.add_argument("out", metavar="OUT")

    s = sub.add_parser("sign", help="sign an existing report with an Ed25519 private key",
                       description="Signs a report.json in place (as run --sign does after "
                                   "a run); refuses a report whose digest does not match.")
    s.add_argument("report")
    s.add_argument("--key", metavar="KEY", required=True, help="the Ed25519 private key")

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
    signing_key = None
    if args.sign:  # before the run: a bad key must not cost one
        from torch_fl_conformance.report import integrity

        try:
            signing_key = integrity.load_private_key(args.sign)
        except integrity.SigningError as exc:
            print(f"torchfl-conformance: --sign: {exc}", file=sys.stderr)
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
    # The runner has printed the summary (verdict, blockers, next steps).
    lv = report["level"]
    stale = report["expectations"]["stale"]
    if stale:
        print(f"warning: {len(stale)} stale expectation entries (see the report)")
    print(f"report: {Path(report['files']['html']).resolve()}")
    print(f"        {Path(report['files']['json']).resolve()}")
    if signing_key is not None:
        try:
            sig = integrity.sign_file(report["files"]["json"], signing_key)
        except integrity.SigningError as exc:
            print(f"torchfl-conformance: --sign: {exc}", file=sys.stderr)
            return EXIT_NOT_MET
        print(f"signed: {sig['algorithm']} by key {sig['public_key_fingerprint']}")
    requested = lv["requested"]
    return EXIT_OK if lv["levels"][requested]["met"] and lv["achieved"] == requested \
        else EXIT_NOT_MET


def cmd_kernel(args: argparse.Namespace) -> int:
    from torch_fl_conformance.kernel_check import (
        DEFAULT_TIMEOUT,
        KernelRequest,
        render_rows,
        run_kernel,
        summary,
        to_json,
    )
    from torch_fl_conformance.session import DEFAULT_SEED
    from torch_fl_conformance.target import SWEEP_DTYPES, describe_choices

    if not args.plugin:
        print(f"torchfl-conformance: {describe_choices()}", file=sys.stderr)
        return EXIT_USAGE
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None
    unknown = [d for d in dtypes or () if d not in SWEEP_DTYPES]
    if unknown:
        print(f"torchfl-conformance: --dtypes {', '.join(unknown)}: the sweep runs "
              f"{', '.join(SWEEP_DTYPES)}", file=sys.stderr)
        return EXIT_USAGE
    if args.samples is not None and args.samples < 1:
        print(f"torchfl-conformance: --samples must be at least 1, got {args.samples}",
              file=sys.stderr)
        return EXIT_USAGE
    if args.timeout is not None and args.timeout <= 0:
        print(f"torchfl-conformance: --timeout must be positive, got {args.timeout:g}",
              file=sys.stderr)
        return EXIT_USAGE
    req = KernelRequest(op=args.op, plugin=args.plugin, dtypes=dtypes, samples=args.samples,
                        seed=DEFAULT_SEED if args.seed is None else args.seed,
                        timeout=DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
                        require_native=args.require_native)
    result = run_kernel(req, progress=None if args.json else sys.stdout)
    if result.error:
        print(result.error if result.error.startswith("torchfl-conformance:")
              else f"torchfl-conformance: {result.error}", file=sys.stderr)
        return EXIT_USAGE
    s = summary(result, req)
    if args.json:
        print(json.dumps(to_json(result, req), indent=1))
    else:
        if not result.rows:
            print(render_rows(result.rows))
        print(f"\n{req.op}: " + ", ".join(f"{k.lower()} {v}" for k, v in
                                         sorted(s["verdicts"].items()))
              + f" ({s['wall_s']:.1f} s"
              + (f", {s['restarts']} restart(s)" if s["restarts"] else "") + ")")
    return EXIT_NOT_MET if s["failed"] else EXIT_OK


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
    public_key = None
    if args.key:
        try:
            public_key = integrity.load_public_key(args.key)
        except integrity.SigningError as exc:
            print(f"torchfl-conformance: --key: {exc}", file=sys.stderr)
            return EXIT_USAGE
    problems = integrity.check(report, public_key)
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
    sig = integrity.signature_of(report)
    if public_key is not None:
        signed = f", signature valid: {sig['algorithm']} by key {sig['public_key_fingerprint']}"
    elif sig is not None:
        signed = (f", signed by key {sig.get('public_key_fingerprint')} but the signature is "
                  "NOT checked: pass --key PUB")
    else:
        signed = ", unsigned: the digest shows accidental edits only (anyone can recompute it)"
    print(f"{args.report}: intact (sha256 {report['integrity']['digest'][:16]}…"
          f"{', HMAC checked' if 'hmac_sha256' in report['integrity'] else ''}{signed}): "
          f"{p['plugin_name']} {p['version']}, level {report['level']['achieved']}, "
          f"library sha256 {p['library_sha256'][:16]}…")
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    from torch_fl_conformance.report import integrity

    try:
        private, public, fp = integrity.generate_key_pair(args.out)
    except integrity.SigningError as exc:
        print(f"torchfl-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"private key: {private} (mode 0600; sign with: torchfl-conformance run --sign "
          f"{private} ...)")
    print(f"public key:  {public} (verify with: torchfl-conformance verify --key {public} "
          "report.json)")
    print(f"fingerprint: {fp}")
    return EXIT_OK


def cmd_sign(args: argparse.Namespace) -> int:
    from torch_fl_conformance.report import integrity

    try:
        sig = integrity.sign_file(args.report, integrity.load_private_key(args.key))
    except integrity.SigningError as exc:
        print(f"torchfl-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{args.report}: signed, {sig['algorithm']} by key {sig['public_key_fingerprint']}")
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
    handler = {"run": cmd_run, "kernel": cmd_kernel, "diff": cmd_diff, "verify": cmd_verify,
               "keygen": cmd_keygen, "sign": cmd_sign, "expect": cmd_expect,
               "requirements": cmd_requirements, "zoo": cmd_zoo}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
