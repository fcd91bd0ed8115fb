"""Tensor plumbing on flemu against the CPU: cat/stack/split, comparisons,
logical and bitwise ops, where, masked_fill, isnan/isinf, index_select,
gather, scatter/scatter_add, advanced indexing (index.Tensor, index_put),
arange and the full/zeros/ones factories."""

from __future__ import annotations

import pytest
import torch
from native_check import assert_close, make, run_native

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cat_stack_split(dtype: torch.dtype) -> None:
    a = make((2, 3, 4), dtype, seed=1, noncontiguous=True)
    b = make((2, 5, 4), dtype, seed=2)
    c = make((2, 3, 4), dtype, seed=3)

    def run() -> list[torch.Tensor]:
        ad, bd, cd = a.to("flemu"), b.to("flemu"), c.to("flemu")
        parts = torch.split(torch.cat([ad, bd], 1), [3, 5], dim=1)
        return [torch.cat([ad, bd, ad], dim=1), torch.cat([ad, cd], dim=-1), torch.stack([ad, cd], 0),
                torch.stack([ad, cd], 3), parts[1].contiguous(), torch.cat([ad.flatten(), torch.empty(0, dtype=dtype, device="flemu")])]

    outs = run_native(run, ["aten::cat"])
    refs = [torch.cat([a, b, a], dim=1), torch.cat([a, c], dim=-1), torch.stack([a, c], 0), torch.stack([a, c], 3), b,
            a.flatten()]
    assert_close(outs, refs)


def test_cat_promotes_mixed_dtypes() -> None:
    a = make((2, 3), torch.float16, seed=4)
    b = make((4, 3), torch.float32, seed=5)
    i = make((1, 3), torch.int64, seed=6, low=-3, high=3)
    out = run_native(lambda: torch.cat([a.to("flemu"), b.to("flemu"), i.to("flemu")]), ["aten::cat"])
    assert_close(out, torch.cat([a, b, i]))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int64, torch.bool), ids=str)
def test_comparisons(dtype: torch.dtype) -> None:
    a = make((4, 5), dtype, seed=7, low=-3, high=3, noncontiguous=True)
    b = make((5,), dtype, seed=8, low=-3, high=3)
    ops = [torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]

    def run() -> list[torch.Tensor]:
        ad, bd = a.to("flemu"), b.to("flemu")
        return [op(ad, bd) for op in ops] + [op(ad, 1) for op in ops] + [ad > 0.5]

    names = [f"aten::{n}.{o}" for n in ("eq", "ne", "lt", "le", "gt", "ge") for o in ("Tensor", "Scalar")]
    outs = run_native(run, names)
    refs = [op(a, b) for op in ops] + [op(a, 1) for op in ops] + [a > 0.5]
    assert_close(outs, refs)


def test_comparison_of_mixed_dtypes_promotes() -> None:
    a = make((6,), torch.int64, seed=9, low=-3, high=3)
    b = make((6,), torch.float32, seed=10, low=-3, high=3)
    out = run_native(lambda: a.to("flemu") < b.to("flemu"), ["aten::lt.Tensor"])
    assert_close(out, a < b)


def test_logical_and_bitwise() -> None:
    p = make((3, 7), torch.bool, seed=11)
    q = make((7,), torch.bool, seed=12)
    x = make((3, 7), torch.float32, seed=13, low=-1, high=1).round()
    i = make((3, 7), torch.int64, seed=14, low=-50, high=50)

    def run() -> list[torch.Tensor]:
        pd, qd, xd, idv = p.to("flemu"), q.to("flemu"), x.to("flemu"), i.to("flemu")
        return [~pd, pd & qd, pd | qd, torch.logical_and(xd, pd), torch.logical_or(xd, qd), torch.logical_xor(pd, qd),
                torch.logical_not(xd), ~idv, idv & 7, idv | 8]

    outs = run_native(run, ["aten::bitwise_not", "aten::bitwise_and.Tensor", "aten::bitwise_or.Tensor",
                            "aten::logical_and", "aten::logical_or", "aten::logical_xor", "aten::logical_not"])
    refs = [~p, p & q, p | q, torch.logical_and(x, p), torch.logical_or(x, q), torch.logical_xor(p, q),
            torch.logical_not(x), ~i, i & 7, i | 8]
    assert_close(outs, refs)


