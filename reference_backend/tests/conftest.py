"""Fixtures shared by flemu's own tests: the library under test, the ABI-level
test programs built from this folder's C++ sources, and how to run them."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import flemu

TESTS = Path(__file__).resolve().parent
INCLUDE = TESTS.parents[1] / "sdk" / "include"


@pytest.fixture(scope="session")
def library() -> str:
    return flemu.library_path()


@pytest.fixture(scope="session")
def build_program(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Builds tests/<name>.cpp (with abi_driver.h, or a header of flemu's own)
    once per session and per set of optimization flags, warning-free."""
    built: dict[tuple[str, tuple[str, ...]], Path] = {}

    def build(name: str, optimize: tuple[str, ...] = ("-O1",)) -> Path:
        if (name, optimize) in built:
            return built[(name, optimize)]
        compiler = shutil.which("g++")
        if compiler is None:
            pytest.fail(f"g++ is needed to build tests/{name}.cpp")
        binary = tmp_path_factory.mktemp(name) / name
        cmd = [compiler, "-std=c++17", *optimize, "-Wall", "-Wextra", f"-I{INCLUDE}", str(TESTS / f"{name}.cpp"),
               "-o", str(binary), "-ldl", "-pthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"building {name} failed ({' '.join(cmd)}):\n{proc.stderr}"
        assert proc.stderr == "", f"{name} builds with warnings:\n{proc.stderr}"
        built[(name, optimize)] = binary
        return binary

    return build
