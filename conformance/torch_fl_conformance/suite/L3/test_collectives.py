"""L3 collectives: the plugin's torch.distributed backend on ranks spawned on loopback.

Each rank is a fresh interpreter running ``python -m torch_fl_conformance.ranks``
(the harness the project's distributed tests share): it registers the plugin
under test by its library path, joins a ``"cpu:gloo,<device>:tfl"`` group with
``device_id=`` (rendezvous through a FileStore) and records named checks as JSON.
One set of ranks per world size (2 and 4) serves every test of the module.

- **TFL-COLL-001** ``test_collective[<name>]``: all_reduce with every reduce op
  on the dtypes the plugin advertises (float32 and int64 always; float64,
  float16, bfloat16 with their capabilities), counts below the world size and
  uneven ones, async work + wait; all_gather and reduce_scatter in list form
  (uneven sizes) and into/from one tensor (out of place); broadcast from the
  first and the last rank; all_to_all with even and uneven splits; blocking
  send/recv and an isend/irecv ring; barrier, blocking and async. Expected
  values are computed on the host from small integers (exact in every dtype).
- **TFL-COLL-002** ``test_ddp_parity``: the zoo's LSTM language model trained
  for three steps with DistributedDataParallel on 2 ranks, each on half of
  every batch, against single-process CPU training on the whole batch (the
  dropout masks recorded on the device are replayed on the CPU): losses within
  1e-3 relative, parameters within 1e-3 absolute.
- **TFL-COLL-003** ``test_timeout_is_an_error``: on 2 ranks with a 3 s group
  timeout, rank 0 enters an all_reduce that rank 1 never joins; it must raise a
  torch.distributed error naming the operation and rank 1 after 3 s (not
  before, and within 10 s more). ``test_dead_rank_is_an_error``: rank 0 is
  killed once the communicator is up while rank 1 enters an all_reduce; with a
  60 s group timeout rank 1 must raise such an error naming rank 0 within
  20 s. The ranks of both are bounded by subprocess time limits, so a hang
  fails the test instead of stalling the run.

A rank that fails to start, crashes or outlives its time limit fails the tests
that needed it, with its output.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch_fl_conformance.ranks.harness import RankResult, run_ranks

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv", "barrier"]
WORLDS = (2, 4)
RANK_TIME_LIMIT = 240.0
PROGRAM = (sys.executable, "-m", "torch_fl_conformance.ranks")
_runs: dict[tuple[str, int], list[RankResult]] = {}


# ---------------------------------------------------------------------------
# The tests (run by pytest)
# ---------------------------------------------------------------------------


def _dtypes(target: Any) -> list[str]:
    extra = [d for d, cap in (("float64", "fp64"), ("float16", "fp16"), ("bfloat16", "bf16"))
             if target.has(cap)]
    return ["float32", "int64", *extra]


def _spawn(target: Any, scenario: str, world: int, workdir: Path,
           time_limit: float = RANK_TIME_LIMIT, group_timeout: float = 120.0,
           args: tuple[str, ...] = ()) -> list[RankResult]:
    """Runs `scenario` on `world` ranks of the plugin under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the ranks register the plugin under test
    return run_ranks(PROGRAM, scenario, world, workdir, time_limit, env, args=[
        "--device", target.device_type, "--library", target.library,
        "--dtypes", ",".join(_dtypes(target)), "--timeout", str(group_timeout), *args])


def _ranks(target: Any, scenario: str, world: int,
           tmp_path_factory: pytest.TempPathFactory) -> list[RankResult]:
    key = (scenario, world)
    if key not in _runs:
        _runs[key] = _spawn(target, scenario, world, tmp_path_factory.mktemp(f"{scenario}{world}"))
    for r in _runs[key]:
        if r.returncode != 0:
            pytest.fail(f"{scenario}, world {world}: rank {r.rank} {r.status}:\n"
                        f"{r.output[-3000:]}", pytrace=False)
    return _runs[key]


@pytest.mark.requirement("TFL-COLL-001")
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_collective(collective: str, target: Any, tmp_path_factory: pytest.TempPathFactory,
                    record: Callable[[str, Any], None]) -> None:
    failures, ran = [], 0
    for world in WORLDS:
        for r in _ranks(target, "collectives", world, tmp_path_factory):
            mine = {k: v for k, v in r.checks.items() if k.split("[")[0] == collective}
            if not mine:
                failures.append(f"world {world}, rank {r.rank}: no {collective} check ran")
            ran += len(mine)
            failures += [f"world {world}, rank {r.rank}, {k}: {v}" for k, v in mine.items()
                         if v != "ok"]
    record("checks", ran)
    assert not failures, f"{len(failures)} of {ran} checks failed:\n" + "\n".join(failures[:10])