def test_isnan_isinf_family() -> None:
    x = torch.tensor([0.0, float("nan"), float("inf"), -float("inf"), -2.0])
    fns = [torch.isnan, torch.isinf, torch.isneginf, torch.isposinf, torch.isfinite]
    outs = run_native(lambda: [f(x.to("flemu")) for f in fns],
                      ["aten::isnan", "aten::isinf", "aten::isneginf", "aten::isposinf"])
    assert_close(outs, [f(x) for f in fns])
    n = torch.arange(3)
    assert_close(run_native(lambda: torch.isinf(n.to("flemu")), []), torch.isinf(n))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.int64, torch.bool), ids=str)
def test_where_and_masked_fill(dtype: torch.dtype) -> None:
    c = make((4, 6), torch.bool, seed=15)
    a = make((4, 6), dtype, seed=16, noncontiguous=True)
    b = make((6,), dtype, seed=17)

    def run() -> list[torch.Tensor]:
        cd, ad, bd = c.to("flemu"), a.to("flemu"), b.to("flemu")
        inplace = ad.clone()
        inplace.masked_fill_(cd[0], 1)
        return [torch.where(cd, ad, bd), torch.where(cd, ad, 0), ad.masked_fill(cd, 1), inplace,
                ad.masked_fill(cd, torch.tensor(0, dtype=dtype, device="flemu"))]

    outs = run_native(run, ["aten::where.self", "aten::masked_fill.Scalar", "aten::masked_fill_.Scalar",
                            "aten::masked_fill.Tensor"])
    inplace = a.clone()
    inplace.masked_fill_(c[0], 1)
    refs = [torch.where(c, a, b), torch.where(c, a, 0), a.masked_fill(c, 1), inplace,
            a.masked_fill(c, torch.tensor(0, dtype=dtype))]
    assert_close(outs, refs)


def test_where_mixed_dtypes_and_backward() -> None:
    c = make((5,), torch.bool, seed=18)
    a = make((5,), torch.float32, seed=19)
    i = make((5,), torch.int64, seed=20, low=-4, high=4)
    out = run_native(lambda: torch.where(c.to("flemu"), a.to("flemu"), i.to("flemu")), ["aten::where.self"])
    assert_close(out, torch.where(c, a, i))
    ac = a.clone().requires_grad_()
    torch.where(c, ac, 0.0).sum().backward()

    def run() -> torch.Tensor:
        ad = a.to("flemu").requires_grad_()
        torch.where(c.to("flemu"), ad, 0.0).sum().backward()
        return ad.grad

    assert_close(run_native(run, ["aten::where.self"]), ac.grad)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int64), ids=str)
def test_index_select(dtype: torch.dtype) -> None:
    x = make((5, 7, 3), dtype, seed=21, noncontiguous=True)
    i0 = torch.tensor([4, 0, 0, 2, 3])
    i2 = torch.tensor([2, 0, 1, 1])
    outs = run_native(lambda: [x.to("flemu").index_select(0, i0.to("flemu")),
                               x.to("flemu").index_select(2, i2.to("flemu")),
                               x[0, 0].to("flemu").index_select(0, torch.tensor(1, device="flemu"))],
                      ["aten::index_select"])
    assert_close(outs, [x.index_select(0, i0), x.index_select(2, i2), x[0, 0].index_select(0, torch.tensor(1))])


def test_index_select_backward() -> None:
    x = make((6, 4), torch.float32, seed=29)
    idx = torch.tensor([5, 1, 1, 0])
    xc = x.clone().requires_grad_()
    xc.index_select(0, idx).pow(2).sum().backward()

    def run() -> torch.Tensor:
        xd = x.to("flemu").requires_grad_()
        xd.index_select(0, idx.to("flemu")).pow(2).sum().backward()
        return xd.grad

    assert_close(run_native(run, ["aten::index_select"]), xc.grad)


