"""sort, topk, cumsum and cumprod on flemu against the CPU: every dim,
descending/largest, stable order of ties, NaN placement, strided inputs, out=
variants, dtype promotion of the scans, backward through autograd."""

from __future__ import annotations

import pytest
import torch
from native_check import FLOAT_DTYPES, assert_close, make, run_native, tol

SORT = ["aten::sort.stable"]


def distinct(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values without ties (a permutation), so every valid order is the same."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g) - n // 2).reshape(shape).to(dtype)


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, torch.int64, torch.int16], ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_sort_matches_cpu(dtype: torch.dtype, dim: int, descending: bool) -> None:
    x = distinct((6, 5, 7), dtype, seed=1)
    out = run_native(lambda: torch.sort(x.to("flemu"), dim=dim, descending=descending), SORT)
    ref = torch.sort(x, dim=dim, descending=descending)
    assert_close(out, ref)


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_stable_sort_keeps_order_of_ties_and_places_nan(descending: bool) -> None:
    x = make((4, 40), torch.float32, seed=2, low=-3, high=3).round()  # many ties
    x[1, 3] = x[2, 0] = x[2, 39] = float("nan")
    x[3, 5] = float("inf")
    x[3, 6] = float("-inf")
    out = run_native(lambda: torch.sort(x.to("flemu"), dim=1, descending=descending, stable=True), SORT)
    assert_close(out, torch.sort(x, dim=1, descending=descending, stable=True))


def test_sort_bool_strided_and_out() -> None:
    x = make((9, 8), torch.bool, seed=3).t()  # non-contiguous, ties everywhere
    values = torch.empty(0, dtype=torch.bool, device="flemu")
    indices = torch.empty(0, dtype=torch.int64, device="flemu")

    def run() -> tuple[torch.Tensor, ...]:
        torch.sort(x.to("flemu"), dim=0, stable=True, out=(values, indices))
        return values, indices

    assert_close(run_native(run, ["aten::sort.values_stable"]), torch.sort(x, dim=0, stable=True))


def test_sort_zero_dim_and_empty() -> None:
    x0 = torch.tensor(2.5)
    assert_close(run_native(lambda: torch.sort(x0.to("flemu")), SORT), torch.sort(x0))
    e = torch.empty(3, 0)
    assert_close(run_native(lambda: torch.sort(e.to("flemu"), dim=1), ()), torch.sort(e, dim=1))


