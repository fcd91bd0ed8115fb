"""What torch-fl says when a user or a vendor gets something wrong: a device string
that does not parse, a second plugin in one process, a mistyped plugin name, and
the choice between several installed plugins. Each message must name what was
wrong and what to do, and what it advises must work.

PyTorch has one PrivateUse1 backend per process, so everything that registers a
plugin runs in a fresh interpreter (support.run_python).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch_fl
from support import assert_ok, run_python
from torch_fl import _discovery
from torch_fl._device_hint import device_hint
from torch_fl._discovery import PluginSpec, discover_plugins

PYTORCH_REFUSAL = "device type at start of device string"

# ---------------------------------------------------------------------------
# a device string PyTorch cannot parse
# ---------------------------------------------------------------------------


def uncaught(code: str, env: dict[str, str] | None = None) -> str:
    """stderr of a fresh interpreter that dies of an uncaught exception in `code`."""
    proc = run_python(code, env=env)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stderr


@pytest.mark.parametrize("code", [
    "import torch\ntorch.device('atuu:0')",
    "import torch\ntorch.ones(2, device='atuu:0')",
    "import torch\ntorch.ones(2).to('atuu')",
])
def test_a_mistyped_device_names_the_registered_device(code: str) -> None:
    err = uncaught(code)
    assert PYTORCH_REFUSAL in err, err  # PyTorch's own error is still printed
    note = err.strip().splitlines()[-1]
    assert note.startswith("torch_fl: 'atuu' is not a device type"), err
    assert "registered in this process is 'flemu'" in note, note
    assert "'flemu:0'..'flemu:1'" in note, note  # flemu emulates two devices by default
    assert "privateuseone" in note, note  # why the device is missing from PyTorch's list


def test_a_near_miss_asks_whether_the_registered_device_was_meant() -> None:
    err = uncaught("import torch\nx = torch.ones(2)\nx.to('flemuu:0')")
    assert "Did you mean 'flemu'?" in err.strip().splitlines()[-1], err


def test_the_hint_follows_the_error_through_a_reraise() -> None:
    err = uncaught(
        "import torch\n"
        "try:\n"
        "    torch.device('atuu')\n"
        "except RuntimeError as exc:\n"
        "    raise ValueError('bad configuration') from exc\n")
    assert "ValueError: bad configuration" in err, err
    assert "torch_fl: 'atuu' is not a device type" in err, err


def test_without_a_registered_device_the_hint_says_so_and_how_to_register() -> None:
    err = uncaught("import torch\ntorch.ones(2, device='flemu:0')", env={"TORCH_FL_AUTOLOAD": "0"})
    note = err.strip().splitlines()[-1]
    assert "no torch-fl device is registered in this process" in note, err
    assert "TORCH_FL_AUTOLOAD=0" in note and "installed plugins: flemu" in note, note
    assert "torch_fl.register_device_plugin('flemu')" in note, note


def test_an_installed_plugin_that_was_not_chosen_says_how_to_get_it() -> None:
    import flemu

    err = uncaught("import torch\ntorch.ones(2, device='flemu')",
                   env={"TORCH_FL_PLUGINS": f"other={flemu.library_path()}"})
    note = err.strip().splitlines()[-1]
    assert "registered in this process is 'other'" in note, note
    assert "'flemu' is an installed plugin" in note and "one PrivateUse1 backend" in note, note
    assert "TORCH_FL_PLUGINS=flemu=" in note, note


def test_other_errors_get_no_hint() -> None:
    assert device_hint("Expected a 'flemu' device type for generator but found 'cpu'") is None
    assert device_hint("Invalid device string: 'flemu:x'") is None
    err = uncaught("import torch\ntorch.ones(2, device='flemu:x')")
    assert "torch_fl:" not in err, err


# ---------------------------------------------------------------------------
# registering a plugin while another one is registered
# ---------------------------------------------------------------------------

SECOND = """
import torch, torch_fl, flemu
try:
    torch_fl.register_device_plugin({args})
except torch_fl.PluginError as exc:
    print(type(exc).__name__)
    print(exc)
