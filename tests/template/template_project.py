"""Generating projects from templates/plugin, and building their library directly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
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
        "-static-libstdc++",
        "-static-libgcc",
        "-pthread",
        "-o",
        str(output),
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return output


@dataclass(frozen=True)
class LayeredVenv:
    """A throwaway virtual environment that sees every package of the project's
    environment but installs into its own directory."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def site_packages(self) -> Path:
        scheme = sysconfig.get_paths(vars={"base": str(self.root), "platbase": str(self.root)})
        return Path(scheme["platlib"])

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default os.environ) with this environment first on PATH."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = os.pathsep.join([str(self.bin), env.get("PATH", "")])
        env["VIRTUAL_ENV"] = str(self.root)
        return env


def layered_venv(root: Path) -> LayeredVenv:
    """Creates a LayeredVenv at `root` on top of the environment running the tests.

    A plugin built by a test is installed there, never into the shared
    environment, where it would shadow flemu for every other test and every
    other person using it. The layer is a `.pth` file naming the project's
    site-packages (after the new environment's own, so what is installed here
    wins), and a copy of each of the project's console scripts (pip,
    cookiecutter, torchfl-conformance, pytest, ...) that runs under the new
    interpreter, so they see what is installed here too.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"python -m venv {root} failed:\n{proc.stderr}"
    venv = LayeredVenv(root)
    project_paths = sysconfig.get_paths()
    layers = dict.fromkeys([project_paths["purelib"], project_paths["platlib"]])
    venv.site_packages.mkdir(parents=True, exist_ok=True)
    (venv.site_packages / "_project_environment.pth").write_text(
        "".join(f"{path}\n" for path in layers), encoding="utf-8"
    )
    interpreters = {str(BIN / name) for name in ("python", "python3", Path(sys.executable).name)}
    for script in sorted(BIN.iterdir()):
        target = venv.bin / script.name
        if target.exists() or not script.is_file():
            continue
        try:
            first, rest = script.read_text(encoding="utf-8").split("\n", 1)
        except (UnicodeDecodeError, ValueError):
            continue  # binaries, empty files
        if first.removeprefix("#!").strip() in interpreters:
            target.write_text(f"#!{venv.python}\n{rest}", encoding="utf-8")
            target.chmod(0o755)
    check = subprocess.run(
        [str(venv.python), "-c", "import sys, torch_fl; print(sys.prefix)"],
        env={**venv.env(), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0 and check.stdout.strip() == str(root), (
        f"the layered environment {root} does not see torch_fl or is not its own prefix:\n"
        f"{check.stdout}\n{check.stderr}"
    )
    return venv
