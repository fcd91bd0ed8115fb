"""The summary of a benchmark run: every ratio and figure against its target
in one table, headed by the machine, the build and the thread settings it
was measured with.

conftest.py writes it after each run (.benchmarks/summary.md and
summary.json). `make bench` then runs

    python bench/summary.py README.md

which puts that table between the README's markers, so the README shows
what the command gave and nothing else.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".benchmarks"
BEGIN = "<!-- make bench: begin -->"
END = "<!-- make bench: end -->"
_UNITS = {"x": "×", "us": " µs", "ms": " ms", "%": "%"}
# The table's order, by benchmark module (the run's order is alphabetical):
# the models' steps and the host time inside them first, then the kernels,
# graph mode, start-up and the rest. A module not named here comes last.
ORDER = ("test_training_step", "test_hf_step", "test_dispatch", "test_kernels_conv", "test_kernels_gemm",
         "test_kernels_math", "test_idle_gap", "test_compile", "test_startup", "test_optimizer",
         "test_allreduce", "test_probe", "test_profiler_overhead")


def ratio_rows(benchmarks: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per benchmark that has a baseline: its median against the
    baseline's (a benchmark of the run, or one it timed itself)."""
    benchmarks = list(benchmarks)
    medians = {b.name: b.stats.median for b in benchmarks if b.stats}
    rows = []
    for b in benchmarks:
        info = b.extra_info
        baseline = info.get("baseline")
        base_s = info.get("baseline_median_s", medians.get(baseline))
        if baseline and base_s and b.name in medians:
            rows.append({
                "benchmark": b.name,
                "baseline": baseline,
                "median_us": medians[b.name] * 1e6,
                "baseline_median_us": base_s * 1e6,
                "ratio": medians[b.name] / base_s,
                "target": info.get("target"),
                # _report.row(); without it, the test's name and its parameters.
                "row": info.get("row") or b.name.split("[")[0],
                "case": info.get("case") if info.get("row") else _params(b.name),
            })
    return rows


def _params(name: str) -> str | None:
    match = re.search(r"\[(.*)\]$", name)
    return match.group(1) if match else None


def entries(benchmarks: Iterable[Any]) -> list[dict[str, Any]]:
    """Ratios and figures in the order they ran."""
    benchmarks = list(benchmarks)
    ratios = {r["benchmark"]: r for r in ratio_rows(benchmarks)}
    out = []
    for b in benchmarks:
        module = Path(getattr(b, "fullname", "").split("::")[0]).stem
        if b.name in ratios:
            r = ratios[b.name]
            out.append({"row": r["row"], "case": r["case"], "value": r["ratio"], "unit": "x",
                        "target": r["target"], "module": module})
        out.extend(dict(f, module=module) for f in b.extra_info.get("figures", ()))
    return out


def _number(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:.1f}%" if abs(value) < 10 else f"{value:.0f}%"
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{digits}f}{_UNITS.get(unit, ' ' + unit)}"


def _bound(target: float, unit: str) -> str:
    return f"≤ {round(target, 2):g}{_UNITS.get(unit, ' ' + unit)}"


