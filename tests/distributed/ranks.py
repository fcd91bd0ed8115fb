"""Runs a scenario of scenarios.py in WORLD fresh interpreters (one per rank,
rendezvous through a FileStore) with the conformance suite's multi-rank harness,
and collects what each rank reported."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torch_fl_conformance.ranks.harness import RankResult
from torch_fl_conformance.ranks.harness import run_ranks as _run_ranks

__all__ = ["RankResult", "run_ranks"]

SCENARIOS = Path(__file__).resolve().parent / "scenarios.py"


def run_ranks(scenario: str, world: int, workdir: Path, time_limit: float = 120.0,
              env: dict[str, str] | None = None, args: list[str] | None = None) -> list[RankResult]:
    """Starts every rank of `scenario` (flemu autoloaded, the communication
    settings of this process left out), waits up to `time_limit` seconds."""
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("FLEMU_COMM", "PYTEST_"))}
    child_env.update(env or {})
    child_env.setdefault("TORCH_FL_FALLBACK", "silent")
    return _run_ranks((sys.executable, str(SCENARIOS)), scenario, world, workdir, time_limit,
                      child_env, args or ())
