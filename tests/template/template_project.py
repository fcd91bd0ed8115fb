"""Generating projects from templates/plugin, and building their library directly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch_fl

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "templates" / "plugin"
BIN = Path(sys.executable).parent

# The answers cookiecutter --no-input gives (cookiecutter.json renders them).
DEFAULT_DEVICE = "nova"
DEFAULT_PACKAGE = "torch_nova"


def cookiecutter_cli() -> str:
    found = shutil.which(
        "cookiecutter", path=os.pathsep.join([str(BIN), os.environ.get("PATH", "")])
    )
    assert found is not None, "cookiecutter is not installed; it comes with requirements-dev.txt"
    return found


def run_cookiecutter(output_dir: Path, **answers: str) -> subprocess.CompletedProcess:
    """`cookiecutter --no-input templates/plugin key=value...` into output_dir."""
    cmd = [cookiecutter_cli(), "--no-input", str(TEMPLATE), "-o", str(output_dir)]
    cmd += [f"{key}={value}" for key, value in answers.items()]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)


def generate(output_dir: Path, **answers: str) -> Path:
    """Generates a project and returns its directory."""
    proc = run_cookiecutter(output_dir, **answers)
    assert proc.returncode == 0, f"cookiecutter failed\n{proc.stdout}\n{proc.stderr}"
    package = answers.get("package_slug", f"torch_{answers.get('device_name', DEFAULT_DEVICE)}")
    project = output_dir / package
    assert project.is_dir(), (
        f"cookiecutter did not create {project}: {sorted(output_dir.iterdir())}"
    )
    return project


def template_defaults() -> dict[str, str]:
    return json.loads((TEMPLATE / "cookiecutter.json").read_text(encoding="utf-8"))


def compile_library(project: Path, output: Path) -> Path:
    """Builds lib<device>.so from the project's sources with the installed ABI headers,
    the same flags CMakeLists.txt uses, without CMake (faster for tests)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx is not None, "a C++ compiler (g++) is needed to build the generated plugin"
    sources = sorted(str(p) for p in (project / "src").glob("*.cpp"))
    cmd = [
        cxx,
        "-std=c++17",
        "-O1",
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-DTFL_BUILDING_PLUGIN",
        f"-I{torch_fl.get_include()}",
        *sources,
        f"-Wl,--version-script={project / 'src' / 'exports.map'}",
        "-Wl,--no-undefined",
        "-pthread",
        "-o",
        str(output),
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return output
