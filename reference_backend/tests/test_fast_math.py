"""flemu's vectorizable float32 exp and erf (support/fast_math.h, used by gelu
and softmax) against libm in double over their whole ranges (built from the
header alone)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_fast_exp_and_erf_against_libm(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.fail("g++ is needed to build tests/fast_math_check.cpp")
    binary = tmp_path / "fast_math_check"
    # Optimized as flemu builds its users (CMakeLists.txt): the loops vectorize, the values must not change.
    cmd = [compiler, "-std=c++17", "-O3", "-fno-trapping-math", "-Wall", "-Wextra",
           str(TESTS / "fast_math_check.cpp"), "-o", str(binary)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0 and build.stderr == "", f"{' '.join(cmd)}:\n{build.stderr}"
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.strip().endswith("checks, 0 failures"), proc.stdout
