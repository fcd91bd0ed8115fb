"""The `torchfl` command: everyday tooling for torch-fl plugins and their users.

    torchfl list                      every plugin torch-fl can find, PASS/FAIL to load
    torchfl doctor [--plugin NAME]    health check of a plugin (exit 1 on failure)
    torchfl scan PATH [--device NAME] [--report FILE] [--format text|json]
                                      CUDA-specific usage in Python sources
    torchfl probe [--device N]        time the plugin's tunables, cache the fastest
    torchfl stats FILE [--top N]      ranked op statistics of a TORCH_FL_OP_STATS file

Also runnable as `python -m torch_fl.cli`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["main"]

# Exit codes: 0 fine, 1 the check found problems, 2 bad usage or input.
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def _cmd_list(args: argparse.Namespace) -> int:
    from torch_fl.tooling.listing import format_listing, list_plugins

    statuses = list_plugins(timeout=args.timeout, jobs=args.jobs)
    if args.format == "json":
        print(json.dumps([s.to_dict() for s in statuses], indent=2))
    else:
        print(format_listing(statuses))
    # A plugin whose hardware is absent here is not a problem of the installation.
    return EXIT_OK if statuses and all(s.ok or s.unavailable for s in statuses) else EXIT_PROBLEMS


def _doctor_elsewhere(args: argparse.Namespace) -> int:
    """Runs the doctor for another plugin in a fresh process (one backend per process)."""
    cmd = [sys.executable, "-m", "torch_fl.cli", "doctor", "--plugin", args.plugin,
           "--format", args.format]
    env = dict(os.environ, TORCH_FL_AUTOLOAD="0")
    return subprocess.run(cmd, env=env, check=False).returncode


def _cmd_doctor(args: argparse.Namespace) -> int:
    import torch_fl
    from torch_fl.tooling.doctor import test_compatibility

    active = torch_fl.get_plugin()
    if args.plugin and active is not None and args.plugin not in (active.name, active.library):
        return _doctor_elsewhere(args)
    result = test_compatibility(args.plugin, verbose=args.format == "text")
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2))
    return EXIT_OK if result.ok else EXIT_PROBLEMS


def _cmd_scan(args: argparse.Namespace) -> int:
    from torch_fl.tooling.coverage import ReportError, load_coverage
    from torch_fl.tooling.scan import scan_path
    from torch_fl.tooling.scan_report import ops_section, to_json, to_text

    try:
        result = scan_path(args.paths, device=args.device)
        ops = ops_section(result, load_coverage(args.report)) if args.report else None
    except (FileNotFoundError, ReportError) as exc:
        print(f"torchfl scan: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(to_json(result, ops) if args.format == "json" else to_text(result, ops))
    if result.errors:
        return EXIT_USAGE
    return EXIT_PROBLEMS if result.findings else EXIT_OK


def _cmd_probe(args: argparse.Namespace) -> int:
    import torch_fl
    from torch_fl.tooling import probe

    if torch_fl.get_plugin() is None:
        try:
            if args.plugin:
                torch_fl.register_device_plugin(args.plugin)
            else:
                from torch_fl._registration import autoload_best_plugin

                autoload_best_plugin()
        except Exception as exc:  # noqa: BLE001 - reported as a usage error
            print(f"torchfl probe: no plugin could be registered: {exc}", file=sys.stderr)
            return EXIT_USAGE
    handle = torch_fl.get_plugin()
    if handle is None:
        print("torchfl probe: no plugin is installed; `torchfl list` shows what torch-fl finds",
              file=sys.stderr)
        return EXIT_USAGE
    if args.plugin and args.plugin != handle.name:
        print(f"torchfl probe: this process runs plugin '{handle.name}'; run with "
              f"TORCH_FL_AUTOLOAD=0 to probe '{args.plugin}'", file=sys.stderr)
        return EXIT_USAGE
    if args.list:
        for t in probe.list_tunables(args.device or 0):
            current = probe.get_tunable(t.name, args.device or 0)
            print(f"{t.name}: {current} (default {t.default}; candidates "
                  f"{', '.join(map(str, t.candidates))}) — {t.description}")
        return EXIT_OK
    try:
        results = probe.probe(args.device, rounds=args.rounds, save=not args.no_save)
    except (NotImplementedError, IndexError, ValueError) as exc:
        print(f"torchfl probe: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print("\n".join(str(r) for r in results))
    return EXIT_OK


def _cmd_stats(args: argparse.Namespace) -> int:
    from torch_fl.tooling.profile_view import load_op_stats

    try:
        view = load_op_stats(args.file, sort_by=args.sort, top=args.top)
    except ValueError as exc:
        print(f"torchfl stats: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(view.to_dict(), indent=2) if args.format == "json" else view)
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchfl", description="Everyday tooling for torch-fl plugins and their users.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    fmt = {"choices": ("text", "json"), "default": "text", "help": "output format"}

    s = sub.add_parser("list", help="every plugin torch-fl can find, with PASS/FAIL to load")
    s.add_argument("--format", **fmt)
    s.add_argument("--timeout", type=float, default=120.0,
                   help="seconds each plugin may take to load (default 120)")
    s.add_argument("--jobs", type=int, default=2, help="plugins loaded at once (default 2)")
    s.set_defaults(fn=_cmd_list)

    s = sub.add_parser("doctor", help="health check of a plugin; exit status 1 on failure")
    s.add_argument("--plugin", help="plugin name or library path (default: the autoloaded one)")
    s.add_argument("--format", **fmt)
    s.set_defaults(fn=_cmd_doctor)

    s = sub.add_parser("scan", help="find CUDA-specific usage in Python sources")
    s.add_argument("paths", nargs="+", metavar="PATH", help="Python files or directories")
    s.add_argument("--device", help="the plugin's device name, used in the suggested fixes")
    s.add_argument("--report", metavar="FILE",
                   help="certification report (or TORCH_FL_OP_STATS file): also judge, per "
                        "dtype, the operators the code likely runs (native, fallback, failed, "
                        "unsupported), one line each with where the code uses it")
    s.add_argument("--format", **fmt)
    s.set_defaults(fn=_cmd_scan)

    s = sub.add_parser("probe", help="time the plugin's tunables and cache the fastest values")
    s.add_argument("--plugin", help="plugin name (default: the autoloaded one)")
    s.add_argument("--device", type=int, help="device index (default: every device)")
    s.add_argument("--rounds", type=int, default=3, help="timings per candidate (default 3)")
    s.add_argument("--no-save", action="store_true", help="set the values but write no cache")
    s.add_argument("--list", action="store_true", help="only list the tunables and their values")
    s.add_argument("--format", **fmt)
    s.set_defaults(fn=_cmd_probe)

    s = sub.add_parser("stats", help="ranked op statistics of a TORCH_FL_OP_STATS file")
    s.add_argument("file", metavar="FILE")
    s.add_argument("--sort", choices=("time", "calls", "fallback", "bytes"), default="time")
    s.add_argument("--top", type=int, help="show only the first N rows")
    s.add_argument("--format", **fmt)
    s.set_defaults(fn=_cmd_stats)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "top", None) is not None and args.top < 1:
        print(f"torchfl stats: --top must be a positive number, got {args.top}", file=sys.stderr)
        return EXIT_USAGE
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
