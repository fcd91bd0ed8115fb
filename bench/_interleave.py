"""A benchmark and its baseline timed in the same rounds.

Two benchmarks run one after the other see different moments of a shared
machine: the same pair measured minutes apart gave a GEMM ratio of 0.51x and
0.84x. Interleaved, load that comes and goes moves both sides alike. Each
timed call follows untimed calls of its own side for at least SETTLE_S: the
other side's threads keep spinning for a while after its last call, and a
call timed while they spin measures two thread pools fighting over the cores,
which no program that stays on one side sees (alternating call by call, a
256x128x512 GEMM took twice as long on both sides). flemu's pool helper spins
for half a millisecond. PyTorch's OpenMP worker spins for about 9 ms of a
core after the CPU side's last parallel region (its CPU time, read from
/proc/self/task/*/schedstat, during flemu's encoder steps: 9.1 ms in the
first 10 ms after a CPU step, none in the next 10), so SETTLE_S is four times
that: with 10 ms, flemu's encoder step read 1.00-1.04x the CPU's where a
program running only flemu's steps took 0.76-0.90x of one running only the
CPU's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

SETTLE_S = 0.04


def _settle(fn: Callable[[], object]) -> None:
    """Calls fn untimed, at least once and until SETTLE_S has passed."""
    end = time.perf_counter() + SETTLE_S
    fn()
    while time.perf_counter() < end:
        fn()


def _busy(seconds: float) -> None:
    """Keeps the host busy (not asleep) for `seconds`."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def interleaved(benchmark: Any, timed: Callable[[], object], baseline: Callable[[], object],
                label: str, rounds: int, warmup: int = 0, pause_s: float = 0.0,
                switch: Callable[[bool], object] | None = None) -> None:
    """Benchmarks `timed` against `baseline` round by round: the ratio of
    medians is reported under `label` (conftest.py). `warmup` untimed calls
    of each side come first. With `pause_s`, each timed call of either side
    follows its settling calls after the host has been busy elsewhere for
    that long. With `switch`, switch(True) runs before each turn of the timed
    side (its settling calls, then its timed call) and switch(False) before
    each turn of the baseline and once at the end, all untimed: what only the
    timed side runs under (a profiling session) is set up and taken down
    between the turns."""
    def turn(timed_side: bool) -> None:
        if switch is not None:
            switch(timed_side)

    if switch is None:
        for _ in range(warmup):
            baseline()
            timed()
    else:
        turn(False)
        for _ in range(warmup):
            baseline()
        turn(True)
        for _ in range(warmup):
            timed()
    times: list[float] = []

    def baseline_round() -> None:
        turn(False)
        _settle(baseline)
        _busy(pause_s)
        start = time.perf_counter()
        baseline()
        times.append(time.perf_counter() - start)
        turn(True)
        _settle(timed)
        _busy(pause_s)

    try:
        benchmark.pedantic(timed, setup=baseline_round, rounds=rounds, iterations=1)
    finally:
        turn(False)
    benchmark.extra_info.update(baseline=label, baseline_median_s=statistics.median(times))
