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


def _configure(build_dir: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_tool("cmake"), "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", f"-DPython_EXECUTABLE={sys.executable}", *defines],
        capture_output=True, text=True, timeout=300)


def test_cmake_picks_the_cxx_standard_of_the_running_torch(tmp_path: Path) -> None:
    proc = _configure(tmp_path)
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


@pytest.mark.parametrize("mode", ["generate", "use"])
def test_cmake_sets_the_profile_guided_flags(tmp_path: Path, mode: str) -> None:
    """`make build`'s two profile-guided builds: both name profile files after
    the object paths under their own build dir, so an instrumented build in one
    dir trains the optimized build in another."""
    build, profile = tmp_path / "build", tmp_path / "profile"
    proc = _configure(build, f"-DTORCH_FL_PGO={mode}", f"-DTORCH_FL_PGO_DIR={profile}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    compiler = next(build.glob("CMakeFiles/*/CMakeCXXCompiler.cmake")).read_text()
    ninja = (build / "build.ninja").read_text()
    if 'set(CMAKE_CXX_COMPILER_ID "GNU")' not in compiler:
        assert "profile-guided optimization is set up for GCC" in proc.stderr, proc.stderr
        assert "-fprofile-" not in ninja
        return
    expected = {
        "generate": {f"-fprofile-generate={profile}", "-fprofile-update=atomic"},
        "use": {f"-fprofile-use={profile}", "-fprofile-partial-training", "-Wmissing-profile"},
    }[mode] | {f"-fprofile-prefix-path={build}"}
    flags = set(re.findall(r"-fprofile-\S+|-Wmissing-profile", ninja))
    assert flags == expected | ({"-fprofile-generate"} if mode == "generate" else set()), flags


def test_cmake_refuses_an_unknown_profile_mode(tmp_path: Path) -> None:
    proc = _configure(tmp_path, "-DTORCH_FL_PGO=on")
    assert proc.returncode != 0, proc.stdout
    assert "TORCH_FL_PGO is 'on': set it to generate or use" in proc.stderr, proc.stderr
