"""libflcuda.so builds with nvcc and links neither libtorch nor libpython (nor
any CUDA library the machine might lack: cudart is static, cuBLAS is dlopened)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from cuda_plugin_project import BuiltPlugin

# What the library may ask the dynamic loader for: glibc's pieces only.
ALLOWED_NEEDED = re.compile(r"^(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|ld-linux-aarch64)\.so")


def readelf(*args: str) -> str:
    tool = shutil.which("readelf")
    if tool is None:
        pytest.fail("readelf (binutils) is needed to inspect the plugin library")
    proc = subprocess.run([tool, *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_needed_libraries_are_glibc_only(flcuda_build: BuiltPlugin) -> None:
    out = readelf("-d", str(flcuda_build.library))
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    assert needed, f"readelf found no NEEDED entries:\n{out}"
    unexpected = [n for n in needed if not ALLOWED_NEEDED.match(n)]
    assert unexpected == [], f"NEEDED {needed}: {unexpected} are not glibc"
    for banned in ("torch", "python", "cublas", "cudart", "libcuda"):
        assert not any(banned in n for n in needed), f"NEEDED {needed} names {banned}"
    assert "RPATH" not in out and "RUNPATH" not in out, f"the library carries a search path:\n{out}"


def test_only_the_entry_point_is_exported(flcuda_build: BuiltPlugin) -> None:
    out = readelf("--dyn-syms", "--wide", str(flcuda_build.library))
    exported = sorted({
        line.split()[-1] for line in out.splitlines()
        if re.search(r"\b(FUNC|OBJECT)\s+GLOBAL\s+DEFAULT\s+\d+\s", line)
    })
    assert exported == ["TFL_GetPluginApi"], f"exported symbols: {exported}"


def test_no_undefined_symbols_outside_glibc(flcuda_build: BuiltPlugin) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.fail("nm (binutils) is needed to inspect the plugin library")
    proc = subprocess.run([nm, "-D", "--undefined-only", str(flcuda_build.library)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    entries = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    # Strong references all resolve in versioned glibc (name@GLIBC_x); weak ones
    # (transactional-memory and profiling hooks) may stay unresolved.
    foreign = [e[-1] for e in entries if e[0] == "U" and "@GLIBC_" not in e[-1]]
    assert foreign == [], f"undefined symbols outside glibc: {foreign}"


def test_cuda_device_code_is_embedded(flcuda_build: BuiltPlugin) -> None:
    sections = readelf("-S", "--wide", str(flcuda_build.library))
    assert ".nv_fatbin" in sections, f"no .nv_fatbin section (device code) in:\n{sections}"
