"""The bridge's CMake configuration follows the torch it builds against: the
C++ standard is C++20 from torch 2.14 (whose headers #error below it) and C++17
before, and the torch release is what the built package records."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is needed to configure the bridge (requirements-dev.txt installs it)")
    return found


def test_cmake_picks_the_cxx_standard_of_the_running_torch(tmp_path: Path) -> None:
    proc = subprocess.run(
        [_tool("cmake"), "-S", str(ROOT), "-B", str(tmp_path), "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", f"-DPython_EXECUTABLE={sys.executable}"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"torch (\S+) at .*: C\+\+(\d+)", proc.stdout)
    assert found, proc.stdout
    expected = "20" if torch.__version__ >= (2, 14) else "17"
    assert found.groups() == (torch.__version__, expected), (found.groups(), torch.__version__)
    flags = set(re.findall(r"-std=\S+", (tmp_path / "build.ninja").read_text()))
    assert flags == {f"-std=gnu++{expected}"}, flags


def test_the_installed_bridge_records_the_running_torch() -> None:
    from torch_fl._build_info import TORCH_VERSION

    assert TORCH_VERSION == torch.__version__, (TORCH_VERSION, torch.__version__)
