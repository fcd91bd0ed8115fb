"""Every test of the suite declares a known requirement of its own level; a test
that does not is an error of the suite, reported before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_env
from torch_fl_conformance.expectations import Expectations
from torch_fl_conformance.run_state import RunState
from torch_fl_conformance.session import SUITE_DIR


class _Mark:
    def __init__(self, name: str, *args: Any) -> None:
        self.name, self.args = name, args


class _Item:
    """The parts of a pytest item RunState.modify_items reads."""

    def __init__(self, folder: str, name: str, marks: list[_Mark]) -> None:
        self.path = SUITE_DIR / folder / "test_fake.py"
        self.nodeid = f"{folder}/test_fake.py::{name}"
        self.marks = marks
        self.added: list[Any] = []

    def iter_markers(self, name: str) -> list[_Mark]:
        return [m for m in self.marks if m.name == name]

    def get_closest_marker(self, name: str) -> _Mark | None:
        found = self.iter_markers(name)
        return found[0] if found else None

    def add_marker(self, mark: Any) -> None:
        self.added.append(mark)


def _state() -> RunState:
    return RunState(config=None, target=None, seed=1, timeout=5.0, level="L3", samples=1,
                    ops=None, models=None, certify=False, expectations=Expectations(),
                    report_dir=None, worker_fds=None)


@pytest.mark.parametrize(("folder", "marks", "problem"), [
    ("L0", [], "needs exactly one @pytest.mark.requirement"),
    ("L0", [_Mark("requirement", "TFL-SMOKE-999")], "is not in requirements.toml"),
    ("L1", [_Mark("requirement", "TFL-SMOKE-001")], "lives in L1/ but checks TFL-SMOKE-001"),
    ("L0", [_Mark("requirement", "TFL-SMOKE-001"), _Mark("requirement", "TFL-SMOKE-002")],
     "needs exactly one"),
])
def test_bad_requirement_markers_are_suite_errors(folder: str, marks: list[_Mark],
                                                  problem: str) -> None:
    items = [_Item(folder, "test_a", marks)]
    with pytest.raises(pytest.UsageError, match="conformance suite error") as err:
        _state().modify_items(items)  # type: ignore[arg-type]
    assert problem in str(err.value), str(err.value)


def test_good_marker_gets_metadata_and_time_limit() -> None:
    state = _state()
    item = _Item("L0", "test_a", [_Mark("requirement", "TFL-SMOKE-001")])
    state.modify_items([item])  # type: ignore[list-item]
    meta = state.meta["L0/test_fake.py::test_a"]
    assert (meta.requirement, meta.strength, meta.level) == ("TFL-SMOKE-001", "MUST", "L0")
    assert any(getattr(m, "name", "") == "timeout" for m in item.added), item.added


@pytest.mark.slow
def test_the_whole_suite_collects_with_valid_requirements(tmp_path: Path,
                                                          flemu_library: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE_DIR), "--collect-only", "-q",
         "-p", "no:cacheprovider", "--torchfl-plugin=flemu", "--torchfl-level=L3",
         "--torchfl-ops=add,mm"],
        check=False, capture_output=True, text=True, env=cli_env(), cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    collected = [ln for ln in r.stdout.splitlines() if "::" in ln]
    folders = {ln.split("/suite/")[-1].split("/")[0] for ln in collected}
    assert folders == {"L0", "L1", "L2", "L3"}, folders
    assert len(collected) > 150, len(collected)
