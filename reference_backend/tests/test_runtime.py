"""flemu's runtime, tested without torch: builds runtime_check.cpp and runs it
against the installed libflemu.so under several configurations, then checks
strict mode, fault injection and what the library links and exports."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from abi_programs import describe, run

import flemu


@pytest.fixture(scope="session")
def runtime_check(build_program: Callable[[str], Path]) -> Path:
    return build_program("runtime_check")


CONFIGS = {
    "default": {},
    "strict": {"FLEMU_STRICT": "1"},
    "sanitize": {"FLEMU_SANITIZE": "100", "FLEMU_SANITIZE_SEED": "1"},
    "npu_like": {"FLEMU_FP64": "0", "FLEMU_FP16": "0", "FLEMU_BF16": "0", "FLEMU_PEER_ACCESS": "0",
                 "FLEMU_DEVICE_COUNT": "3"},
    "one_small_device": {"FLEMU_DEVICE_COUNT": "1", "FLEMU_MEMORY_BYTES": "256M"},
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_runtime_check(runtime_check: Path, library: str, config: str) -> None:
    proc = run(runtime_check, library, env=CONFIGS[config])
    assert proc.returncode == 0, f"runtime_check under {CONFIGS[config]}: {describe(proc)}"
    assert re.search(r"\d+ checks, 0 failures", proc.stdout), describe(proc)


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("FLEMU_DEVICE_COUNT", "two", "an integer from 0 to 64"),
        ("FLEMU_MEMORY_BYTES", "12X", "K, M or G suffix"),
        ("FLEMU_FP16", "maybe", "0 or 1"),
        ("FLEMU_SANITIZE", "-5", "microseconds"),
        ("FLEMU_INJECT_ERROR", "aten::mm", "<op>:<code>"),
        ("FLEMU_INJECT_ERROR", "aten::not_a_kernel:3", "not a flemu kernel"),
        ("FLEMU_INJECT_CRASH", "aten::nope", "not a flemu kernel"),
    ],
)
def test_initialize_rejects_bad_values(runtime_check: Path, library: str, variable: str, value: str,
                                       expected: str) -> None:
    proc = run(runtime_check, library, "init", {variable: value})
    assert proc.returncode == 3, f"expected Initialize to fail for {variable}={value}: {describe(proc)}"
    for fragment in ("[code 2] flemu: Plugin_Initialize: ", variable, value, expected):
        assert fragment in proc.stdout, f"message lacks {fragment!r}: {proc.stdout!r}"


def test_initialize_accepts_suffixes(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "init", {"FLEMU_MEMORY_BYTES": "512K", "FLEMU_DEVICE_COUNT": "4"})
    assert proc.returncode == 0, describe(proc)
    assert "init ok: 4 devices" in proc.stdout, describe(proc)


def test_inject_error_at_launch(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "inject-sync", {"FLEMU_INJECT_ERROR": "aten::mm:5", "FLEMU_EXPECT_CODE": "5"})
    assert proc.returncode == 0, describe(proc)


def test_inject_error_on_stream(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "inject-async",
               {"FLEMU_INJECT_ERROR": "aten::mm:9:async", "FLEMU_EXPECT_CODE": "9"})
    assert proc.returncode == 0, describe(proc)


def test_inject_crash_kills_the_process(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "crash", {"FLEMU_INJECT_CRASH": "aten::add.Tensor"})
    assert proc.returncode == -signal.SIGABRT, f"expected death by SIGABRT: {describe(proc)}"
    assert "launching" in proc.stdout and "still alive" not in proc.stdout, describe(proc)
    assert "FLEMU_INJECT_CRASH=aten::add.Tensor" in proc.stderr, describe(proc)


def test_strict_mode_catches_host_reads(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "strict-probe", {"FLEMU_STRICT": "1"})
    assert "copies ok" in proc.stdout, f"kernels and copies must work in strict mode: {describe(proc)}"
    assert proc.returncode == -signal.SIGSEGV, f"expected death by SIGSEGV: {describe(proc)}"


def test_without_strict_mode_host_reads_work(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "strict-probe")
    assert proc.returncode == 0, describe(proc)
    assert "host read of a device pointer returned 6" in proc.stdout, describe(proc)


def test_bench_reports_numbers(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "bench")
    assert proc.returncode == 0, describe(proc)
    enqueue = re.findall(r"enqueue (\S+) .*: median (\d+) ns", proc.stdout)
    gemm = re.search(r"mm float32 512x512: median ([\d.]+) GFLOP/s", proc.stdout)
    assert len(enqueue) == 2 and gemm is not None, describe(proc)
    # Numbers are reported, never asserted: timings depend on the machine.
    print(proc.stdout)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def test_links_neither_torch_nor_python(library: str) -> None:
    out = subprocess.run([_tool("ldd"), library], capture_output=True, text=True, check=True).stdout
    for banned in ("libtorch", "libc10", "libpython"):
        assert banned not in out, f"libflemu.so depends on {banned}:\n{out}"


def _dynamic_symbols(library: str, flag: str) -> list[str]:
    out = subprocess.run([_tool("nm"), "-D", flag, library], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def test_exports_only_the_plugin_api(library: str) -> None:
    defined = _dynamic_symbols(library, "--defined-only")
    unexpected = [s for s in defined if s != "TFL_GetPluginApi" and not s.startswith("torch_fl_op_")]
    assert unexpected == [], f"unexpected exported symbols: {unexpected}"
    assert sorted(defined) == ["TFL_GetPluginApi", "torch_fl_op_abs", "torch_fl_op_maximum"], defined


def test_needs_no_torch_or_python_symbols(library: str) -> None:
    undefined = _dynamic_symbols(library, "--undefined-only")
    banned = re.compile(r"^(_?Py|_ZN3c10|_ZNK3c10|_ZN2at|_ZNK2at|c10::|at::)")
    offending = [s for s in undefined if banned.match(s)]
    assert offending == [], f"libflemu.so needs torch/Python symbols: {offending}"


def test_plugin_spec_names_the_library(library: str) -> None:
    spec = flemu.plugin_spec()
    assert spec == {"name": "flemu", "library": library, "priority": 0}, spec
    assert Path(library).is_absolute() and Path(library).name == "libflemu.so", library


def test_library_path_override(monkeypatch: pytest.MonkeyPatch, library: str, tmp_path: Path) -> None:
    monkeypatch.setenv("FLEMU_LIBRARY", library)
    assert flemu.library_path() == str(Path(library).resolve())
    missing = tmp_path / "nowhere.so"
    monkeypatch.setenv("FLEMU_LIBRARY", str(missing))
    with pytest.raises(FileNotFoundError, match="FLEMU_LIBRARY"):
        flemu.library_path()


def test_autoload_warns_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes "import torch_fl" raise ImportError.
    monkeypatch.setitem(sys.modules, "torch_fl", None)
    monkeypatch.setitem(sys.modules, "torch_fl._autoload", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flemu._autoload()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert messages[0].startswith("flemu: autoload failed: ") and "not registered" in messages[0], messages


def test_import_is_free_of_torch() -> None:
    code = "import sys, flemu; print(sorted(m for m in ('torch', 'torch_fl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"importing flemu imported {out.strip()}"