@pytest.mark.requirement("TFL-COLL-002")
def test_ddp_parity(target: Any, tmp_path_factory: pytest.TempPathFactory,
                    record: Callable[[str, Any], None]) -> None:
    results = _ranks(target, "ddp", 2, tmp_path_factory)
    failed = {f"rank {r.rank}": r.checks.get("ddp", "not run") for r in results}
    assert all(v == "ok" for v in failed.values()), failed
    info = results[0].info
    record("losses", info["losses"])
    record("max_param_error", info["max_param_error"])
    assert results[1].info["digest"] == info["digest"], "the ranks ended with different parameters"
    for step, (loss, ref) in enumerate(zip(info["losses"], info["reference_losses"], strict=True)):
        assert abs(loss - ref) <= 1e-3 * abs(ref), f"step {step}: DDP loss {loss}, single-process loss {ref}"
    assert info["changed_from_init"] > 1e-4, f"training did not move the parameters: {info['changed_from_init']}"
    assert info["max_param_error"] <= 1e-3, (
        f"parameters after {len(info['losses'])} steps differ from single-process training by up to "
        f"{info['max_param_error']:.2e} (allowed 1e-3)")


def _failed_collective(results: list[RankResult], rank: int, case: str) -> dict[str, Any]:
    """What rank `rank` recorded about the all_reduce meant to fail; fails
    the test if the rank hung, crashed or returned normally."""
    r = results[rank]
    if r.returncode is None:
        pytest.fail(f"{case}: rank {rank} hung (killed after the time limit):\n{r.output}",
                    pytrace=False)
    if r.returncode != 0 or "seconds" not in r.info:
        pytest.fail(f"{case}: rank {rank} exited with {r.returncode} before reporting:\n"
                    f"{r.output}", pytrace=False)
    info = r.info
    assert "error" in info, f"{case}: rank {rank}'s all_reduce returned normally after {info['seconds']:.1f} s"
    assert info["dist_error"], (
        f"{case}: rank {rank} raised {info['error_type']}, not a torch.distributed error (DistError): "
        f"{info['error']}")
    assert "all_reduce" in info["error"], f"{case}: the error does not name the operation: {info['error']}"
    return info


def _names_rank(message: str, rank: int) -> bool:
    return re.search(rf"\brank\W{{0,3}}{rank}\b", message, re.IGNORECASE) is not None


@pytest.mark.requirement("TFL-COLL-003")
def test_timeout_is_an_error(target: Any, tmp_path_factory: pytest.TempPathFactory,
                             record: Callable[[str, Any], None]) -> None:
    group_timeout = 3.0
    results = _spawn(target, "timeout", 2, tmp_path_factory.mktemp("timeout2"), time_limit=90,
                     group_timeout=group_timeout)
    if results[1].returncode != 0:
        pytest.fail(f"rank 1 (waiting on the store) exited with {results[1].returncode}:\n"
                    f"{results[1].output}", pytrace=False)
    info = _failed_collective(results, 0, "all_reduce rank 1 never joins")
    record("seconds", round(info["seconds"], 2))
    record("error", info["error"][:500])
    assert info["seconds"] >= 0.9 * group_timeout, (
        f"the all_reduce failed after {info['seconds']:.2f} s, before the {group_timeout:g} s group timeout: "
        f"{info['error']}")
    assert info["seconds"] <= group_timeout + 10, (
        f"the all_reduce failed only after {info['seconds']:.1f} s (group timeout {group_timeout:g} s)")
    assert _names_rank(info["error"], 1), f"the error does not name rank 1, which never joined: {info['error']}"


@pytest.mark.requirement("TFL-COLL-003")
def test_dead_rank_is_an_error(target: Any, tmp_path_factory: pytest.TempPathFactory,
                               record: Callable[[str, Any], None]) -> None:
    # Rank 0 dies: in most libraries it also hosts the communicator's rendezvous.
    group_timeout = 60.0
    results = _spawn(target, "dead_rank", 2, tmp_path_factory.mktemp("dead_rank2"),
                     time_limit=group_timeout + 30, group_timeout=group_timeout,
                     args=("--victim", "0"))
    assert results[0].returncode not in (0, None), (
        f"rank 0 was to kill itself but exited with {results[0].returncode}:\n"
        f"{results[0].output}")
    info = _failed_collective(results, 1, "all_reduce with rank 0 dead")
    record("seconds", round(info["seconds"], 2))
    record("error", info["error"][:500])
    assert info["seconds"] <= 20, (
        f"rank 1 took {info['seconds']:.1f} s to fail (group timeout {group_timeout:g} s): a dead peer must be "
        "noticed, not waited out")
    assert _names_rank(info["error"], 0), f"the error does not name rank 0, which died: {info['error']}"
