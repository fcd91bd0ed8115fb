"""flemu's communication library through the plugin ABI alone (no torch):
comm_check.cpp forks WORLD processes before the plugin initializes and checks
every collective, reduce op and dtype against values it computes itself,
then the failure paths: a timeout, a rank that dies, an abort, ranks that call
different collectives."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import flemu
import pytest
import torch_fl

SOURCE = Path(__file__).resolve().parent / "comm_check.cpp"


@pytest.fixture(scope="module")
def comm_check(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.fail("g++ is needed to build tests/distributed/comm_check.cpp")
    binary = tmp_path_factory.mktemp("comm_check") / "comm_check"
    cmd = [compiler, "-std=c++17", "-O1", "-Wall", "-Wextra", f"-I{torch_fl.get_include()}", str(SOURCE),
           "-o", str(binary), "-ldl", "-pthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"building comm_check failed ({' '.join(cmd)}):\n{proc.stderr}"
    assert proc.stderr == "", f"comm_check builds with warnings:\n{proc.stderr}"
    return binary


def run(binary: Path, mode: str, world: int, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("FLEMU_")}
    child_env.update(env or {})
    return subprocess.run([str(binary), flemu.library_path(), mode, str(world)], capture_output=True, text=True, check=False,
                          env=child_env, timeout=timeout)


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit status {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_collective_op_and_dtype(comm_check: Path, world: int) -> None:
    # World 3 takes the non-power-of-two fold of recursive doubling.
    proc = run(comm_check, "correctness", world)
    assert proc.returncode == 0, describe(proc)
    assert f"comm_check correctness world {world}: ok" in proc.stdout, describe(proc)


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"FLEMU_COMM_SHM": "0"}, {"FLEMU_COMM_SHM_MIN_BYTES": "0"}],
                         ids=["tcp-only", "shared-memory-always"])
def test_each_transport_alone(comm_check: Path, env: dict[str, str]) -> None:
    # By default operations below 256 KiB go over TCP and larger ones through
    # shared memory; here every size takes one path.
    proc = run(comm_check, "correctness", 3, env=env)
    assert proc.returncode == 0, describe(proc)


@pytest.mark.slow
def test_ring_and_tree_thresholds_forced(comm_check: Path) -> None:
    # Everything through the ring / chain, then everything through recursive
    # doubling / the binomial tree.
    for env in ({"FLEMU_COMM_SMALL_ALLREDUCE": "0", "FLEMU_COMM_SMALL_BROADCAST": "0", "FLEMU_COMM_SHM": "0"},
                {"FLEMU_COMM_SMALL_ALLREDUCE": "64M", "FLEMU_COMM_SMALL_BROADCAST": "64M", "FLEMU_COMM_SHM": "0"}):
        proc = run(comm_check, "correctness", 3, env=env)
        assert proc.returncode == 0, f"{env}\n{describe(proc)}"


TRANSPORTS = {"default": {}, "tcp-only": {"FLEMU_COMM_SHM": "0"}, "shared-memory-always": {"FLEMU_COMM_SHM_MIN_BYTES": "0"}}


@pytest.mark.slow
@pytest.mark.parametrize("transport", list(TRANSPORTS))
@pytest.mark.parametrize("mode,world", [("timeout", 2), ("dead-rank", 3), ("abort", 3), ("mismatch", 2)])
def test_failures_are_errors_not_hangs(comm_check: Path, mode: str, world: int, transport: str) -> None:
    # Each failure through each transport: the messages (operation numbers
    # included) must not depend on which one carried the operation.
    proc = run(comm_check, mode, world, env=TRANSPORTS[transport], timeout=60)
    assert proc.returncode == 0, describe(proc)
