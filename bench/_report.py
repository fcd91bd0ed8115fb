"""The rows of the summary `make bench` writes (conftest.py: .benchmarks/summary.md
and summary.json; summary.py puts the table into the README).

A benchmark with a same-run baseline gives its ratio a row with `row()`; a
figure that is not a ratio (milliseconds to a first op, microseconds of host
time a call, a share of a step) is added with `figure()`. Entries that name
the same `what` make one row, their cases joined with " / " in the order they
ran. Every target is an upper bound: a case meets it when its value is at most
the target.
"""

from __future__ import annotations

from typing import Any


def row(benchmark: Any, what: str, case: str | None = None, target: float | None = None) -> None:
    """Puts this benchmark's ratio (against its baseline) in row `what`."""
    benchmark.extra_info.update(row=what, case=case, target=target)


def figure(benchmark: Any, what: str, value: float, unit: str, case: str | None = None,
           target: float | None = None) -> None:
    """Adds `value` (in `unit`: "us", "ms" or "%") to row `what`."""
    benchmark.extra_info.setdefault("figures", []).append(
        {"row": what, "case": case, "value": value, "unit": unit, "target": target})
