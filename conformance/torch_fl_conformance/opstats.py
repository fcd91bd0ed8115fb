"""Operator statistics for the sweep, kept cheap as the run goes on.

torch_fl.op_stats_scope() diffs two snapshots of the whole table, which grows with
every (op, dtype) the process has run: late in an L1 sweep each scope cost tens of
milliseconds. Here the bridge's counters are folded into a suite-side total and
reset around each scope, so a scope reads only what ran inside it; rows() gives
the process's cumulative table for the report, as torch_fl.op_stats() would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["rows", "scope"]

_FIELDS = ("native", "decomposed", "cpu_fallback", "failed", "time_ns", "bytes_copied")
_total: dict[tuple[str, str], list[int]] = {}


def _fold() -> None:
    import torch_fl

    for r in torch_fl.op_stats():
        acc = _total.setdefault((r.op, r.dtype), [0] * len(_FIELDS))
        for i, f in enumerate(_FIELDS):
            acc[i] += getattr(r, f)
    torch_fl.reset_op_stats()


class Scope:
    table: Any = ()


@contextlib.contextmanager
def scope() -> Iterator[Scope]:
    """Like torch_fl.op_stats_scope(): .table holds what ran inside the block."""
    import torch_fl

    s = Scope()
    _fold()
    try:
        yield s
    finally:
        s.table = torch_fl.op_stats()
        _fold()


def rows() -> list[dict[str, Any]]:
    """Cumulative op statistics of this process (folded totals plus live counters)."""
    import torch_fl

    total = {k: list(v) for k, v in _total.items()}
    for r in torch_fl.op_stats():
        acc = total.setdefault((r.op, r.dtype), [0] * len(_FIELDS))
        for i, f in enumerate(_FIELDS):
            acc[i] += getattr(r, f)
    return [{"op": op, "dtype": dtype, **dict(zip(_FIELDS, v))}
            for (op, dtype), v in sorted(total.items())]
