"""Failures through torch.distributed: a collective a peer never joins times
out with an error, a rank that is killed makes the others raise naming it, an
abort on one rank ends the others' wait, ranks passing different sizes all
raise naming the operation — errors, never hangs."""

from __future__ import annotations

from pathlib import Path

import pytest
from ranks import run_ranks


@pytest.mark.slow
def test_timeout_raises_within_the_group_timeout(tmp_path: Path) -> None:
    results = run_ranks("timeout", 2, tmp_path, time_limit=90, args=["--timeout", "3"])
    for r in results:
        assert r.returncode == 0, r.describe()
    info = results[0].info
    assert "error" in info, f"rank 0's all_reduce with no partner returned normally: {info}\n{results[0].describe()}"
    assert info["error_type"] == "DistBackendError", info
    assert "TFL_ERR_TIMEOUT" in info["error"] and "timed out after 3000 ms" in info["error"], info["error"]
    assert "rank 1" in info["error"], f"the message does not name the missing rank: {info['error']}"
    assert 2.5 <= info["seconds"] < 15, f"the timeout (3 s) fired after {info['seconds']:.1f} s"


@pytest.mark.slow
@pytest.mark.parametrize(("world", "victim"), [(2, 0), (3, 2)], ids=["rank0-of-2", "rank2-of-3"])
def test_dead_rank_makes_the_others_fail(tmp_path: Path, world: int, victim: int) -> None:
    # Rank 0 hosts the rendezvous of the communicator: its death is the other
    # interesting case.
    results = run_ranks("dead_rank", world, tmp_path, time_limit=90,
                        args=["--timeout", "60", "--victim", str(victim)])
    assert results[victim].returncode != 0, f"rank {victim} was supposed to be killed: {results[victim].describe()}"
    for r in results:
        if r.rank == victim:
            continue
        assert r.returncode == 0, r.describe()
        assert "error" in r.info, f"rank {r.rank} finished an all_reduce with a dead peer: {r.info}"
        assert r.info["error_type"] == "DistBackendError", r.info
        assert f"rank {victim} disconnected" in r.info["error"], r.info["error"]
        # The group timeout is 60 s: the failure is noticed, not waited out.
        assert r.info["seconds"] < 15, f"rank {r.rank} took {r.info['seconds']:.1f} s to notice the dead rank"


@pytest.mark.slow
def test_abort_ends_the_others_wait(tmp_path: Path) -> None:
    results = run_ranks("abort", 2, tmp_path, time_limit=90, args=["--timeout", "60"])
    for r in results:
        assert r.returncode == 0, r.describe()
    assert results[0].info["abort_seconds"] < 2, results[0].info
    for r in results[1:]:
        assert "error" in r.info, f"rank {r.rank} finished an all_reduce after rank 0 aborted: {r.info}"
        assert "aborted" in r.info["error"] and "TFL_ERR_ABORTED" in r.info["error"], r.info["error"]
        assert r.info["seconds"] < 15, f"rank {r.rank} took {r.info['seconds']:.1f} s to notice the abort"


@pytest.mark.slow
def test_mismatched_sizes_fail_on_every_rank(tmp_path: Path) -> None:
    # 64 vs 128 bytes; comm_check.cpp runs the same mismatch on each transport.
    results = run_ranks("mismatch", 2, tmp_path, time_limit=90, args=["--timeout", "60", "--elements", "16,32"])
    for r in results:
        assert r.returncode == 0, r.describe()
        assert "error" in r.info, f"rank {r.rank} finished an all_reduce of mismatched sizes: {r.info}"
        assert r.info["error_type"] == "DistBackendError", r.info
        err = r.info["error"]
        # The group's first operation was a barrier, so this all_reduce is #2.
        assert "TFL_ERR_INVALID_ARGUMENT" in err and "all_reduce #2" in err, err
        assert "different counts or dtypes" in err, err
        assert f"rank {1 - r.rank}" in err, f"the message does not name the other rank: {err}"
        assert r.info["seconds"] < 15, f"rank {r.rank} took {r.info['seconds']:.1f} s to fail"
