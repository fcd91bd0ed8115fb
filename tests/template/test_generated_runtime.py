"""The generated plugin's host-memory emulation keeps the ABI's contract, checked
through TFL_GetPluginApi alone (runtime_check.c, no torch): options, refusals,
memory bookkeeping, copies, stream order through events, kernels, fork, teardown."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch_fl
from template_project import compile_library, generate

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def runtime_check(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = shutil.which("gcc")
    assert gcc is not None, "gcc is needed to build runtime_check.c"
    out = tmp_path_factory.mktemp("runtime_check") / "runtime_check"
    cmd = [
        gcc,
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{torch_fl.get_include()}",
        str(HERE / "runtime_check.c"),
        "-ldl",
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_runtime_keeps_the_abi_contract(runtime_check: Path, tmp_path: Path) -> None:
    # A renamed project, so the check also sees the answers reach the C sources.
    project = generate(tmp_path, device_name="rocket", c_prefix="RKT")
    lib = compile_library(project, tmp_path / "librocket.so")
    proc = subprocess.run(
        [str(runtime_check), str(lib), "RKT"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("PASS"), (
        f"runtime_check failed (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    )