def table(items: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Entries grouped into rows by `row`; rows in ORDER of their modules,
    within a module in the order each row first ran."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for e in items:
        grouped.setdefault(e["row"], []).append(e)

    def rank(what: str) -> int:
        module = grouped[what][0].get("module")
        return ORDER.index(module) if module in ORDER else len(ORDER)

    rows = []
    for what in sorted(grouped, key=rank):  # stable: run order within a module
        group = grouped[what]
        cases = [e["case"] for e in group if e["case"]]
        label = f"{what}: {' / '.join(cases)}" if cases and len(cases) == len(group) else what
        measured = " / ".join(_number(e["value"], e["unit"]) for e in group)
        targeted = [e for e in group if e["target"] is not None]
        met = sum(e["value"] <= e["target"] for e in targeted)
        if not targeted:
            target, verdict = "—", "—"
        else:
            bounds = {_bound(e["target"], e["unit"]) for e in targeted}
            if len(bounds) == 1:
                target = bounds.pop()
                if len(targeted) < len(group):
                    target += f" ({' / '.join(str(e['case']) for e in targeted)})"
            else:
                target = " / ".join(_bound(e["target"], e["unit"]) if e["target"] is not None
                                    else "—" for e in group)
            verdict = ("met" if met == len(targeted) else "missed" if met == 0
                       else f"{met} of {len(targeted)} met")
        rows.append({"what": label, "measured": measured, "target": target, "verdict": verdict})
    return rows


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """What the figures depend on besides the code: the machine, the build,
    the thread settings."""
    import torch
    import torch_fl
    from torch_fl import _build_info

    plugin = torch_fl.get_plugin()
    units = None
    if plugin is not None:
        units = getattr(torch, plugin.name).get_device_properties(0).compute_units
    commit = _git("rev-parse", "--short", "HEAD")
    modified = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "commit": commit + (" with uncommitted changes" if modified else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "plugin": plugin.name if plugin is not None else None,
        "plugin_compute_units": units,
        "bridge_pgo": _build_info.PGO,
        "bridge_lto": _build_info.LTO,
        "settings": {k: v for k, v in sorted(os.environ.items())
                     if k.startswith(("FLEMU_", "TORCH_FL_", "OMP_", "MKL_", "DNNL_", "ONEDNN_"))},
    }


def markdown(env: dict[str, Any], rows: list[dict[str, str]]) -> str:
    settings = ", ".join(f"`{k}={v}`" for k, v in env["settings"].items()) or "none set"
    build = " and ".join(n for n, on in (("profile-guided", env["bridge_pgo"]),
                                          ("link-time", env["bridge_lto"])) if on)
    lines = [
        f"`{env['command']}` on commit {env['commit']}, {env['date']}: {env['cpu']}, "
        f"{env['cpus']} CPUs; torch {env['torch']} with {env['torch_threads']} threads, "
        f"plugin {env['plugin']} ({env['plugin_compute_units']} compute units, its default threads); "
        "bridge built with "
        f"{build + ' optimization' if build else 'neither profile-guided nor link-time optimization'}; "
        f"environment settings: {settings}.",
        "",
        "| what | measured | target | verdict |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['what']} | {r['measured']} | {r['target']} | {r['verdict']} |" for r in rows]
    return "\n".join(lines) + "\n"


def selects_every_benchmark(paths: Iterable[str], keyword: str, markexpr: str,
                            deselect: Iterable[str] | None) -> bool:
    """Whether a pytest run with these paths and options selected every
    benchmark: bench/ itself, no -k, -m or --deselect."""
    chosen = {Path(str(p).split("::")[0]).resolve() for p in paths}
    return chosen == {Path(__file__).resolve().parent} and not keyword and not markexpr and not deselect


def write(benchmarks: Iterable[Any], exit_status: int, complete: bool, args: Iterable[str]) -> Path:
    """Writes summary.json and summary.md for this run's benchmarks: `complete`
    when the run selected every benchmark in bench/, `args` its command line."""
    items = entries(benchmarks)
    env = environment()
    env.update(exit_status=int(exit_status), complete=complete)
    env["command"] = ("make bench" if complete and os.environ.get("MAKELEVEL")
                      else " ".join(["pytest", *args]))
    rows = table(items)
    OUT.mkdir(exist_ok=True)
    (OUT / "summary.json").write_text(json.dumps({"environment": env, "entries": items, "rows": rows},
                                                 indent=2, ensure_ascii=False))
    path = OUT / "summary.md"
    path.write_text(markdown(env, rows))
    return path


def into_readme(readme: Path, summary: Path = OUT / "summary.md") -> None:
    """Replaces the text between the README's markers with the summary."""
    text = readme.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme}: no '{BEGIN}' ... '{END}' block to put the summary in")
    record = summary.with_suffix(".json")
    if not summary.exists() or not record.exists():
        raise SystemExit(f"{summary} does not exist: run the benchmarks first (make bench)")
    env = json.loads(record.read_text())["environment"]
    if not env["complete"] or env["exit_status"] != 0:
        raise SystemExit(
            f"{summary} is from `{env['command']}` (exit status {env['exit_status']}, "
            f"{'every' if env['complete'] else 'not every'} benchmark selected): the README shows "
            "only a run of all the benchmarks that passed (make bench)")
    body = summary.read_text()
    readme.write_text(text[:start + len(BEGIN)] + "\n" + body + text[end:])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench/summary.py README.md")
    into_readme(Path(sys.argv[1]))
