"""Capability probing through the tunables group: flemu's GEMM blocking, the
bridge's List/Get/Set/Probe bindings, the probe policy and its cache."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch_fl
from support import ROOT, assert_ok, compile_c, run_python
from torch_fl.tooling import probe

NAMES = ["gemm.block_m_tiles", "gemm.block_n_tiles", "gemm.block_k"]
DEFAULTS = {"gemm.block_m_tiles": 24, "gemm.block_n_tiles": 64, "gemm.block_k": 256}


@pytest.fixture(autouse=True)
def defaults_restored(flemu: torch_fl.PluginHandle) -> Iterator[None]:
    yield
    for d in range(flemu.device_count):
        for name, value in DEFAULTS.items():
            probe.set_tunable(name, value, d)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCH_FL_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_flemu_exposes_its_gemm_blocking(flemu: torch_fl.PluginHandle) -> None:
    assert flemu.groups["tunables"] is True, flemu.groups
    tunables = probe.list_tunables(0)
    assert [t.name for t in tunables] == NAMES, tunables
    for t in tunables:
        assert t.default == DEFAULTS[t.name], t
        assert t.default in t.candidates and len(t.candidates) >= 5, t
        assert t.description.startswith("fp32 GEMM"), t
        assert probe.get_tunable(t.name, 0) == t.default, t


def test_set_is_per_device(flemu: torch_fl.PluginHandle) -> None:
    probe.set_tunable("gemm.block_k", 128, device=1)
    assert probe.get_tunable("gemm.block_k", 1) == 128
    assert probe.get_tunable("gemm.block_k", 0) == 256


def test_bad_values_are_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match=r"tunable 'gemm.block_k' takes values from 1 to 8192, got 0"):
        probe.set_tunable("gemm.block_k", 0)
    with pytest.raises(ValueError, match=r"unknown tunable 'gemm.block_q'; flemu has gemm.block_m_tiles"):
        probe.set_tunable("gemm.block_q", 4)
    with pytest.raises(ValueError, match=r"Tunables_Probe\(gemm.block_n_tiles=5000\)"):
        torch_fl._C.tunables_probe(0, "gemm.block_n_tiles", 5000)
    with pytest.raises(IndexError, match="device index 7 is out of range: plugin 'flemu' has 2"):
        probe.get_tunable("gemm.block_k", 7)
    assert probe.get_tunable("gemm.block_k", 0) == 256


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_mm_is_correct_under_every_candidate(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    # Odd sizes exercise the edge tiles; n*m*k is past the threading threshold.
    a = torch.randn(301, 259, generator=g).to(dtype)
    b = torch.randn(259, 157, generator=g).to(dtype)
    bias = torch.randn(157, generator=g).to(dtype)
    expected = (a.float() @ b.float())
    expected_addmm = torch.addmm(bias.float(), a.float(), b.float(), beta=0.5, alpha=2.0)
    da, db, dbias = a.to("flemu"), b.to("flemu"), bias.to("flemu")
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for t in probe.list_tunables(0):
        for value in t.candidates:
            probe.set_tunable(t.name, value, 0)
            got = (da @ db).cpu().float()
            err = ((got - expected).abs() / (expected.abs() + 1)).max().item()
            assert err < tol, f"{t.name}={value}: max relative error {err} (dtype {dtype})"
            got = torch.addmm(dbias, da, db, beta=0.5, alpha=2.0).cpu().float()
            err = ((got - expected_addmm).abs() / (expected_addmm.abs() + 1)).max().item()
            assert err < tol, f"addmm {t.name}={value}: max relative error {err}"
        probe.set_tunable(t.name, t.default, 0)


def test_default_blocking_keeps_results_bit_identical() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(200, 300, generator=g), torch.randn(300, 100, generator=g)
    before = (a.to("flemu") @ b.to("flemu")).cpu()
    for name, value in DEFAULTS.items():  # explicitly set: the same numbers as never set
        probe.set_tunable(name, value, 0)
    after = (a.to("flemu") @ b.to("flemu")).cpu()
    assert torch.equal(before, after), (before - after).abs().max()


def test_probe_times_every_candidate_and_caches_the_choice(cache: Path) -> None:
    (result,) = probe.probe(device=0, rounds=1)
    assert result.plugin == "flemu" and result.device == 0, result
    assert list(result.timings) == NAMES, result.timings
    for t in probe.list_tunables(0):
        times = result.timings[t.name]
        assert set(times) == set(t.candidates), (t.name, times)
        assert all(s > 0 for s in times.values()), times
        chosen = result.chosen[t.name]
        assert chosen in t.candidates, result.chosen
        # The choice follows the measurements: never slower than the default it replaced.
        assert times[chosen] <= times[t.default], (t.name, chosen, times)
        assert probe.get_tunable(t.name, 0) == chosen, t.name
    path = Path(result.cache_file)
    assert path.parent == cache / "probe", path
    assert path.name.startswith("flemu-0.1.0-0-FL-2000"), path.name
    doc = json.loads(path.read_text())
    assert doc["chosen"] == result.chosen and doc["device"] == 0 and doc["format"] == 1, doc
    assert doc["device_name"] == torch.flemu.get_device_properties(0).name, doc


def _write_cache(chosen: dict[str, int], device: int = 0, **override: object) -> Path:
    h = torch_fl.get_plugin()
    path = probe.cache_path(h.plugin_name, h.version, device, h.devices[device].name)
    doc = {"format": 1, "plugin": h.plugin_name, "version": h.version, "device": device,
           "device_name": h.devices[device].name, "chosen": chosen}
    doc.update(override)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_apply_cached_sets_the_cached_values_in_a_fresh_process(cache: Path) -> None:
    _write_cache({"gemm.block_k": 128, "gemm.block_m_tiles": 8})
    out = assert_ok(run_python(
        """
        import json, torch
        from torch_fl.tooling import probe
        applied = probe.apply_cached()
        values = {d: {t.name: probe.get_tunable(t.name, d) for t in probe.list_tunables(d)}
                  for d in (0, 1)}
        print(json.dumps({"applied": applied, "values": values}))
        """, env={"TORCH_FL_CACHE_DIR": str(cache), "TORCH_FL_PROBE": "0"}))
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["applied"] == {"0": {"gemm.block_k": 128, "gemm.block_m_tiles": 8}}, doc
    assert doc["values"]["0"] == {"gemm.block_m_tiles": 8, "gemm.block_n_tiles": 64,
                                  "gemm.block_k": 128}, doc
    assert doc["values"]["1"] == DEFAULTS, doc


@pytest.mark.parametrize("override, reason", [
    ({"device_name": "another chip"}, "it was written for device_name 'another chip'"),
    ({"chosen": {"gemm.block_z": 3}}, "the plugin has no tunable 'gemm.block_z' any more"),
    ({"chosen": {"gemm.block_k": -1}}, "takes values from 1 to 8192"),
    ({"format": 99}, "unknown cache format 99"),
])
def test_unusable_cache_is_ignored_with_a_warning(cache: Path, override: dict, reason: str) -> None:
    rest = {k: v for k, v in override.items() if k != "chosen"}
    path = _write_cache(override.get("chosen", {"gemm.block_k": 128}), **rest)
    with pytest.warns(RuntimeWarning, match="ignoring probe cache") as record:
        applied = probe.apply_cached(0)
    assert applied == {}, applied
    message = str(record[0].message)
    assert str(path) in message and reason in message, message
    assert probe.get_tunable("gemm.block_k", 0) == 256


def test_probe_mode_1_probes_uncached_devices_at_load(cache: Path) -> None:
    out = assert_ok(run_python(
        """
        import json, torch
        from torch_fl.tooling.probe import apply_at_load
        print(json.dumps(apply_at_load()))
        """, env={"TORCH_FL_CACHE_DIR": str(cache), "TORCH_FL_PROBE": "1",
                  "FLEMU_DEVICE_COUNT": "1"}))
    applied = json.loads(out.strip().splitlines()[-1])
    assert list(applied) == ["0"] and set(applied["0"]) == set(NAMES), applied
    files = sorted(p.name for p in (cache / "probe").iterdir())
    assert len(files) == 1 and files[0].startswith("flemu-0.1.0-0-"), files


def test_bad_probe_mode_warns_and_uses_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_cache({"gemm.block_k": 64})
    monkeypatch.setenv("TORCH_FL_PROBE", "sometimes")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        applied = probe.apply_at_load()
    assert applied == {0: {"gemm.block_k": 64}}, applied
    assert any("TORCH_FL_PROBE='sometimes'" in str(w.message) for w in record), record


def test_cached_choice_is_applied_at_next_load(cache: Path) -> None:
    _write_cache({"gemm.block_k": 128})
    out = assert_ok(run_python(
        """
        import torch
        from torch_fl.tooling import probe
        print(probe.get_tunable("gemm.block_k", 0))
        """, env={"TORCH_FL_CACHE_DIR": str(cache)}))
    assert out.strip().splitlines()[-1] == "128", out


def test_cli_probe_and_list(cache: Path) -> None:
    proc = run_python("import sys; from torch_fl.cli import main; sys.exit(main(sys.argv[1:]))",
                      env={"TORCH_FL_CACHE_DIR": str(cache)})
    assert proc.returncode == 2 and "COMMAND" in proc.stderr, proc.stderr
    out = assert_ok(run_python(
        "import sys; from torch_fl.cli import main; "
        "sys.exit(main(['probe', '--device', '1', '--rounds', '1']))",
        env={"TORCH_FL_CACHE_DIR": str(cache)}))
    assert out.startswith("flemu 0.1.0, device 1 (FL-2000 (emulated)): probed in"), out
    for name in NAMES:
        assert f"  {name}: chose " in out, out
    assert f"saved to {cache / 'probe'}" in out, out
    listed = assert_ok(run_python(
        "import sys; from torch_fl.cli import main; sys.exit(main(['probe', '--list']))",
        env={"TORCH_FL_CACHE_DIR": str(cache)}))
    assert listed.splitlines()[2].startswith("gemm.block_k: 256 (default 256; candidates 16, 32"), listed


def test_plugin_without_tunables_says_so(tmp_path: Path) -> None:
    lib = compile_c(ROOT / "tests" / "fixtures" / "bad_plugin.c", tmp_path / "libbad.so")
    proc = run_python(
        "import sys; from torch_fl.cli import main; sys.exit(main(['probe', '--plugin', 'bad']))",
        env={"TORCH_FL_AUTOLOAD": "0", "TORCH_FL_PLUGINS": f"bad={lib}"})
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "plugin 'bad' has no tunables group: there is nothing to probe" in proc.stderr, proc.stderr