def test_index_select_out_of_range_fails() -> None:
    x = torch.zeros(3, 2, device="flemu")
    with pytest.raises(ValueError, match="out of bounds"):
        x.index_select(0, torch.tensor([3], device="flemu"))
        torch.flemu.synchronize()


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.int64), ids=str)
def test_gather_scatter(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype, seed=22, noncontiguous=True)
    g = torch.Generator().manual_seed(23)
    idx = torch.randint(0, 6, (4, 3), generator=g)
    src = make((4, 3), dtype, seed=24)
    sidx = torch.randint(0, 4, (3, 6), generator=g)
    ssrc = make((3, 6), dtype, seed=25)

    def run() -> list[torch.Tensor]:
        xd = x.to("flemu")
        inplace = xd.clone()
        inplace.scatter_add_(0, sidx.to("flemu"), ssrc.to("flemu"))
        return [torch.gather(xd, 1, idx.to("flemu")), xd.scatter_add(0, sidx.to("flemu"), ssrc.to("flemu")), inplace,
                xd.scatter(1, idx.to("flemu"), src.to("flemu")), xd.scatter(1, idx.to("flemu"), 7)]

    outs = run_native(run, ["aten::gather", "aten::scatter_add", "aten::scatter_add_", "aten::scatter.src",
                            "aten::scatter.value"])
    inplace = x.clone()
    inplace.scatter_add_(0, sidx, ssrc)
    # scatter with duplicate indices keeps one of the written values: compare
    # only where the index is unique per row.
    refs = [torch.gather(x, 1, idx), x.scatter_add(0, sidx, ssrc), inplace]
    assert_close(outs[:3], refs, atol=1e-2 if dtype == torch.float16 else 1e-5, rtol=1e-3)
    assert_close(outs[4], x.scatter(1, idx, 7))
    for r in range(4):
        cols, counts = idx[r].unique(return_counts=True)
        for col, n in zip(cols.tolist(), counts.tolist()):
            if n == 1:
                j = int((idx[r] == col).nonzero()[0])
                assert outs[3].cpu()[r, col] == src[r, j], f"scatter row {r} col {col}"


@pytest.mark.parametrize("dtype", (torch.uint8, torch.int8, torch.bool, torch.float32, torch.int64), ids=str)
def test_gather_scatter_with_an_empty_index(dtype: torch.dtype) -> None:
    """An index without elements selects nothing: PyTorch looks at neither its
    dtype nor its shape (OpInfo's gather samples pass an empty uint8 index)."""
    x = make((4, 6), torch.float32, seed=30)
    src = make((4, 6), torch.float32, seed=31)
    flat = torch.empty(0, dtype=dtype)  # 1-D beside a 2-D self
    cols = torch.empty((4, 0), dtype=dtype)

    def run() -> list[torch.Tensor]:
        xd, sd, fd, cd = x.to("flemu"), src.to("flemu"), flat.to("flemu"), cols.to("flemu")
        inplace = xd.clone()
        inplace.scatter_add_(1, cd, sd)
        return [torch.gather(xd, 0, fd), torch.gather(xd, 1, cd), xd.scatter(0, fd, sd), xd.scatter(1, cd, 2.5),
                xd.scatter_add(0, fd, sd), inplace]

    outs = run_native(run, ["aten::gather", "aten::scatter.src", "aten::scatter.value", "aten::scatter_add",
                            "aten::scatter_add_"])
    assert_close(outs, [torch.gather(x, 0, flat), torch.gather(x, 1, cols), x.scatter(0, flat, src),
                        x.scatter(1, cols, 2.5), x.scatter_add(0, flat, src), x.clone().scatter_add_(1, cols, src)])


def test_gather_scatter_with_0_dim_tensors() -> None:
    """PyTorch counts a 0-dim self or index as one dim of size 1."""
    x0 = make((), torch.float32, seed=32)
    x1 = make((5,), torch.float32, seed=33)
    one, scalar = torch.tensor([0]), torch.tensor(3)

    def run() -> list[torch.Tensor]:
        d0, d1 = x0.to("flemu"), x1.to("flemu")
        return [torch.gather(d0, 0, one.to("flemu")), torch.gather(d0, 0, torch.tensor(0).to("flemu")),
                torch.gather(d1, 0, scalar.to("flemu")), d1.scatter(0, scalar.to("flemu"), 7.0),
                d0.scatter(0, one.to("flemu"), 2.0)]

    outs = run_native(run, ["aten::gather", "aten::scatter.value"])
    assert_close(outs, [torch.gather(x0, 0, one), torch.gather(x0, 0, torch.tensor(0)), torch.gather(x1, 0, scalar),
                        x1.scatter(0, scalar, 7.0), x0.scatter(0, one, 2.0)])


