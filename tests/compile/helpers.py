"""Assertions shared by the graph-mode tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch_fl.compile


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 1e-4,
                 atol: float = 1e-5) -> None:
    a = actual.detach().cpu()
    e = expected.detach().cpu()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)}, expected {tuple(e.shape)}"
    assert a.dtype == e.dtype, f"{what}: dtype {a.dtype}, expected {e.dtype}"
    if a.dtype == torch.bool or not a.is_floating_point():
        mismatched = int((a != e).sum())
        assert mismatched == 0, f"{what}: {mismatched} of {a.numel()} elements differ"
        return
    diff = (a.double() - e.double()).abs()
    bound = atol + rtol * e.double().abs()
    bad = diff > bound
    nan_mismatch = a.isnan() != e.isnan()
    worst = float(diff.nan_to_num(0).max()) if diff.numel() else 0.0
    assert not bool((bad & ~(a.isnan() & e.isnan())).any() or nan_mismatch.any()), (
        f"{what}: max abs difference {worst:.3g} beyond atol={atol} rtol={rtol}"
    )


def graph_reports(kind: str | None = None) -> list[torch_fl.compile.GraphReport]:
    return [r for r in torch_fl.compile.reports() if kind is None or r.kind == kind]


def accepted_ops(reports: Iterable[torch_fl.compile.GraphReport]) -> list[list[str]]:
    return [r.ops for g in reports for r in g.accepted_regions]


def on_cpu(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn` run eagerly on CPU copies of the arguments: the reference for
    graph-mode results (the conformance suite's reference too)."""
    moved = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        return fn(*moved)
