"""FSDP2 on flemu: torch.distributed.fsdp.fully_shard of a small MLP on 2
ranks (parameters sharded as DTensors on each rank's device, all_gather in
forward and backward, reduce_scatter of gradients) trains like a single
process on the CPU, without CPU fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from ranks import run_ranks


@pytest.mark.slow
def test_fully_shard_matches_single_process_training(tmp_path: Path) -> None:
    results = run_ranks("fsdp", 2, tmp_path, time_limit=120)
    for r in results:
        assert r.returncode == 0, r.describe()
    for r in results:
        shards = r.info["shards"]
        # Linear(32, 3): 3 rows over 2 ranks are split 2 + 1.
        assert shards["4.weight"] == [f"flemu:{r.rank}", [2 - r.rank, 32]], shards
        assert shards["0.weight"] == [f"flemu:{r.rank}", [16, 12]], shards
        for step, (loss, ref) in enumerate(zip(r.info["losses"], r.info["reference_losses"], strict=True)):
            assert abs(loss - ref) <= 1e-5 * abs(ref), f"rank {r.rank}, step {step}: FSDP loss {loss}, CPU {ref}"
        assert r.info["cpu_fallbacks"] == [], f"rank {r.rank}: training fell back to the CPU: {r.info['cpu_fallbacks']}"
        assert r.info["changed_from_init"] > 1e-2, r.info["changed_from_init"]
        assert r.info["max_param_error"] <= 1e-5, (
            f"rank {r.rank}: parameters after {r.info['steps']} steps differ from single-process training by up "
            f"to {r.info['max_param_error']:.2e}: {r.info['param_errors']}")
