"""Runs a scenario of scenarios.py in WORLD fresh interpreters (one per rank,
rendezvous through a FileStore) and collects what each rank reported.

Fresh interpreters, never fork: the plugin does not survive fork()."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios.py"


@dataclass
class RankResult:
    rank: int
    returncode: int | None  # None: killed after the time limit
    checks: dict[str, str]  # check name -> "ok" or the failure
    info: dict[str, object]
    output: str

    def describe(self) -> str:
        return f"rank {self.rank} (exit status {self.returncode}):\n{self.output[-4000:]}"


def run_ranks(scenario: str, world: int, workdir: Path, time_limit: float = 120.0,
              env: dict[str, str] | None = None, args: list[str] | None = None) -> list[RankResult]:
    """Starts every rank, waits up to `time_limit` seconds for all of them,
    kills the rest, and returns one RankResult per rank."""
    workdir.mkdir(parents=True, exist_ok=True)
    store = workdir / "store"
    if store.exists():
        store.unlink()
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("FLEMU_COMM")}
    child_env.update(env or {})
    child_env.setdefault("TORCH_FL_FALLBACK", "silent")
    procs = []
    for rank in range(world):
        out = workdir / f"rank{rank}.json"
        log = open(workdir / f"rank{rank}.log", "w")  # noqa: SIM115 - closed below
        cmd = [sys.executable, str(SCENARIOS), scenario, "--rank", str(rank), "--world", str(world),
               "--store", str(store), "--out", str(out), *(args or [])]
        procs.append((rank, out, log, subprocess.Popen(cmd, env=child_env, stdout=log, stderr=subprocess.STDOUT,
                                                        start_new_session=True)))
    deadline = time.monotonic() + time_limit
    results = []
    for rank, out, log, proc in procs:
        try:
            returncode: int | None = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            returncode = None
        log.close()
        output = (workdir / f"rank{rank}.log").read_text(errors="replace")
        checks: dict[str, str] = {}
        info: dict[str, object] = {}
        if out.exists():
            data = json.loads(out.read_text())
            checks, info = data["checks"], data["info"]
        results.append(RankResult(rank, returncode, checks, info, output))
    return results
