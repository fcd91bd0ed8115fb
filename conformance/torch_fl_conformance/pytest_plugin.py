"""The pytest hooks behind `pytest --torchfl-plugin=NAME` and `torchfl-conformance run`.

Loaded in every pytest run of an environment that has torch-fl installed, so it
does nothing unless one of its options is given or a test of the suite is
collected: it registers its options and markers, and imports neither torch nor
the plugin before that. Hooks only: what the session shares lives in `session`,
the per-run state and its hooks in `run_state`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from torch_fl_conformance.session import (
    DEFAULT_SEED,
    DEFAULT_TIMEOUT,
    KEY,
    SUITE_DIR,
    is_suite_item,
)


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
    g.addoption("--torchfl-samples", type=int, default=None,
                help="OpInfo samples per operator and dtype (default: the sweep's budget)")
    g.addoption("--torchfl-report", default=None, metavar="DIR",
                help="write the certification report (JSON, HTML, Markdown, JUnit) here")
    # Internal: the command and event pipes and the kernel trace of a worker.
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


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    suite = [i for i in items if is_suite_item(i)]
    if not suite:
        return
    if KEY not in config.stash:
        from torch_fl_conformance.target import describe_choices

        raise pytest.UsageError(describe_choices())
    config.stash[KEY].modify_items(items)
