"""Benchmarks report ratios against a baseline measured in the same run.

A benchmark names its baseline with `benchmark.extra_info["baseline"] = "<test name>"`,
or measures it itself, interleaved with its own rounds, and gives its median as
`extra_info["baseline_median_s"]` with a label in "baseline"; after the run the
ratios of medians are printed and written to .benchmarks/ratios.json.
_report.py puts ratios, and figures that are not ratios (a start-up time,
host time per call), in the rows of the run's summary table (summary.py:
.benchmarks/summary.md, printed last, which `make bench` copies into the README).
Nothing here fails on a time.
"""

from __future__ import annotations

import json

import summary
import torch  # noqa: F401 - autoloads the plugin under test


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    rows = summary.ratio_rows(session.benchmarks)
    if rows:
        terminalreporter.section("ratios against same-run baselines")
        for r in rows:
            target = f" (target <= {r['target']})" if r["target"] is not None else ""
            terminalreporter.write_line(
                f"{r['benchmark']}: {r['median_us']:.2f} us / {r['baseline']}: "
                f"{r['baseline_median_us']:.2f} us = {r['ratio']:.2f}x{target}"
            )
        out = summary.OUT / "ratios.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(rows, indent=2))
    every = summary.selects_every_benchmark(config.args, config.getoption("keyword"),
                                            config.getoption("markexpr"), config.getoption("deselect"))
    path = summary.write(session.benchmarks, exitstatus, every, config.invocation_params.args)
    terminalreporter.section("summary")
    terminalreporter.write(path.read_text())
