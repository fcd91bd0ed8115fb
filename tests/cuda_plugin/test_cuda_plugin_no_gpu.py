"""On a machine without an NVIDIA driver or GPU the plugin loads, refuses to
initialize with a message that says what is missing, and neither the bridge,
`torchfl list` nor autoload crashes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_plugin_project import (
    TFL_ERR_ABI_MISMATCH,
    TFL_ERR_UNAVAILABLE,
    BuiltPlugin,
    PluginLibrary,
    has_cuda_driver,
)
from support import run_python

HERE = Path(__file__).resolve().parent
NO_GPU_REASONS = ("no CUDA driver", "no CUDA device")

needs_no_driver = pytest.mark.skipif(
    has_cuda_driver(), reason="this machine has a CUDA driver: the no-driver path cannot be shown here"
)

ISOLATED = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "TORCH_FL_AUTOLOAD": "0"}


def test_identity_is_readable_before_initialize(flcuda_build: BuiltPlugin) -> None:
    lib = PluginLibrary(flcuda_build.library)
    info = lib.info()
    got = (info.name, info.device_type, lib.api.abi_major)
    assert got == (b"flcuda", b"flcuda", 1), got


def test_calls_before_initialize_fail_cleanly(flcuda_build: BuiltPlugin) -> None:
    lib = PluginLibrary(flcuda_build.library)
    count, err = lib.device_count()
    assert count is None and err is not None, (count, err)
    assert err[0] == TFL_ERR_UNAVAILABLE and "not initialized" in err[1], err


def test_a_host_of_another_major_is_refused(flcuda_build: BuiltPlugin) -> None:
    err = PluginLibrary(flcuda_build.library).initialize(2, 0)
    assert err is not None and err[0] == TFL_ERR_ABI_MISMATCH, err
    assert "ABI 2.0" in err[1] and "ABI 1." in err[1], err


@needs_no_driver
def test_initialize_without_driver_says_why(flcuda_build: BuiltPlugin) -> None:
    code = f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from cuda_plugin_project import PluginLibrary
        from pathlib import Path
        lib = PluginLibrary(Path({str(flcuda_build.library)!r}))
        print(lib.initialize(1, 1))
        print(lib.device_count())
    """
    proc = run_python(code, env=ISOLATED)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    first, second = proc.stdout.strip().splitlines()[-2:]
    assert first.startswith(f"({TFL_ERR_UNAVAILABLE}, ") and any(r in first for r in NO_GPU_REASONS), first
    assert "libcuda.so.1" in first or "no CUDA device" in first, first
    assert f"({TFL_ERR_UNAVAILABLE}," in second, second


@needs_no_driver
def test_register_device_plugin_raises_a_clear_error(flcuda_build: BuiltPlugin) -> None:
    code = f"""
        import torch_fl
        try:
            torch_fl.register_device_plugin("flcuda", {str(flcuda_build.library)!r})
        except Exception as exc:
            print("RAISED", type(exc).__name__, exc)
        else:
            print("REGISTERED")
    """
    proc = run_python(code, env=ISOLATED)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    out = proc.stdout.strip().splitlines()[-1]
    # Unavailable here (no hardware or driver), a PluginInitializationError subclass.
    assert out.startswith("RAISED PluginUnavailableError"), out
    assert "unavailable on this machine" in out and "TFL_ERR_UNAVAILABLE" in out, out
    assert any(r in out for r in NO_GPU_REASONS), out


@needs_no_driver
def test_torchfl_list_names_the_reason(flcuda_build: BuiltPlugin) -> None:
    env = dict(os.environ, TORCH_FL_PLUGINS=f"flcuda={flcuda_build.library}@50")
    proc = subprocess.run([sys.executable, "-m", "torch_fl.cli", "list"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    lines = proc.stdout.splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.split()[:2] in (["PASS", "flcuda"],
                 ["FAIL", "flcuda"], ["UNAVAILABLE", "flcuda"])), None)
    assert head is not None, proc.stdout + proc.stderr
    assert lines[head].startswith("UNAVAILABLE  flcuda"), lines[head]
    # Hardware absent here is not a broken installation: flemu loads, the exit status is 0.
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    reason = next((ln for ln in lines[head + 1:head + 4] if ln.strip().startswith("reason:")), "")
    assert any(r in reason for r in NO_GPU_REASONS), f"reason line: {reason!r}\n{proc.stdout}"
    assert "Crash" not in reason, reason


@needs_no_driver
def test_autoload_moves_on_quietly(flcuda_build: BuiltPlugin) -> None:
    code = """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        import torch_fl
        handle = torch_fl.get_plugin()
        print("PLUGIN", handle.name if handle else None)
        for w in caught:
            print("WARNING", w.message)
    """
    env = {"TORCH_FL_PLUGINS": f"flcuda={flcuda_build.library}@50"}
    proc = run_python(code, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    # An installed plugin without its hardware does not warn at every `import torch`.
    warnings_text = "\n".join(ln for ln in proc.stdout.splitlines() if ln.startswith("WARNING"))
    assert "flcuda" not in warnings_text, proc.stdout
    plugin = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PLUGIN"))
    assert plugin != "PLUGIN flcuda", plugin
