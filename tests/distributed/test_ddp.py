"""DistributedDataParallel on flemu: the zoo's LSTM language model trained on
2 ranks, each on half of every batch, matches single-process CPU training on
the whole batch."""

from __future__ import annotations

from pathlib import Path

import pytest
from ranks import run_ranks


@pytest.mark.slow
def test_ddp_matches_single_process_training(tmp_path: Path) -> None:
    results = run_ranks("ddp", 2, tmp_path, time_limit=240)
    for r in results:
        assert r.returncode == 0, r.describe()
        assert r.checks.get("ddp") == "ok", f"rank {r.rank}: {r.checks.get('ddp', 'not run')}"
    info = results[0].info
    assert results[1].info["digest"] == info["digest"], "the ranks ended with different parameters"
    for step, (loss, ref) in enumerate(zip(info["losses"], info["reference_losses"], strict=True)):
        assert abs(loss - ref) <= 1e-3 * abs(ref), f"step {step}: DDP loss {loss}, single-process loss {ref}"
    assert info["changed_from_init"] > 1e-4, f"training did not move the parameters: {info['changed_from_init']}"
    assert info["max_param_error"] <= 1e-4, (
        f"parameters after {info['steps']} steps differ from single-process training by up to "
        f"{info['max_param_error']:.2e}: {info['param_errors']}")