def test_sort_and_argsort_backward() -> None:
    x = make((3, 8), torch.float64, seed=4).requires_grad_()
    w = make((3, 8), torch.float64, seed=5)
    (torch.sort(x, dim=1).values * w).sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.detach().to("flemu").requires_grad_()
        (torch.sort(xd, dim=1).values * w.to("flemu")).sum().backward()
        return torch.argsort(xd.detach(), dim=0), xd.grad

    order, grad = run_native(run, SORT)
    assert_close(order, torch.argsort(x.detach(), dim=0))
    assert_close(grad, x.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dim,k", [(1, 3), (0, 1), (-1, 7), (1, 0)])
def test_topk_matches_cpu(dtype: torch.dtype, largest: bool, dim: int, k: int) -> None:
    x = distinct((5, 7), dtype, seed=6)
    out = run_native(lambda: torch.topk(x.to("flemu"), k, dim=dim, largest=largest), ["aten::topk"])
    assert_close(out, torch.topk(x, k, dim=dim, largest=largest))


def test_topk_unsorted_nan_and_backward() -> None:
    x = make((4, 9), torch.float32, seed=7)
    x[0, 4] = float("nan")
    dv, di = run_native(lambda: torch.topk(x.to("flemu"), 4, dim=1, sorted=False), ["aten::topk"])
    rv, ri = torch.topk(x, 4, dim=1, sorted=False)
    # Any order is valid when sorted=False: compare as sorted sets.
    assert_close(dv.sort(dim=1, descending=True).values, rv.sort(dim=1, descending=True).values)
    assert_close(di.sort(dim=1).values, ri.sort(dim=1).values)

    xc = make((4, 9), torch.float32, seed=8).requires_grad_()
    torch.topk(xc, 3).values.pow(2).sum().backward()

    def run() -> torch.Tensor:
        xd = xc.detach().to("flemu").requires_grad_()
        torch.topk(xd, 3).values.pow(2).sum().backward()
        return xd.grad

    assert_close(run_native(run, ["aten::topk"]), xc.grad)


# PyTorch's meta function rejects k; the bridge's fallback chain reports the CPU's error.
@pytest.mark.filterwarnings("ignore:.*is not native:UserWarning")
def test_topk_rejects_k_out_of_range() -> None:
    with pytest.raises(RuntimeError, match="k|range"):
        torch.topk(torch.zeros(2, 3, device="flemu"), 4)
        torch.flemu.synchronize()


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("dim", [0, 2, -2])
def test_cumsum_cumprod_match_cpu(dtype: torch.dtype, dim: int) -> None:
    x = make((4, 5, 6), dtype, seed=9, low=-1.5, high=1.5, noncontiguous=True)

    def run(device: str) -> list[torch.Tensor]:
        xd = x.to(device)
        out = torch.empty(0, dtype=dtype, device=device)
        torch.cumsum(xd, dim, out=out)
        inplace = xd.clone()
        inplace.cumsum_(dim)  # integers: in place keeps the dtype, out of place gives int64
        return [torch.cumsum(xd, dim), torch.cumprod(xd, dim), out, inplace]

    outs = run_native(lambda: run("flemu"), ["aten::cumsum", "aten::cumprod"])
    for o, r in zip(outs, run("cpu")):
        assert_close(o, r, **tol(dtype, 4))


def test_cumsum_dtype_promotion() -> None:
    """Integers and bools accumulate into int64; dtype= converts first (float64 -> float32)."""
    mask = make((3, 10), torch.bool, seed=10)
    ints = make((3, 10), torch.int32, seed=11, low=-100, high=100)
    f64 = make((3, 10), torch.float64, seed=12) * 1e3 + 1 / 3

    def run() -> list[torch.Tensor]:
        return [torch.cumsum(mask.to("flemu"), 1), torch.cumsum(ints.to("flemu"), 0),
                torch.cumsum(f64.to("flemu"), 1, dtype=torch.float32), torch.cumprod(ints.to("flemu"), 1)]

    outs = run_native(run, ["aten::cumsum", "aten::cumprod"])
    refs = [torch.cumsum(mask, 1), torch.cumsum(ints, 0), torch.cumsum(f64, 1, dtype=torch.float32),
            torch.cumprod(ints, 1)]
    for o, r in zip(outs, refs):
        assert_close(o, r, **tol(torch.float32))


def test_cumsum_long_row_and_backward() -> None:
    x = make((100_000,), torch.float32, seed=13).requires_grad_()
    w = make((100_000,), torch.float32, seed=14)
    (torch.cumsum(x, 0) * w).sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.detach().to("flemu").requires_grad_()
        y = torch.cumsum(xd, 0)
        (y * w.to("flemu")).sum().backward()
        return y, xd.grad

    y, grad = run_native(run, ["aten::cumsum", "aten::flip"])  # the backward flips, scans, flips
    # The CPU accumulates float32 in double, as flemu does.
    assert_close(y, torch.cumsum(x.detach(), 0), atol=1e-4, rtol=1e-5)
    assert_close(grad, x.grad, atol=1e-4, rtol=1e-5)


def test_cumsum_zero_dim() -> None:
    x = torch.tensor(3.5)
    assert_close(run_native(lambda: torch.cumsum(x.to("flemu"), 0), ()), torch.cumsum(x, 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("dims", [(0,), (-1,), (0, 2), (2, 1, 0), ()], ids=str)
def test_flip_matches_cpu(dtype: torch.dtype, dims: tuple[int, ...]) -> None:
    x = make((3, 4, 5), dtype, seed=15, noncontiguous=True)
    out = run_native(lambda: torch.flip(x.to("flemu"), dims), ["aten::flip"])
    assert_close(out, torch.flip(x, dims))


@pytest.mark.filterwarnings("ignore:.*is not native:UserWarning")
def test_flip_rejects_repeated_dim() -> None:
    with pytest.raises(RuntimeError, match="dim"):
        torch.flip(torch.zeros(2, 3, device="flemu"), (1, -1))
        torch.flemu.synchronize()
