"""Starting ranks and collecting what they recorded (the test side), and the rank
side's entry: join the group, run a scenario, write its record.

Each rank is a fresh interpreter (a plugin does not survive fork()) that joins
one process group through a FileStore and records named checks ("ok" or the
failure with its traceback) and facts as JSON; tests assert on the records, so
one set of processes serves many test cases.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Rank", "RankResult", "Recorder", "main", "run_ranks"]


# ---------------------------------------------------------------------------
# The test side
# ---------------------------------------------------------------------------


@dataclass
class RankResult:
    rank: int
    returncode: int | None  # None: killed after the time limit
    checks: dict[str, str]  # check name -> "ok" or the failure
    info: dict[str, Any]
    output: str

    @property
    def status(self) -> str:
        if self.returncode is None:
            return "was killed after the time limit"
        return f"exited with {self.returncode}"

    def describe(self) -> str:
        return f"rank {self.rank} ({self.status}):\n{self.output[-4000:]}"


def run_ranks(
    program: Sequence[str],
    scenario: str,
    world: int,
    workdir: Path,
    time_limit: float = 120.0,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> list[RankResult]:
    """Starts `world` ranks of `program SCENARIO --rank R --world N --store S --out F
    ARGS`, waits up to `time_limit` seconds for all of them (then kills the rest,
    with their process groups), and returns one RankResult per rank.

    `program`: the interpreter and script (or -m module) of the rank side;
    `env`: the ranks' whole environment (default: this process's, without the
    variables pytest sets for its own process)."""
    workdir.mkdir(parents=True, exist_ok=True)
    store = workdir / "store"
    if store.exists():
        store.unlink()
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    procs = []
    for rank in range(world):
        out = workdir / f"rank{rank}.json"
        if out.exists():
            out.unlink()
        log = open(workdir / f"rank{rank}.log", "w")  # noqa: SIM115 - closed below
        cmd = [
            *program,
            scenario,
            "--rank",
            str(rank),
            "--world",
            str(world),
            "--store",
            str(store),
            "--out",
            str(out),
            *args,
        ]
        procs.append(
            (
                rank,
                out,
                log,
                subprocess.Popen(
                    cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                ),
            )
        )
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
        info: dict[str, Any] = {}
        if out.exists():
            data = json.loads(out.read_text())
            checks, info = data["checks"], data["info"]
        results.append(RankResult(rank, returncode, checks, info, output))
    return results


# ---------------------------------------------------------------------------
# The rank side
# ---------------------------------------------------------------------------


class Recorder:
    """Named checks and facts of one rank, written to its --out file."""

    def __init__(self) -> None:
        self.checks: dict[str, str] = {}
        self.info: dict[str, Any] = {}

    def check(self, name: str, fn: Callable[[], None]) -> None:
        start = time.perf_counter()
        try:
            fn()
            self.checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded for the test to report
            self.checks[name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        self.info.setdefault("seconds", {})[name] = round(time.perf_counter() - start, 3)

    def write(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"checks": self.checks, "info": self.info}, f)
        os.replace(tmp, path)


@dataclass
class Rank:
    """What a scenario gets: its rank, the group's size, its device, the store,
    its record, and the command line (scenario options included)."""

    rank: int
    world: int
    device: Any
    store: Any
    rec: Recorder
    args: argparse.Namespace
    extra: dict[str, Any] = field(default_factory=dict)


Scenario = Callable[[Rank], None]


def main(
    scenarios: dict[str, Scenario],
    argv: Sequence[str] | None = None,
    *,
    broken: Collection[str] = (),
    own_group: Collection[str] = (),
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """The rank side: parses the command line, registers the plugin when
    --library is given (else uses the one `import torch` autoloaded), joins the
    group (unless the scenario is in `own_group`), runs the scenario and writes
    its record. Scenarios in `broken` break the group on purpose: the rank leaves
    without the collective teardown."""
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(scenarios))
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=120.0, help="group timeout (s)")
    parser.add_argument("--device", default=None, help="device type (default: the accelerator)")
    parser.add_argument("--library", default=None, help="register the plugin from this library")
    parser.add_argument(
        "--backend", default=None, help="init_process_group backend (default cpu:gloo,<device>:tfl)"
    )
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)

    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if args.library:
        import torch_fl

        torch_fl.register_device_plugin(args.device, plugin_path=args.library)
    acc = torch.accelerator.current_accelerator()
    device_type = args.device or (acc.type if acc is not None else "cpu")
    dev = torch.device(device_type, args.rank % torch.accelerator.device_count())
    rec = Recorder()
    rank = Rank(args.rank, args.world, dev, None, rec, args)
    try:
        if args.scenario not in own_group:
            backend = args.backend or f"cpu:gloo,{device_type}:tfl"
            rank.store = dist.FileStore(args.store, args.world)
            dist.init_process_group(
                backend,
                store=rank.store,
                rank=args.rank,
                world_size=args.world,
                timeout=timedelta(seconds=args.timeout),
                device_id=dev if ":tfl" in backend else None,
            )
            rec.info["device"] = str(dev)
        scenarios[args.scenario](rank)
    finally:
        rec.write(args.out)
    if args.scenario in broken:
        sys.stdout.flush()
        os._exit(0)
    if args.scenario not in own_group:
        dist.destroy_process_group()
    return 0
