"""How every operator call on the plugin's device ran: natively, decomposed into
native parts, on the CPU fallback, or failed — per operator and dtype, with the
host time spent (and, of it, the time inside the plugin's kernel functions) and
the bytes copied between host and device."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_fl._op_table import OpStat, OpStatsTable

__all__ = [
    "OpStat",
    "OpStatsTable",
    "fallback_mode",
    "get_fallback_mode",
    "op_stats",
    "op_stats_scope",
    "reset_op_stats",
    "set_fallback_mode",
]

FALLBACK_MODES = ("warn", "silent", "error")


def op_stats() -> OpStatsTable:
    """The counters since the process started (or the last reset_op_stats())."""
    from torch_fl import _C
    from torch_fl._op_table import OpStat, OpStatsTable

    return OpStatsTable(tuple(OpStat(*row) for row in _C.op_stats()), _C.op_stats_setup_ns())


def reset_op_stats() -> None:
    from torch_fl import _C

    _C.op_stats_reset()


class _Scope:
    """What op_stats_scope yields: its table is empty until the block ends."""

    def __init__(self, table: OpStatsTable) -> None:
        self.table = table


@contextlib.contextmanager
def op_stats_scope() -> Iterator[_Scope]:
    """Counts only what runs inside the with block (on every thread):

        with torch_fl.op_stats_scope() as scope:
            model(x)
        print(scope.table)

    Scopes nest. A scope costs what runs inside it, not the size of the
    process's table, so a test harness may open one per case.
    """
    from torch_fl import _C
    from torch_fl._op_table import OpStat, OpStatsTable

    scope = _Scope(OpStatsTable())
    setup_before = _C.op_stats_setup_ns()
    token = _C.op_stats_scope_begin()
    try:
        yield scope
    finally:
        rows = tuple(OpStat(*row) for row in _C.op_stats_scope_end(token))
        scope.table = OpStatsTable(rows, _C.op_stats_setup_ns() - setup_before)


def set_fallback_mode(mode: str) -> None:
    """warn (once per op), silent, or error (CPU fallbacks raise NotImplementedError)."""
    from torch_fl import _C

    if mode not in FALLBACK_MODES:
        raise ValueError(f"fallback mode must be one of {FALLBACK_MODES}, got {mode!r}")
    _C.set_fallback_mode(mode)


def get_fallback_mode() -> str:
    from torch_fl import _C

    return _C.fallback_mode()


@contextlib.contextmanager
def fallback_mode(mode: str) -> Iterator[None]:
    """Sets the fallback mode for the duration of a with block."""
    previous = get_fallback_mode()
    set_fallback_mode(mode)
    try:
        yield
    finally:
        set_fallback_mode(previous)


def __getattr__(name: str):  # noqa: ANN202
    # The snapshot types are created on first use (torch_fl._op_table).
    if name in ("OpStat", "OpStatsTable"):
        from torch_fl import _op_table

        return getattr(_op_table, name)
    raise AttributeError(f"module 'torch_fl.op_stats' has no attribute {name!r}")
