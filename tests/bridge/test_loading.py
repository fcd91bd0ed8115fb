"""Loading plugins: by path, by name, autoload, and every way a plugin can be bad.

Each bad plugin must give its own clear error and leave the process usable —
checked by registering flemu afterwards in the same process and running an op.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch_fl
from support import ROOT, assert_ok, compile_c, run_python

FIXTURE = ROOT / "tests" / "fixtures" / "bad_plugin.c"

TRY_THEN_RECOVER = """
import json, torch, torch_fl, flemu
result = {{}}
try:
    torch_fl.register_device_plugin({name!r}, {path!r})
    result["error"] = None
except Exception as exc:
    result["error"] = type(exc).__name__
    result["message"] = str(exc)
    result["classes"] = [c.__name__ for c in type(exc).__mro__]
handle = torch_fl.register_device_plugin("flemu", flemu.library_path())
x = torch.ones(3, device="flemu") + 1
result["recovered"] = x.cpu().tolist()
result["privateuse1"] = torch._C._get_privateuse1_backend_name()
print(json.dumps(result))
"""


def try_bad(name: str, path: str) -> dict:
    out = assert_ok(run_python(TRY_THEN_RECOVER.format(name=name, path=path),
                               env={"TORCH_FL_AUTOLOAD": "0"}))
    result = json.loads(out.strip().splitlines()[-1])
    assert result["recovered"] == [2.0, 2.0, 2.0], result
    assert result["privateuse1"] == "flemu", result
    return result


@pytest.fixture(scope="module")
def bad_plugins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad_plugins")
    plugins = {
        defect: compile_c(FIXTURE, d / f"libbad_{defect.lower()}.so", f"-DDEFECT_{defect}")
        for defect in ("NO_ENTRY", "ABI_MAJOR", "MISSING_FUNCTIONS", "INIT_FAILS")
    }
    text = d / "libnot_a_library.so"
    text.write_text("this is a text file, not a shared library\n")
    plugins["NOT_A_LIBRARY"] = text
    elf = d / "not_shared.o"
    import subprocess
    subprocess.run(["gcc", "-c", "-x", "c", "-", "-o", str(elf)], input="int x;\n",
                   text=True, check=True)
    plugins["ELF_OBJECT"] = elf
    return plugins


def test_missing_file_is_plugin_not_found(tmp_path: Path) -> None:
    r = try_bad("flemu", str(tmp_path / "nowhere" / "libmissing.so"))
    assert r["error"] == "PluginNotFoundError", r
    assert "no plugin library at" in r["message"] and "libmissing.so" in r["message"], r


def test_text_file_is_not_a_shared_library(bad_plugins: dict[str, Path]) -> None:
    r = try_bad("flemu", str(bad_plugins["NOT_A_LIBRARY"]))
    assert r["error"] == "NotASharedLibraryError", r
    assert "is not an ELF file" in r["message"], r


def test_object_file_is_not_a_shared_library(bad_plugins: dict[str, Path]) -> None:
    r = try_bad("flemu", str(bad_plugins["ELF_OBJECT"]))
    assert r["error"] == "NotASharedLibraryError", r
    assert "not a shared library" in r["message"], r


@pytest.mark.parametrize("keep", [3000, 0.6])
def test_truncated_library_is_an_error_not_a_signal(tmp_path: Path, keep: float) -> None:
    import flemu

    whole = Path(flemu.library_path()).read_bytes()
    cut = tmp_path / "libflemu_truncated.so"
    cut.write_bytes(whole[: int(keep if keep >= 1 else len(whole) * keep)])
    r = try_bad("flemu", str(cut))
    assert r["error"] == "NotASharedLibraryError", r
    assert "truncated or corrupt" in r["message"] and "reinstall" in r["message"], r


def test_truncated_installed_plugin_leaves_import_torch_working(tmp_path: Path) -> None:
    import flemu

    cut = tmp_path / "libflemu_truncated.so"
    cut.write_bytes(Path(flemu.library_path()).read_bytes()[:3000])
    proc = run_python("import torch\nprint('imported', torch._C._get_privateuse1_backend_name())",
                      env={"TORCH_FL_PLUGINS": f"cut={cut}@100"})
    assert "imported flemu" in assert_ok(proc), proc.stdout
    assert "truncated" in proc.stderr, proc.stderr


def test_library_without_entry_symbol(bad_plugins: dict[str, Path]) -> None:
    r = try_bad("flemu", str(bad_plugins["NO_ENTRY"]))
    assert r["error"] == "MissingEntrySymbolError", r
    assert "TFL_GetPluginApi" in r["message"], r


def test_abi_major_mismatch_names_both_versions(bad_plugins: dict[str, Path]) -> None:
    r = try_bad("flemu", str(bad_plugins["ABI_MAJOR"]))
    major, minor = torch_fl.abi_version()
    assert r["error"] == "ABIMismatchError", r
    assert f"ABI {major + 1}.{minor}" in r["message"], r
    assert f"ABI {major}.{minor}" in r["message"], r


def test_missing_required_functions_are_listed(bad_plugins: dict[str, Path]) -> None:
    r = try_bad("flemu", str(bad_plugins["MISSING_FUNCTIONS"]))
    assert r["error"] == "MissingFunctionsError", r
    for fn in ("Memory_Allocate", "Memory_Free", "Event_Query"):
        assert fn in r["message"], r
    assert "3 required ABI function(s)" in r["message"], r


def test_plugin_that_refuses_to_initialize(bad_plugins: dict[str, Path]) -> None:
    r = try_bad("flemu", str(bad_plugins["INIT_FAILS"]))
    assert r["error"] == "PluginInitializationError", r
    assert "refuses to start on purpose" in r["message"], r
    assert "TFL_ERR_ABI_MISMATCH" in r["message"], r


@pytest.mark.parametrize("name", ["fl2000", "FLEMU", "fl-emu", "", "cuda", "my device"])
def test_invalid_device_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(torch_fl.InvalidDeviceNameError) as err:
        torch_fl.register_device_plugin(name, "/nonexistent.so")
    message = str(err.value)
    assert repr(name) in message, message
    if name != "cuda":
        assert "[a-z_]+" in message, message


def test_every_load_error_is_a_plugin_error() -> None:
    for cls in (torch_fl.PluginNotFoundError, torch_fl.NotASharedLibraryError,
                torch_fl.MissingEntrySymbolError, torch_fl.ABIMismatchError,
                torch_fl.MissingFunctionsError, torch_fl.PluginInitializationError,
                torch_fl.InvalidDeviceNameError, torch_fl.PluginConflictError):
        assert issubclass(cls, torch_fl.PluginError), cls


def test_unknown_plugin_name_lists_the_known_ones() -> None:
    out = assert_ok(run_python(
        """
        import torch_fl
        try:
            torch_fl.register_device_plugin("nosuchplugin")
        except torch_fl.PluginNotFoundError as exc:
            print(exc)
        """, env={"TORCH_FL_AUTOLOAD": "0"}))
    assert "'nosuchplugin'" in out and "flemu" in out, out


def test_second_plugin_conflicts_and_first_keeps_working(flemu: torch_fl.PluginHandle) -> None:
    import torch

    with pytest.raises(torch_fl.PluginConflictError) as err:
        torch_fl.register_device_plugin("other_device", flemu.library)
    assert "one PrivateUse1 backend per process" in str(err.value)
    assert torch_fl.register_device_plugin("flemu") is flemu
    assert (torch.ones(2, device="flemu") * 3).cpu().tolist() == [3.0, 3.0]


def test_autoload_registers_flemu_at_import_torch() -> None:
    out = assert_ok(run_python(
        """
        import torch
        print(torch._C._get_privateuse1_backend_name(), torch.flemu.device_count())
        import torch_fl
        print(torch_fl.get_plugin().source)
        """))
    lines = out.split()
    assert lines[0] == "flemu" and int(lines[1]) >= 1, out
    assert "entry point" in out, out


def test_autoload_imports_neither_the_doctor_nor_the_prober() -> None:
    # `import torch` pays for what registering needs: the health check, the
    # probing code and the op-stats snapshot types (with their dataclasses)
    # load on first use, and are then what they always were.
    out = assert_ok(run_python(
        """
        import json, sys, torch
        loaded = {m: m in sys.modules for m in
                  ("torch_fl.tooling.doctor", "torch_fl.tooling.probe", "torch_fl.tooling.probe_cache",
                   "torch_fl._op_table")}
        import torch_fl
        from torch_fl.op_stats import OpStat
        check = torch_fl.test_compatibility
        x = torch.ones(2, device="flemu") + 1
        with torch_fl.op_stats_scope() as scope:
            y = x * 2
        print(json.dumps({"loaded": loaded, "plugin": torch_fl.get_plugin().name,
                          "doctor": check.__module__, "in_all": "test_compatibility" in torch_fl.__all__,
                          "types": [torch_fl.OpStat is OpStat, type(torch_fl.op_stats()) is torch_fl.OpStatsTable,
                                    type(scope.table) is torch_fl.OpStatsTable],
                          "mul": scope.table.get("aten::mul.Tensor").native}))
        """))
    result = json.loads(out.strip().splitlines()[-1])
    assert result["plugin"] == "flemu", result
    assert result["loaded"] == {"torch_fl.tooling.doctor": False, "torch_fl.tooling.probe": False,
                                "torch_fl.tooling.probe_cache": True, "torch_fl._op_table": False}, result
    assert result["doctor"] == "torch_fl.tooling.doctor" and result["in_all"], result
    assert result["types"] == [True, True, True] and result["mul"] == 1, result


def test_autoload_off_leaves_privateuse1_alone() -> None:
    for env in ({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, {"TORCH_FL_AUTOLOAD": "0"}):
        out = assert_ok(run_python(
            """
            import torch
            print(torch._C._get_privateuse1_backend_name(), hasattr(torch, "flemu"))
            """, env=env))
        assert out.split() == ["privateuseone", "False"], (env, out)


def test_explicit_registration_by_path_when_autoload_is_off() -> None:
    out = assert_ok(run_python(
        """
        import torch, torch_fl, flemu
        h = torch_fl.register_device_plugin("flemu", plugin_path=flemu.library_path())
        x = torch.randn(4, 4, device="flemu:0")
        y = torch.relu(x @ x + 1)
        assert torch.allclose(y.cpu(), torch.relu(x.cpu() @ x.cpu() + 1), atol=1e-5)
        print(h.plugin_name, h.source, h.abi)
        """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))
    assert out.startswith("flemu register_device_plugin"), out


def test_broken_plugin_warns_at_import_and_torch_still_imports(bad_plugins: dict[str, Path]) -> None:
    proc = run_python(
        """
        import torch
        print("imported", torch._C._get_privateuse1_backend_name())
        """,
        env={"TORCH_FL_PLUGINS": f"broken={bad_plugins['ABI_MAJOR']}@100"})
    out = assert_ok(proc)
    # The broken plugin has the higher priority; flemu is registered instead.
    assert "imported flemu" in out, out
    assert "ABI" in proc.stderr and "broken" in proc.stderr, proc.stderr


def test_torch_fl_plugins_env_selects_by_priority() -> None:
    import flemu

    out = assert_ok(run_python(
        """
        import torch, torch_fl
        h = torch_fl.get_plugin()
        print(h.name, h.priority, h.source, "|", ";".join(h.passed_over))
        """,
        env={"TORCH_FL_PLUGINS": f"flemu_env={flemu.library_path()}@5"}))
    name, priority, *_rest = out.split()
    assert name == "flemu_env" and priority == "5", out
    assert "TORCH_FL_PLUGINS" in out and "flemu (priority 0)" in out, out


def test_malformed_torch_fl_plugins_entry_is_reported_not_fatal() -> None:
    proc = run_python(
        """
        import torch
        print(torch._C._get_privateuse1_backend_name())
        """, env={"TORCH_FL_PLUGINS": "just_a_path_without_name"})
    assert assert_ok(proc).strip() == "flemu"
    assert "not of the form name=/path/to/lib.so" in proc.stderr, proc.stderr


@pytest.mark.parametrize("first", ["import torch_fl", "import torch", "import flemu"])
def test_autoload_works_whatever_is_imported_first(first: str) -> None:
    proc = run_python(f"""
        {first}
        import torch, torch_fl
        print(torch_fl.get_plugin().name, torch.ones(2, device="flemu").sum().item())
        """)
    assert assert_ok(proc).split() == ["flemu", "2.0"], proc.stdout
    assert "autoloading a device plugin failed" not in proc.stderr, proc.stderr


def test_bridge_refuses_another_torch_release_naming_both() -> None:
    from torch_fl._build_check import BridgeVersionError, check_torch_version

    check_torch_version(running="2.13.1", built="2.13.0+cpu")  # same release: fine
    with pytest.raises(BridgeVersionError) as err:
        check_torch_version(running="2.14.1", built="2.13.0+cpu")
    msg = str(err.value)
    assert "2.13.0+cpu" in msg and "2.14.1" in msg and "pip install" in msg, msg
    assert isinstance(err.value, ImportError)


def test_mismatched_bridge_leaves_import_torch_working_and_the_device_unregistered() -> None:
    out = assert_ok(run_python(
        """
        import sys, types, warnings
        # As if the installed bridge had been built for another torch release.
        sys.modules["torch_fl._build_info"] = types.SimpleNamespace(TORCH_VERSION="2.99.0")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import torch
        import torch_fl
        print(torch_fl.get_plugin() is None, "torch_fl._C" in sys.modules)
        print(sum("built for torch 2.99.0" in str(m.message) for m in w))
        try:
            torch_fl.register_device_plugin("flemu")
        except ImportError as e:
            print("refused", type(e).__name__)
        """))
    assert out.split() == ["True", "False", "1", "refused", "BridgeVersionError"], out
