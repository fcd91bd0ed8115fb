"""all_reduce of float32 tensors, flemu (the tfl backend on device tensors)
against gloo (CPU tensors), 1-64 MiB, 2 and 4 ranks on this machine.

This process is rank 0 of a "cpu:gloo,flemu:tfl" group; the other ranks are
fresh interpreters (tests/distributed/scenarios.py, scenario "bench_peer")
that run whatever rank 0 announces: before each benchmark rank 0 broadcasts
(backend, elements, calls) through gloo, then times each call with
pytest-benchmark. Each flemu benchmark names the gloo one of the same size
and world as its baseline, so the ratio of medians (flemu time / gloo time;
target <= 1.0 at 64 MiB) is printed at the end of the run and written to
.benchmarks/ratios.json. Bus bandwidth, 2(n-1)/n x bytes / time (the ring's
traffic per rank), is in each benchmark's extra_info and in
.benchmarks/allreduce.json. Nothing fails on a time.

flemu takes its same-host shared-memory path for messages of 256 KiB and
more; `FLEMU_COMM_SHM=0 pytest bench/test_allreduce.py` measures its TCP
transport instead (what ranks on different hosts use).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from _report import row

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "distributed" / "scenarios.py"
DEVICE = "flemu"
SIZES_MIB = [1, 4, 16, 64]
WORLDS = [2, 4]
BACKENDS = {"gloo": 0, "flemu": 1}
_rows: dict[str, dict[str, Any]] = {}


class Group:
    """This process as rank 0 of `world` ranks; the peers follow its commands."""

    def __init__(self, world: int, workdir: Path) -> None:
        self.world = world
        store_path = workdir / "store"
        env = {**os.environ, "TORCH_FL_FALLBACK": "silent"}
        self.logs = [workdir / f"rank{r}.log" for r in range(1, world)]
        self.procs = []
        for r in range(1, world):
            cmd = [sys.executable, str(SCENARIOS), "bench_peer", "--rank", str(r), "--world", str(world),
                   "--store", str(store_path), "--out", str(workdir / f"rank{r}.json"), "--timeout", "300"]
            with open(self.logs[r - 1], "w") as log:
                self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True))
        self.device = torch.device(DEVICE, 0)
        dist.init_process_group(f"cpu:gloo,{DEVICE}:tfl", store=dist.FileStore(str(store_path), world), rank=0,
                                world_size=world, timeout=timedelta(seconds=300), device_id=self.device)

    def announce(self, backend: str, numel: int, calls: int) -> torch.Tensor:
        """Tells the peers what to run; returns rank 0's tensor for it."""
        dist.broadcast(torch.tensor([BACKENDS[backend], numel, calls]), src=0)
        target = self.device if backend == "flemu" else torch.device("cpu")
        return torch.ones(numel, device=target)

    def close(self) -> None:
        try:
            dist.broadcast(torch.tensor([-1, 0, 0]), src=0)
            dist.destroy_process_group()
        finally:
            for proc, log in zip(self.procs, self.logs, strict=True):
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise AssertionError(f"a peer rank did not exit:\n{log.read_text()[-3000:]}") from None
                assert proc.returncode == 0, f"peer rank exited with {proc.returncode}:\n{log.read_text()[-3000:]}"


@pytest.fixture(scope="module", params=WORLDS, ids=lambda w: f"{w}ranks")
def group(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    g = Group(request.param, tmp_path_factory.mktemp(f"allreduce{request.param}"))
    try:
        yield g
    finally:
        g.close()


def _record(name: str, row: dict[str, Any]) -> None:
    # Keyed by transport too, so a TCP run and a default run sit side by side.
    out = ROOT / ".benchmarks" / "allreduce.json"
    if not _rows and out.exists():
        _rows.update(json.loads(out.read_text()))
    _rows[f"{name}/{row['transport']}"] = row
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(_rows, indent=2))


# gloo before flemu for each size, so every flemu benchmark finds its baseline.
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("mib", SIZES_MIB, ids=lambda m: f"{m}MiB")
def test_all_reduce(benchmark: Any, group: Group, mib: int, backend: str) -> None:
    nbytes = mib << 20
    rounds = max(5, min(20, 64 // mib))
    warmup = 2  # connections, scratch buffers, the shared-memory mappings
    t = group.announce(backend, nbytes // 4, rounds + warmup)

    if backend == "flemu":
        def call() -> None:
            dist.all_reduce(t)
            torch.accelerator.synchronize(group.device)

        world_id = f"{group.world}ranks"
        benchmark.extra_info.update(baseline=f"test_all_reduce[{world_id}-{mib}MiB-gloo]")
        row(benchmark, f"all_reduce, {group.world} flemu ranks vs gloo", f"{mib} MiB",
            1.0 if mib == 64 else None)
    else:
        def call() -> None:
            dist.all_reduce(t)

    benchmark.pedantic(call, rounds=rounds, warmup_rounds=warmup, iterations=1)
    median = benchmark.stats.stats.median
    busbw = 2 * (group.world - 1) / group.world * nbytes / median / 1e9
    benchmark.extra_info["busbw_gbps"] = round(busbw, 3)
    _record(benchmark.name, {"world": group.world, "backend": backend, "mib": mib,
                             "transport": "tcp" if os.environ.get("FLEMU_COMM_SHM") == "0" else "default",
                             "median_ms": median * 1e3, "busbw_gbps": busbw})
    # Every call summed `world` ones (the peers' tensors are ones as well).
    assert t[:4].cpu().tolist() == [float(group.world ** (rounds + warmup))] * 4