"""


def second_registration(args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    out = assert_ok(run_python(SECOND.format(args=args), env=env)).strip().splitlines()
    assert len(out) >= 2, out
    return out[0], "\n".join(out[1:])


def test_a_second_plugin_says_what_is_registered_and_how_to_get_the_other() -> None:
    import flemu

    kind, message = second_registration("'other_device', flemu.library_path()")
    assert kind == "PluginConflictError", (kind, message)
    assert "cannot register 'other_device'" in message, message
    assert "one PrivateUse1 backend per process" in message, message
    assert "'flemu'" in message and "entry point flemu:plugin_spec" in message, message
    assert "fresh Python process" in message, message
    # The advice, followed literally, gets the other plugin.
    (selection,) = re.findall(r"`TORCH_FL_PLUGINS=(\S+?)=(\S+) python \.\.\.`", message)
    assert selection == ("other_device", flemu.library_path()), message
    out = assert_ok(run_python(
        "import torch, torch_fl\n"
        "h = torch_fl.get_plugin()\n"
        "print(h.name, torch.ones(2, device='other_device').sum().item())",
        env={"TORCH_FL_PLUGINS": "=".join(selection)}))
    assert out.split() == ["other_device", "2.0"], out
    assert "TORCH_FL_AUTOLOAD=0" in message, message
    assert f"register_device_plugin('other_device', plugin_path='{flemu.library_path()}')" \
        in message, message
    out = assert_ok(run_python(
        "import torch, torch_fl, flemu\n"
        "h = torch_fl.register_device_plugin('other_device', plugin_path=flemu.library_path())\n"
        "print(h.name)", env={"TORCH_FL_AUTOLOAD": "0"}))
    assert out.split() == ["other_device"], out


def test_a_mistyped_plugin_name_is_unknown_not_a_conflict(flemu: torch_fl.PluginHandle) -> None:
    with pytest.raises(torch_fl.PluginNotFoundError) as err:
        torch_fl.register_device_plugin("flemuu")
    message = str(err.value)
    assert message.startswith("unknown plugin 'flemuu'; installed plugins: flemu "), message
    assert "Did you mean 'flemu'?" in message, message
    assert "'flemu' is the plugin registered in this process" in message, message
    assert "TORCH_FL_PLUGINS=flemuu=/path/to/libflemuu.so" in message, message
    assert "plugin_path=" in message, message
    assert torch_fl.get_plugin() is flemu


def test_an_installed_plugin_that_lost_the_selection_conflicts_with_its_library() -> None:
    import flemu

    kind, message = second_registration(
        "'flemu'", env={"TORCH_FL_PLUGINS": f"other={flemu.library_path()}"})
    assert kind == "PluginConflictError", (kind, message)
    assert "'other'" in message and "from TORCH_FL_PLUGINS" in message, message
    assert f"TORCH_FL_PLUGINS=flemu={flemu.library_path()} python" in message, message


# ---------------------------------------------------------------------------
# choosing among installed plugins
# ---------------------------------------------------------------------------


def spec(name: str, priority: int, source: str = "entry point x:plugin_spec",
         library: str | None = None) -> PluginSpec:
    return PluginSpec(name, library or f"/opt/{name}/lib{name}.so", priority, source)


@pytest.mark.parametrize("found", [
    [spec("zeta", 0), spec("alpha", 0), spec("vendor", 100), spec("alpha", 0, library="/b/liba.so")],
    [spec("alpha", 0, library="/b/liba.so"), spec("vendor", 100), spec("alpha", 0), spec("zeta", 0)],
])
def test_selection_order_is_total_and_independent_of_entry_point_order(
    monkeypatch: pytest.MonkeyPatch, found: list[PluginSpec]
) -> None:
    monkeypatch.setattr(_discovery, "_from_entry_points", lambda: list(found))
    monkeypatch.setenv("TORCH_FL_PLUGINS", "late=/x/liblate.so@-5:early=/x/libearly.so@3:mid=/x/m.so")
    order = [(s.name, s.library) for s in discover_plugins()]
    assert order == [
        # TORCH_FL_PLUGINS first, whatever the priority: higher @priority, then as listed.
        ("early", "/x/libearly.so"), ("mid", "/x/m.so"), ("late", "/x/liblate.so"),
        # Installed plugins: higher priority, then device name, then library path.
        ("vendor", "/opt/vendor/libvendor.so"), ("alpha", "/b/liba.so"),
        ("alpha", "/opt/alpha/libalpha.so"), ("zeta", "/opt/zeta/libzeta.so"),
    ], order


def fake_distribution(root: Path, name: str, device: str, library: str, priority: int) -> Path:
    """An installed distribution with a `torch_fl.plugins` entry point, on a path
    a subprocess can put on PYTHONPATH (nothing is installed anywhere)."""
    module = f"fake_{name}"
    (root / f"{module}.py").write_text(
        "def plugin_spec():\n"
        f"    return {{'name': {device!r}, 'library': {library!r}, 'priority': {priority}}}\n")
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[torch_fl.plugins]\n{device} = {module}:plugin_spec\n")
    return root


AUTOLOADED = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, torch_fl
h = torch_fl.get_plugin()
print(json.dumps({"name": h.name, "library": h.library, "passed_over": list(h.passed_over),
                  "warnings": [str(w.message) for w in caught if "torch_fl" in str(w.message)]}))
"""


