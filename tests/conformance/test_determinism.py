"""Verdicts are deterministic: two certifications of the same slice back to back,
with two workers each (so chunks land on workers differently), give the same
outcome for every test. The slice holds the operator whose unsynchronized
non_blocking read once flipped its verdict (`to`), operators with in-place, out=
and mutated-input checks, random operators, and the timing-based stream checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_report, outcomes_of, run_cli

pytestmark = pytest.mark.slow

OPS = ("to,add,mul,sub,sum,exp,softmax,nn.functional.gelu,nn.functional.batch_norm,mm,"
       "index_put,where,nn.functional.dropout,bernoulli,cumsum,sort")
K = "test_opinfo or test_streams or test_rng or test_modules"


def test_identical_runs_give_identical_outcomes(tmp_path: Path, flemu_library: str) -> None:
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        r = run_cli("run", "--plugin", "flemu", "--level", "L1", "--ops", OPS, "--report",
                    str(out), "-j", "2", "--", "-k", K, timeout=900)
        assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
        runs.append(outcomes_of(load_report(out)))
    first, second = runs
    assert len(first) > 150, len(first)
    assert first.keys() == second.keys(), set(first) ^ set(second)
    changed = {t: (first[t], second[t]) for t in first if first[t] != second[t]}
    assert not changed, f"{len(changed)} tests changed outcome between identical runs: " \
        f"{dict(list(changed.items())[:10])}"
