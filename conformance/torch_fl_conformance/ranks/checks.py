"""What ranks exchange in collective checks and how arrivals are judged: small
integers, exact in every dtype (products stay below 2^world), so a reduction's
expected value is computed on the host without rounding."""

from __future__ import annotations

from typing import Any

__all__ = ["assert_equal", "expected_reduction", "values"]


def values(rank: int, n: int, dtype: Any, op: str = "sum", offset: int = 0) -> Any:
    """Rank `rank`'s input of `n` elements."""
    import torch

    i = torch.arange(offset, offset + n, dtype=torch.int64)
    if dtype == torch.bool:
        return (i + rank) % 3 == 0
    if op == "product":
        return ((i + rank) % 2 + 1).to(dtype)
    return ((i + 3 * rank) % 5 + 1).to(dtype)


def expected_reduction(world: int, n: int, dtype: Any, op: str) -> Any:
    """The reduction `op` of every rank's values(), computed on the host."""
    import torch

    stack = torch.stack([values(r, n, dtype, op).to(torch.float64) for r in range(world)])
    if dtype == torch.bool:
        out = {
            "sum": stack.amax(0),
            "product": stack.amin(0),
            "min": stack.amin(0),
            "max": stack.amax(0),
        }[op]
        return out.to(torch.bool)
    out = {
        "sum": stack.sum(0),
        "product": stack.prod(0),
        "min": stack.amin(0),
        "max": stack.amax(0),
        "avg": stack.sum(0),
    }[op]
    if op == "avg":
        out = (
            out / world if dtype.is_floating_point else torch.div(out, world, rounding_mode="trunc")
        )
    return out.to(dtype)


def assert_equal(actual: Any, expected: Any, what: str) -> None:
    """Exact for integers and bool; 16-bit floats within 1e-2 relative (an average
    rounds), wider floats within 1e-6."""
    import torch

    actual = actual.cpu()
    expected = expected.to(actual.dtype)
    if actual.dtype.is_floating_point or actual.dtype.is_complex:
        wide = torch.complex128 if actual.is_complex() else torch.float64
        ok = torch.allclose(
            actual.to(wide),
            expected.to(wide),
            rtol=1e-2 if actual.element_size() == 2 else 1e-6,
            atol=0,
        )
    else:
        ok = torch.equal(actual, expected)
    if not ok:
        diff = (actual != expected).nonzero()
        first = diff[0].tolist() if len(diff) else []
        raise AssertionError(
            f"{what}: actual differs from expected at {len(diff)} positions, first {first}: "
            f"actual {actual.flatten()[:8].tolist()} expected {expected.flatten()[:8].tolist()}"
        )
