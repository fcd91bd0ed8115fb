"""A benchmark and its baseline timed in the same rounds.

Two benchmarks run one after the other see different moments of a shared
machine: the same pair measured minutes apart gave a GEMM ratio of 0.51x and
0.84x. Interleaved, load that comes and goes moves both sides alike. Each
timed call follows untimed calls of its own side for at least SETTLE_S: the
other side's threads keep spinning for a while after its last call
(PyTorch's OpenMP workers, flemu's pool helper for half a millisecond), and a
call timed while they spin measures two thread pools fighting over the cores,
which no program that stays on one side sees (alternating call by call, a
256x128x512 GEMM took twice as long on both sides).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

SETTLE_S = 0.01


def _settle(fn: Callable[[], object]) -> None:
    """Calls fn untimed, at least once and until SETTLE_S has passed."""
    end = time.perf_counter() + SETTLE_S
    fn()
    while time.perf_counter() < end:
        fn()


def interleaved(benchmark: Any, timed: Callable[[], object], baseline: Callable[[], object],
                label: str, rounds: int, warmup: int = 0) -> None:
    """Benchmarks `timed` against `baseline` round by round: the ratio of
    medians is reported under `label` (conftest.py). `warmup` untimed calls
    of each side come first."""
    for _ in range(warmup):
        baseline()
        timed()
    times: list[float] = []

    def baseline_round() -> None:
        _settle(baseline)
        start = time.perf_counter()
        baseline()
        times.append(time.perf_counter() - start)
        _settle(timed)

    benchmark.pedantic(timed, setup=baseline_round, rounds=rounds, iterations=1)
    benchmark.extra_info.update(baseline=label, baseline_median_s=statistics.median(times))