def test_gather_backward_uses_scatter_add() -> None:
    x = make((3, 5), torch.float32, seed=26)
    idx = torch.tensor([[0, 0, 4], [1, 2, 3], [4, 4, 4]])
    xc = x.clone().requires_grad_()
    torch.gather(xc, 1, idx).pow(2).sum().backward()

    def run() -> torch.Tensor:
        xd = x.to("flemu").requires_grad_()
        torch.gather(xd, 1, idx.to("flemu")).pow(2).sum().backward()
        return xd.grad

    assert_close(run_native(run, ["aten::gather"]), xc.grad)


def test_advanced_indexing() -> None:
    x = make((4, 5, 6), torch.float32, seed=27)
    i = torch.tensor([[0, 3], [2, 2]])
    j = torch.tensor([1, 4])

    def run() -> list[torch.Tensor]:
        xd, idv, jd = x.to("flemu"), i.to("flemu"), j.to("flemu")
        return [xd[idv], xd[:, jd], xd[idv, jd], xd[idv, :, jd], xd[:, jd, jd]]

    outs = run_native(run, ["aten::index.Tensor"])
    assert_close(outs, [x[i], x[:, j], x[i, j], x[i, :, j], x[:, j, j]])


def test_index_put() -> None:
    x = make((4, 5), torch.float32, seed=28)
    i = torch.tensor([0, 2, 2])
    j = torch.tensor([1, 3, 3])
    v = torch.tensor([1.0, 2.0, 3.0])

    def run() -> list[torch.Tensor]:
        a = x.to("flemu").clone()
        a[i.to("flemu"), j.to("flemu")] = torch.tensor(9.0, device="flemu")
        b = x.to("flemu").index_put((i.to("flemu"), j.to("flemu")), v.to("flemu"), accumulate=True)
        c = x.to("flemu").clone()
        c[i.to("flemu")] = torch.arange(5.0, device="flemu")
        return [a, b, c]

    outs = run_native(run, ["aten::index_put_", "aten::index_put"])
    a = x.clone()
    a[i, j] = 9.0
    c = x.clone()
    c[i] = torch.arange(5.0)
    assert_close(outs, [a, x.index_put((i, j), v, accumulate=True), c])


@pytest.mark.parametrize("dtype", (torch.int64, torch.int32, torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_arange(dtype: torch.dtype) -> None:
    outs = run_native(lambda: [torch.arange(7, dtype=dtype, device="flemu"), torch.arange(2, 19, 3, dtype=dtype, device="flemu"),
                               torch.arange(10, 0, -2, dtype=dtype, device="flemu")], ["aten::arange.start_out"])
    assert_close(outs, [torch.arange(7, dtype=dtype), torch.arange(2, 19, 3, dtype=dtype), torch.arange(10, 0, -2, dtype=dtype)])


def test_arange_float_steps_and_factories() -> None:
    def run() -> list[torch.Tensor]:
        return [torch.arange(0.0, 1.0, 0.1, device="flemu"), torch.arange(5, device="flemu"),
                torch.full((2, 3), 2.5, device="flemu"), torch.zeros(3, 2, dtype=torch.int64, device="flemu"),
                torch.ones(4, dtype=torch.bool, device="flemu"), torch.ones_like(torch.empty(2, device="flemu"))]

    outs = run_native(run, ["aten::arange.start_out", "aten::fill_.Scalar"])
    assert_close(outs, [torch.arange(0.0, 1.0, 0.1), torch.arange(5), torch.full((2, 3), 2.5),
                        torch.zeros(3, 2, dtype=torch.int64), torch.ones(4, dtype=torch.bool), torch.ones(2)])
