"""`torchfl list`: every plugin torch-fl can find, each loaded in a fresh
process, with PASS/FAIL and the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch_fl
from support import ROOT, compile_c
from torch_fl._discovery import PluginSpec
from torch_fl.tooling.listing import check_plugin, format_listing

FIXTURE = ROOT / "tests" / "fixtures" / "bad_plugin.c"


@pytest.fixture(scope="module")
def bad_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("list_plugins")
    libs = {defect: compile_c(FIXTURE, d / f"libbad_{defect.lower()}.so", f"-DDEFECT_{defect}")
            for defect in ("ABI_MAJOR", "NO_ENTRY")}
    text = d / "libtext.so"
    text.write_text("not a library\n")
    libs["TEXT"] = text
    return libs


def run_list(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-m", "torch_fl.cli", "list", *args], env=full,
                          capture_output=True, text=True, timeout=600, check=False)


def test_flemu_passes_with_its_devices(flemu: torch_fl.PluginHandle) -> None:
    spec = next(s for s in torch_fl.discover_plugins() if s.name == "flemu")
    status = check_plugin(spec)
    assert status.ok, status
    assert (status.plugin_name, status.version, status.abi) == ("flemu", "0.1.0", flemu.abi), status
    assert [d["name"] for d in status.devices] == [d.name for d in flemu.devices], status.devices
    assert status.devices[0]["capabilities"] == list(flemu.devices[0].capabilities), status.devices
    assert "kernels" in status.groups and "tunables" in status.groups, status.groups
    assert status.kernels == len(flemu.kernels), (status.kernels, len(flemu.kernels))
    # This process kept its own plugin: the candidate was loaded elsewhere.
    assert torch_fl.get_plugin() is flemu


def test_spec_errors_fail_without_loading() -> None:
    status = check_plugin(PluginSpec("x", "", 0, "TORCH_FL_PLUGINS", "entry 'x' is not of the form"))
    assert not status.ok and status.error == "PluginSpecError", status
    assert status.reason == "entry 'x' is not of the form", status


def test_a_crashing_plugin_is_reported_not_fatal(tmp_path: Path) -> None:
    src = tmp_path / "crash.c"
    src.write_text('#include <stdlib.h>\nvoid* TFL_GetPluginApi(void) { abort(); }\n')
    lib = compile_c(src, tmp_path / "libcrash.so")
    status = check_plugin(PluginSpec("crash", str(lib), 0, "TORCH_FL_PLUGINS"))
    assert not status.ok and status.error == "Crash", status
    assert status.reason.startswith("the process loading it died with SIGABRT"), status.reason


def test_cli_lists_every_candidate_with_pass_fail(bad_libs: dict[str, Path]) -> None:
    plugins = os.pathsep.join([
        f"older={bad_libs['ABI_MAJOR']}@5",
        f"noentry={bad_libs['NO_ENTRY']}@3",
        f"text={bad_libs['TEXT']}@1",
        "Fl2000=/nowhere/libfl.so",
        "malformed",
    ])
    proc = run_list({"TORCH_FL_PLUGINS": plugins})
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    out = proc.stdout
    heads = [ln for ln in out.splitlines() if ln.startswith(("PASS", "FAIL"))]
    assert [h.split()[:2] for h in heads] == [
        ["FAIL", "older"], ["FAIL", "noentry"], ["FAIL", "text"],
        ["FAIL", "Fl2000"], ["FAIL", "malformed"], ["PASS", "flemu"]], heads
    assert "reason: ABIMismatchError: " in out and "ABI 2." in out, out
    assert "reason: MissingEntrySymbolError: " in out and "TFL_GetPluginApi" in out, out
    assert "reason: NotASharedLibraryError: " in out, out
    assert "reason: InvalidDeviceNameError: invalid device name 'Fl2000'" in out, out
    assert "reason: PluginSpecError: entry 'malformed' is not of the form name=/path/to/lib.so" in out
    major, minor = torch_fl.abi_version()
    assert f"flemu 0.1.0 by torch-fl project, ABI {major}.{minor}" in out, out
    assert "      flemu:0: FL-2000 (emulated), " in out, out
    assert out.rstrip().endswith("autoload registers: flemu"), out


def test_cli_json_and_all_pass_exit_zero() -> None:
    proc = run_list({"TORCH_FL_PLUGINS": ""}, "--format", "json")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout)
    assert [(d["name"], d["ok"]) for d in doc] == [("flemu", True)], doc
    assert doc[0]["abi"] == list(torch_fl.abi_version()) and len(doc[0]["devices"]) == 2, doc[0]


def test_nothing_found_says_where_it_looked() -> None:
    text = format_listing([])
    assert text.startswith("no plugins found: torch-fl looks at `torch_fl.plugins` entry points"), text
    assert "TORCH_FL_PLUGINS" in text, text
