"""torchrun works unchanged on flemu: torchrun_ddp.py (a plain DDP script that
names no backend, only device_id=) launched by `python -m torch.distributed.run
--standalone --nproc_per_node 2` trains like a single process on the CPU.
A group made with no arguments at all is tested in test_process_group.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent / "torchrun_ddp.py"
_run: list[dict[str, Any]] = []


def torchrun(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What each rank of the torchrun launch recorded (launched once)."""
    if not _run:
        out = tmp_path_factory.mktemp("torchrun") / "rank"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(SCRIPT), str(out)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"torchrun did not finish in 120 s:\n{exc.stdout}\n{exc.stderr}", pytrace=False)
        assert r.returncode == 0, f"torchrun exited with {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
        for rank in range(2):
            path = Path(f"{out}.{rank}")
            assert path.exists(), f"rank {rank} wrote nothing:\n{r.stderr[-5000:]}"
            _run.append(json.loads(path.read_text()))
    return _run


@pytest.mark.slow
def test_torchrun_group_uses_the_device_backend(tmp_path_factory: pytest.TempPathFactory) -> None:
    for rank, info in enumerate(torchrun(tmp_path_factory)):
        assert info["device"] == f"flemu:{rank}", info
        assert info["world"] == 2, info
        assert info["backend"] == "tfl", info
        assert info["all_reduce"] == [3.0], f"rank {rank}: all_reduce of 1 and 2 gave {info['all_reduce']}"


@pytest.mark.slow
def test_torchrun_ddp_matches_single_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    ranks = torchrun(tmp_path_factory)
    for rank, info in enumerate(ranks):
        assert "error" not in info, f"rank {rank}: DDP training raised {info['error']}"
        assert info["param_device"] == f"flemu:{rank}", info
    zero = ranks[0]
    assert ranks[1]["digest"] == zero["digest"], "the ranks ended with different parameters"
    # Equal shards: the whole batch's loss is the mean of the ranks' losses.
    for step, ref in enumerate(zero["reference_losses"]):
        loss = (zero["losses"][step] + ranks[1]["losses"][step]) / 2
        assert abs(loss - ref) <= 1e-5 * abs(ref), f"step {step}: DDP loss {loss}, single-process loss {ref}"
    assert zero["changed_from_init"] > 1e-2, f"training did not move the parameters: {zero['changed_from_init']}"
    assert zero["max_param_error"] <= 1e-5, (
        f"parameters differ from single-process training by up to {zero['max_param_error']:.2e}")
