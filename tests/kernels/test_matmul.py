"""bmm and baddbmm on flemu against the CPU: odd sizes, transposed and
broadcast operands, alpha/beta, in-place, backward, and batches large enough
for the per-matrix GEMM to split over threads."""

from __future__ import annotations

import pytest
import torch
from native_check import FLOAT_DTYPES, assert_close, make, run_native

MM_TOL = {torch.float32: 1e-4, torch.float64: 1e-10, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def mm_tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": MM_TOL[dtype], "rtol": MM_TOL[dtype]}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("b,n,k,m", [(1, 1, 1, 1), (3, 5, 7, 9), (16, 32, 16, 32), (2, 33, 65, 17)], ids=str)
def test_bmm(dtype: torch.dtype, b: int, n: int, k: int, m: int) -> None:
    x = make((b, n, k), dtype, seed=1)
    y = make((b, k, m), dtype, seed=2)
    out = run_native(lambda: torch.bmm(x.to("flemu"), y.to("flemu")), ["aten::bmm"])
    ref = torch.bmm(x.double(), y.double()).to(dtype)
    assert_close(out, ref, **mm_tol(dtype))


def test_bmm_transposed_operands_and_backward() -> None:
    x = make((4, 12, 10), torch.float32, seed=3).transpose(1, 2)  # [4, 10, 12], strided
    y = make((4, 8, 12), torch.float32, seed=4).transpose(1, 2)  # [4, 12, 8]
    xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()
    ref = torch.bmm(xc, yc)
    ref.sum().backward()

    def run() -> tuple[torch.Tensor, ...]:
        xd = x.to("flemu").requires_grad_()
        yd = y.to("flemu").transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
        out = torch.bmm(xd, yd)
        out.sum().backward()
        return out.detach(), xd.grad, yd.grad

    out, gx, gy = run_native(run, ["aten::bmm"])
    assert_close(out, ref.detach(), **mm_tol(torch.float32))
    assert_close(gx, xc.grad, **mm_tol(torch.float32))
    assert_close(gy, yc.grad, **mm_tol(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_baddbmm(dtype: torch.dtype) -> None:
    s = make((1, 5, 6), dtype, seed=5)  # broadcast over the batch
    x = make((3, 5, 4), dtype, seed=6)
    y = make((3, 4, 6), dtype, seed=7)

    def run() -> list[torch.Tensor]:
        sd, xd, yd = s.to("flemu"), x.to("flemu"), y.to("flemu")
        inplace = sd.expand(3, 5, 6).clone()
        inplace.baddbmm_(xd, yd, beta=0.5, alpha=-2.0)
        return [torch.baddbmm(sd, xd, yd), torch.baddbmm(sd, xd, yd, beta=0.0, alpha=3.0), inplace]

    outs = run_native(run, ["aten::baddbmm", "aten::baddbmm_"])
    inplace = s.expand(3, 5, 6).clone()
    inplace.baddbmm_(x, y, beta=0.5, alpha=-2.0)
    refs = [torch.baddbmm(s, x, y), torch.baddbmm(s, x, y, beta=0.0, alpha=3.0), inplace]
    for out, ref in zip(outs, refs):
        assert_close(out, ref, **mm_tol(dtype))


def test_baddbmm_beta_zero_ignores_nan_in_self() -> None:
    s = torch.full((2, 3, 3), float("nan"))
    x, y = make((2, 3, 4), torch.float32, seed=8), make((2, 4, 3), torch.float32, seed=9)
    out = run_native(lambda: torch.baddbmm(s.to("flemu"), x.to("flemu"), y.to("flemu"), beta=0.0), ["aten::baddbmm"])
    assert_close(out, torch.bmm(x, y), **mm_tol(torch.float32))


@pytest.mark.slow
def test_large_matrices_split_over_threads() -> None:
    x = make((2, 256, 192), torch.float32, seed=10)
    y = make((2, 192, 160), torch.float32, seed=11)
    out = run_native(lambda: torch.bmm(x.to("flemu"), y.to("flemu")), ["aten::bmm"])
    assert_close(out, torch.bmm(x.double(), y.double()).float(), atol=1e-3, rtol=1e-4)


def test_matmul_4d_reaches_bmm() -> None:
    x = make((2, 3, 5, 4), torch.float32, seed=12)
    y = make((2, 3, 4, 6), torch.float32, seed=13)
    out = run_native(lambda: x.to("flemu") @ y.to("flemu"), ["aten::bmm"])
    assert_close(out, x @ y, **mm_tol(torch.float32))


# The meta function rejects the shapes; the bridge's fallback chain reports the CPU's error.
@pytest.mark.filterwarnings("ignore:.*is not native:UserWarning")
def test_shape_mismatch_is_an_error() -> None:
    x = torch.ones(2, 3, 4, device="flemu")
    y = torch.ones(2, 5, 6, device="flemu")
    with pytest.raises(RuntimeError, match="size|shape|match"):
        torch.bmm(x, y)


@pytest.mark.parametrize("wait", ["device", "event"])
def test_synchronizing_keeps_the_cpu_thread_count(wait: str) -> None:
    """The host thread waiting in synchronize (the device's, or an event's)
    runs parts of flemu's split products, whose oneDNN calls set their
    thread's OpenMP count to one; PyTorch reads its CPU thread count from
    OpenMP on that same thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = make((16, 64, 32), torch.float32, seed=14).to("flemu")
        y = make((16, 32, 64), torch.float32, seed=15).to("flemu")
        event = torch.flemu.Event()
        expected = torch.bmm(x.cpu(), y.cpu())
        for _ in range(200):
            out = torch.bmm(x, y)
            if wait == "event":
                event.record()
                event.synchronize()
                assert event.query()
            else:
                torch.flemu.synchronize()
        assert torch.get_num_threads() == 2
        torch.testing.assert_close(out.cpu(), expected)
    finally:
        torch.set_num_threads(before)


def test_one_shape_many_operands_on_two_streams() -> None:
    """A cached oneDNN matmul keeps its memory objects per thread and points
    them at each call's operands: products of one shape over different
    tensors, one after another without a synchronize, and on two streams at
    once, each give their own operands' product (bmm split over the pool by
    batch, bmm scaled by alpha, addmm with nn.Linear's row bias, mm)."""
    rounds = 6
    shapes = {
        "bmm": ((16, 64, 32), (16, 32, 64)),
        "mm": ((96, 40), (40, 72)),
    }
    streams = [torch.flemu.Stream(), torch.flemu.Stream()]
    results = []
    for r in range(rounds):
        stream = streams[r % 2]
        with torch.flemu.stream(stream):
            a = make(shapes["bmm"][0], torch.float32, seed=100 + r)
            b = make(shapes["bmm"][1], torch.float32, seed=200 + r)
            p = make(shapes["mm"][0], torch.float32, seed=300 + r)
            q = make(shapes["mm"][1], torch.float32, seed=400 + r)
            bias = make((72,), torch.float32, seed=500 + r)
            da, db, dp, dq, dbias = (t.to("flemu") for t in (a, b, p, q, bias))
            got = {
                "bmm": torch.bmm(da, db),
                "baddbmm_alpha": torch.baddbmm(torch.empty(16, 64, 64, device="flemu"), da, db, beta=0, alpha=0.5),
                "addmm_bias": torch.addmm(dbias, dp, dq),
                "mm": torch.mm(dp, dq),
            }
            want = {
                "bmm": torch.bmm(a, b),
                "baddbmm_alpha": 0.5 * torch.bmm(a, b),
                "addmm_bias": torch.addmm(bias, p, q),
                "mm": p @ q,
            }
            results.append((got, want))
    torch.flemu.synchronize()
    for r, (got, want) in enumerate(results):
        for name in got:
            torch.testing.assert_close(got[name].cpu(), want[name], atol=1e-4, rtol=1e-4,
                                       msg=lambda m, r=r, name=name: f"round {r}, {name}: {m}")
