"""Benchmarks report ratios against a baseline measured in the same run.

A benchmark names its baseline with `benchmark.extra_info["baseline"] = "<test name>"`,
or measures it itself, interleaved with its own rounds, and gives its median as
`extra_info["baseline_median_s"]` with a label in "baseline"; after the run the
ratios of medians are printed and written to .benchmarks/ratios.json. A
figure that is not a ratio (a start-up time, host time per call) goes in
`extra_info["figure"]` as one line with its target, printed before the ratios.
Nothing here fails on a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch  # noqa: F401 - autoloads the plugin under test


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    medians = {b.name: b.stats.median for b in session.benchmarks if b.stats}
    rows = []
    for b in session.benchmarks:
        baseline = b.extra_info.get("baseline")
        base_s = b.extra_info.get("baseline_median_s", medians.get(baseline))
        if baseline and base_s and b.name in medians:
            rows.append({
                "benchmark": b.name,
                "baseline": baseline,
                "median_us": medians[b.name] * 1e6,
                "baseline_median_us": base_s * 1e6,
                "ratio": medians[b.name] / base_s,
                "target": b.extra_info.get("target"),
            })
    figures = [(b.name, b.extra_info["figure"]) for b in session.benchmarks if b.extra_info.get("figure")]
    if figures:
        terminalreporter.section("figures against targets")
        for name, text in figures:
            terminalreporter.write_line(f"{name}: {text}")
    if not rows:
        return
    terminalreporter.section("ratios against same-run baselines")
    for r in rows:
        target = f" (target <= {r['target']})" if r["target"] is not None else ""
        terminalreporter.write_line(
            f"{r['benchmark']}: {r['median_us']:.2f} us / {r['baseline']}: "
            f"{r['baseline_median_us']:.2f} us = {r['ratio']:.2f}x{target}"
        )
    out = Path(config.rootpath) / ".benchmarks" / "ratios.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
