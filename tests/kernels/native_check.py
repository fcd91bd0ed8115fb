"""Running an operation on flemu with CPU fallbacks forbidden and checking which
operators ran natively, plus comparison against the same operation on the CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch_fl
from torch.utils._pytree import tree_map

DEVICE = "flemu"

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# Tolerances per dtype for results compared with the CPU (fp16/bf16 are
# computed in float32 on both sides but rounded at different points).
TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float64: {"atol": 1e-12, "rtol": 1e-12},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
}


def tol(dtype: torch.dtype, scale: float = 1.0) -> dict[str, float]:
    t = TOL.get(dtype, {"atol": 0.0, "rtol": 0.0})
    return {k: v * scale for k, v in t.items()}


def to_device(x: Any) -> Any:
    return tree_map(lambda t: t.to(DEVICE) if isinstance(t, torch.Tensor) else t, x)


def to_cpu(x: Any) -> Any:
    return tree_map(lambda t: t.to("cpu") if isinstance(t, torch.Tensor) else t, x)


def run_native(fn: Callable[[], Any], ops: Iterable[str]) -> Any:
    """Runs fn() with fallbacks forbidden; asserts every op in `ops` ran natively
    and that nothing fell back or failed."""
    with torch_fl.fallback_mode("error"), torch_fl.op_stats_scope() as scope:
        out = fn()
        torch.flemu.synchronize()
    table = scope.table
    for op in ops:
        row = table.get(op)
        assert row.native > 0, f"{op} did not run natively (stats {row}); all ops:\n{table}"
    bad = [f"{r.op} ({r.dtype})" for r in table if r.cpu_fallback or r.failed]
    assert not bad, f"operators not native: {bad}\n{table}"
    return out


def assert_close(actual: Any, expected: Any, **tolerances: float) -> None:
    actual = to_cpu(actual)
    for a, e in zip(_leaves(actual), _leaves(expected)):
        assert a.dtype == e.dtype, f"dtype {a.dtype} != expected {e.dtype}"
        torch.testing.assert_close(a, e, equal_nan=True, **tolerances)


def _leaves(x: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def make(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0, low: float = -2.0, high: float = 2.0,
         noncontiguous: bool = False) -> torch.Tensor:
    """A CPU tensor with values in [low, high); transposed storage when noncontiguous."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        t = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
        t = t.to(dtype)
    elif dtype == torch.bool:
        t = torch.rand(shape, generator=g) < 0.5
    else:
        t = torch.randint(int(low), int(high) + 1, shape, generator=g).to(dtype)
    if noncontiguous and t.dim() >= 2:
        t = t.transpose(0, 1).contiguous().transpose(0, 1)
        assert not t.is_contiguous() or min(t.shape[:2]) <= 1
    return t
