"""flemu's Philox4x32-10 generator against the published known-answer vectors
(built from the header alone, no library or torch needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_philox_known_answers(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.fail("g++ is needed to build tests/philox_check.cpp")
    binary = tmp_path / "philox_check"
    cmd = [compiler, "-std=c++17", "-O1", "-Wall", "-Wextra", str(TESTS / "philox_check.cpp"), "-o", str(binary)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0 and build.stderr == "", f"{' '.join(cmd)}:\n{build.stderr}"
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.strip().endswith("checks, 0 failures"), proc.stdout
