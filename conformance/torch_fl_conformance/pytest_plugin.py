"""The pytest plugin behind `pytest --torchfl-plugin=NAME` and `torchfl-conformance run`.

Loaded in every pytest run of an environment that has torch-fl installed, so it
does nothing unless one of its options is given or a test of the suite is
collected: it registers its options and markers, and imports neither torch nor
the plugin before that.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

SUITE_DIR = Path(__file__).resolve().parent / "suite"
DEFAULT_SEED = 20240601
DEFAULT_TIMEOUT = 300.0
KEY = pytest.StashKey["RunState"]()
ZOO_UNAVAILABLE = "zoo-unavailable"


def selected_models(config: pytest.Config, errors: list[str]) -> list[str]:
    """Zoo model names this run tests (--models patterns). When the zoo cannot be
    imported: the single name ZOO_UNAVAILABLE, with the reason appended to
    `errors` (every test of it reports that ERROR, never a pass)."""
    try:
        from torch_fl_conformance.zoo import all_models
    except Exception as exc:  # noqa: BLE001 - reported as ERROR by the tests, never a pass
        errors.append(f"the model zoo cannot be imported: {type(exc).__name__}: {exc}")
        return [ZOO_UNAVAILABLE]
    state = config.stash.get(KEY, None)
    pats = state.models if state is not None else None
    return [m.name for m in all_models()
            if not pats or any(fnmatch.fnmatchcase(m.name, p) for p in pats)]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("torchfl", "torch-fl conformance")
    g.addoption("--torchfl-plugin", default=None, metavar="NAME|PATH",
                help="plugin to certify: an installed plugin name, a library path, or NAME=PATH")
    g.addoption("--torchfl-level", default="L3", choices=("L0", "L1", "L2", "L3"),
                help="highest certification level to test (default: all)")
    g.addoption("--torchfl-expectations", default=None, metavar="FILE",
                help="expectation file (TOML) of known failures and skips")
    g.addoption("--torchfl-certify", action="store_true",
                help="refuse expected failures and skips of MUST requirements")
    g.addoption("--torchfl-seed", type=int, default=DEFAULT_SEED, help="base random seed")
    g.addoption("--torchfl-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                help="time limit of one test")
    g.addoption("--torchfl-ops", default=None, metavar="NAMES",
                help="comma-separated op_db names (or prefixes ending in '*') the sweeps take")
    g.addoption("--torchfl-models", default=None, metavar="NAMES",
                help="comma-separated model zoo names the training tests take")
    g.addoption("--torchfl-samples", type=int, default=3,
                help="OpInfo samples per operator and dtype (default 3)")
    g.addoption("--torchfl-report", default=None, metavar="DIR",
                help="write the certification report (JSON, HTML, Markdown, JUnit) here")
    # Internal: the command and event pipes of a torchfl-conformance worker.
    g.addoption("--torchfl-worker", default=None, help=argparse.SUPPRESS)


def _active(config: pytest.Config) -> bool:
    return config.getoption("--torchfl-plugin", default=None) is not None or bool(
        config.getoption("--torchfl-worker", default=None)
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    # `pytest --torchfl-plugin=X` with no test path runs the suite, not the cwd's tests.
    ns = early_config.known_args_namespace
    if getattr(ns, "torchfl_plugin", None) and not getattr(ns, "file_or_dir", None):
        args.append(str(SUITE_DIR))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requirement(id): the TFL-<AREA>-<NNN> requirement a conformance test checks"
    )
    config.addinivalue_line(
        "markers", "capability(name): the conformance test needs this advertised capability"
    )
    if not _active(config):
        return
    from torch_fl_conformance.run_state import RunState

    state = RunState.from_config(config)
    config.stash[KEY] = state
    config.pluginmanager.register(state, "torchfl-run-state")
    from torch_fl_conformance import fixtures

    config.pluginmanager.register(fixtures, "torchfl-fixtures")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Levels above the requested one are not even imported (L1 imports op_db)."""
    if not _active(config):
        return None
    try:
        rel = collection_path.resolve().relative_to(SUITE_DIR)
    except ValueError:
        return None
    top = rel.parts[0] if rel.parts else ""
    from torch_fl_conformance.requirements import LEVELS

    if top in LEVELS and LEVELS.index(top) > LEVELS.index(config.getoption("--torchfl-level")):
        return True
    return None


def is_suite_item(item: pytest.Item) -> bool:
    try:
        return SUITE_DIR in Path(item.path).resolve().parents
    except (OSError, ValueError):
        return False


def test_id(item: pytest.Item) -> str:
    """Stable id of a suite test: path under suite/ and the name within the module."""
    rel = Path(item.path).resolve().relative_to(SUITE_DIR).as_posix()
    return rel + "::" + item.nodeid.split("::", 1)[1]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    suite = [i for i in items if is_suite_item(i)]
    if not suite:
        return
    if KEY not in config.stash:
        from torch_fl_conformance.target import describe_choices

        raise pytest.UsageError(describe_choices())
    config.stash[KEY].modify_items(items)


def per_test_seed(base: int, tid: str) -> int:
    return (base + zlib.crc32(tid.encode())) % (2**31)


def write_json_line(fd: int, payload: dict[str, Any]) -> None:
    data = (json.dumps(payload, default=str) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def now() -> float:
    return time.time()
