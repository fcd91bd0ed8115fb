"""What every part of a conformance session shares: where the suite lives, the
defaults, the stash key of the run state, the grammar of test ids, seeds, and the
zoo selection. Imported by the pytest hooks, the run state, the fixtures, the
runner and the CLI; it imports none of them (and neither torch nor the plugin).
"""

from __future__ import annotations

import fnmatch
import re
import zlib
from pathlib import Path

import pytest

__all__ = [
    "DEFAULT_SEED",
    "DEFAULT_TIMEOUT",
    "KEY",
    "SUITE_DIR",
    "ZOO_UNAVAILABLE",
    "evaluation_key",
    "is_suite_item",
    "item_id",
    "op_of",
    "opinfo_case_of",
    "per_test_seed",
    "selected_models",
]

SUITE_DIR = Path(__file__).resolve().parent / "suite"
DEFAULT_SEED = 20240601
DEFAULT_TIMEOUT = 300.0
KEY = pytest.StashKey["RunState"]()
ZOO_UNAVAILABLE = "zoo-unavailable"

# Test ids of the op_db sweep: L1/test_opinfo.py::test_op[<op>-<dtype>-<check>].
_OPINFO_ID = re.compile(r"^L1/test_opinfo\.py::test_op\[(.+)-([a-z0-9]+)-([a-z_]+)\]$")
# Tests that share one evaluation: the checks of one op_db case, of one zoo model.
_SHARED = re.compile(r"^(L1/test_opinfo\.py::test_op\[.+-[a-z0-9]+|L2/test_models\.py::"
                     r"test_model\[.+)-[a-z_]+\]$")
# Gradcheck tests: L1/test_gradcheck.py::test_gradients[<op>-<dtype>].
_GRADCHECK_ID = re.compile(r"^L1/test_gradcheck\.py::test_gradients\[(.+)-([a-z0-9]+)\]$")


def is_suite_item(item: pytest.Item) -> bool:
    try:
        return SUITE_DIR in Path(item.path).resolve().parents
    except (OSError, ValueError):
        return False


def item_id(item: pytest.Item) -> str:
    """Stable id of a suite test: path under suite/ and the name within the module."""
    rel = Path(item.path).resolve().relative_to(SUITE_DIR).as_posix()
    return rel + "::" + item.nodeid.split("::", 1)[1]


def opinfo_case_of(tid: str) -> tuple[str, str, str] | None:
    """(op, dtype, check) of a sweep test id; None for other tests."""
    m = _OPINFO_ID.match(tid)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def op_of(tid: str) -> str | None:
    """The op_db operator a test exercises (sweep and gradcheck tests); None otherwise."""
    m = _OPINFO_ID.match(tid) or _GRADCHECK_ID.match(tid)
    return m.group(1) if m else None


def evaluation_key(tid: str) -> str:
    """Tests with the same key share one evaluation (adjacent, never split)."""
    m = _SHARED.match(tid)
    return m.group(1) if m else tid


def per_test_seed(base: int, tid: str) -> int:
    return (base + zlib.crc32(tid.encode())) % (2**31)


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