def autoload_with(extra: Path, env: dict[str, str] | None = None) -> dict:
    import os

    path = os.pathsep.join(p for p in (str(extra), os.environ.get("PYTHONPATH", "")) if p)
    out = assert_ok(run_python(AUTOLOADED, env={"PYTHONPATH": path, **(env or {})}))
    return json.loads(out.strip().splitlines()[-1])


def test_a_higher_priority_plugin_is_chosen_without_a_warning(tmp_path: Path) -> None:
    import flemu

    fake_distribution(tmp_path, "vendor", "vendor", flemu.library_path(), 100)
    r = autoload_with(tmp_path)
    assert r["name"] == "vendor", r
    assert r["passed_over"] == ["flemu (priority 0)"], r
    assert r["warnings"] == [], r


def test_an_equal_priority_tie_warns_with_the_rule_and_how_to_choose_the_other(
    tmp_path: Path,
) -> None:
    import flemu

    fake_distribution(tmp_path, "zeta", "zeta", flemu.library_path(), 0)
    r = autoload_with(tmp_path)
    assert r["name"] == "flemu", r  # name order: flemu before zeta
    (warning,) = r["warnings"]
    assert "'flemu' (entry point flemu:plugin_spec) and 'zeta' (entry point fake_zeta:plugin_spec)" \
        " are installed with the same priority 0" in warning, warning
    assert "registered 'flemu' (equal priorities go in name order)" in warning, warning
    advice = f"TORCH_FL_PLUGINS=zeta={flemu.library_path()}"
    assert advice in warning, warning
    chosen = autoload_with(tmp_path, env={"TORCH_FL_PLUGINS": advice.partition("=")[2]})
    assert chosen["name"] == "zeta" and chosen["warnings"] == [], chosen


def test_two_libraries_claiming_one_device_name_warn(tmp_path: Path) -> None:
    import flemu

    copy = tmp_path / "copy" / "libflemu.so"
    copy.parent.mkdir()
    shutil.copy(flemu.library_path(), copy)
    fake_distribution(tmp_path, "twin", "flemu", str(copy), 0)
    r = autoload_with(tmp_path)
    (warning,) = r["warnings"]
    assert "two installed libraries claim the device name 'flemu'" in warning, warning
    assert str(copy) in warning and flemu.library_path() in warning, warning
    chosen = r["library"]
    other = str(copy) if chosen == flemu.library_path() else flemu.library_path()
    assert f"TORCH_FL_PLUGINS=flemu={other}" in warning, warning
    # The same library found twice (an entry point and TORCH_FL_PLUGINS) is no conflict.
    r = autoload_with(tmp_path, env={"TORCH_FL_PLUGINS": f"flemu={flemu.library_path()}"})
    assert r["library"] == flemu.library_path() and r["warnings"] == [], r
    assert r["passed_over"] == ["flemu (priority 0)"], r  # the copy, not the same library
