"""Elementwise math kernels on flemu against the CPU: exp, log, log1p, sqrt,
rsqrt, reciprocal, sin, cos, erf, exp2, expm1, log2, log10, tan, atan, sinh,
cosh, asin, acos, atanh, asinh, acosh, logit (with and without eps), sign, abs, pow (three overloads), clamp
(scalar and tensor bounds, clamp_min/clamp_max with a tensor bound),
minimum/maximum, addcmul/addcdiv/lerp — forward,
backward through autograd, in-place and out= variants, every declared dtype."""

from __future__ import annotations

import pytest
import torch
from native_check import FLOAT_DTYPES, assert_close, make, run_native, tol

UNARY = [
    ("exp", torch.exp, -3, 3),
    ("log", torch.log, 0.1, 4),
    ("log1p", torch.log1p, -0.9, 4),
    ("sqrt", torch.sqrt, 0.1, 4),
    ("rsqrt", torch.rsqrt, 0.1, 4),
    ("reciprocal", torch.reciprocal, 0.5, 4),
    ("sin", torch.sin, -4, 4),
    ("cos", torch.cos, -4, 4),
    ("erf", torch.erf, -3, 3),
    ("exp2", torch.exp2, -20, 20),
    ("expm1", torch.expm1, -3, 3),
    ("log2", torch.log2, 0.01, 40),
    ("log10", torch.log10, 0.01, 40),
    ("tan", torch.tan, -1.4, 1.4),
    ("atan", torch.atan, -8, 8),
    ("sinh", torch.sinh, -4, 4),
    ("cosh", torch.cosh, -4, 4),
    ("asin", torch.asin, -0.95, 0.95),
    ("acos", torch.acos, -0.95, 0.95),
    ("atanh", torch.atanh, -0.95, 0.95),
    ("asinh", torch.asinh, -8, 8),
    ("acosh", torch.acosh, 1.05, 8),
    ("logit", torch.logit, 0.05, 0.95),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name,fn,low,high", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name: str, fn, low: float, high: float, dtype: torch.dtype) -> None:
    x = make((6, 11), dtype, seed=1, low=low, high=high, noncontiguous=True)
    x_cpu = x.clone().requires_grad_()
    ref = fn(x_cpu)
    ref.sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        out = fn(xd)
        out.sum().backward()
        return out.detach(), xd.grad

    out, grad = run_native(run, [f"aten::{name}"])
    assert_close(out, ref.detach(), **tol(dtype, 2))
    assert_close(grad, x_cpu.grad, **tol(dtype, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int64, torch.int32, torch.int8], ids=str)
def test_abs_every_dtype(dtype: torch.dtype) -> None:
    x = make((5, 7), dtype, seed=2, low=-50, high=50, noncontiguous=True)
    out = run_native(lambda: torch.abs(x.to("flemu")), ["aten::abs"])
    assert_close(out, torch.abs(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_sign(dtype: torch.dtype) -> None:
    x = make((4, 9), dtype, seed=3, low=-5, high=5)
    out = run_native(lambda: torch.sign(x.to("flemu")), ["aten::sign"])
    assert_close(out, torch.sign(x))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_pow_overloads(dtype: torch.dtype) -> None:
    b = make((3, 8), dtype, seed=4, low=0.2, high=2)
    e = make((3, 8), dtype, seed=5, low=-2, high=2)

    def run() -> list[torch.Tensor]:
        bd, ed = b.to("flemu"), e.to("flemu")
        return [bd**2, bd**0.5, bd**-1.3, torch.pow(bd, ed), torch.pow(2.5, ed), torch.pow(2, ed)]

    outs = run_native(run, ["aten::pow.Tensor_Scalar", "aten::pow.Tensor_Tensor", "aten::pow.Scalar"])
    refs = [b**2, b**0.5, b**-1.3, torch.pow(b, e), torch.pow(2.5, e), torch.pow(2, e)]
    for out, ref in zip(outs, refs):
        assert_close(out, ref, **tol(dtype, 4))


def test_pow_backward() -> None:
    b = make((4, 5), torch.float32, seed=6, low=0.5, high=2)
    e = make((4, 5), torch.float32, seed=7, low=-1, high=2)
    bc, ec = b.clone().requires_grad_(), e.clone().requires_grad_()
    (bc**ec).sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        bd, ed = b.to("flemu").requires_grad_(), e.to("flemu").requires_grad_()
        (bd**ed).sum().backward()
        return bd.grad, ed.grad

    gb, ge = run_native(run, ["aten::pow.Tensor_Tensor"])
    assert_close(gb, bc.grad, **tol(torch.float32, 10))
    assert_close(ge, ec.grad, **tol(torch.float32, 10))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_clamp(dtype: torch.dtype) -> None:
    x = make((6, 5), dtype, seed=8, low=-10, high=10, noncontiguous=True)
    lo = make((6, 5), dtype, seed=9, low=-6, high=0)
    hi = make((5,), dtype, seed=10, low=1, high=6)

    def run() -> list[torch.Tensor]:
        xd = x.to("flemu")
        return [xd.clamp(-3, 4), xd.clamp(min=-2), xd.clamp(max=1), torch.clamp(xd, lo.to("flemu"), hi.to("flemu")),
                xd.clamp_min(0), xd.clamp_max(0)]

    outs = run_native(run, ["aten::clamp", "aten::clamp.Tensor", "aten::clamp_min", "aten::clamp_max"])
    refs = [x.clamp(-3, 4), x.clamp(min=-2), x.clamp(max=1), torch.clamp(x, lo, hi), x.clamp_min(0), x.clamp_max(0)]
    for out, ref in zip(outs, refs):
        assert_close(out, ref)


def test_clamp_nan_propagates_and_backward() -> None:
    x = torch.tensor([float("nan"), -5.0, 0.5, 5.0])
    out = run_native(lambda: x.to("flemu").clamp(-1, 1), ["aten::clamp"])
    assert_close(out, x.clamp(-1, 1))
    xc = torch.linspace(-3, 3, 13).requires_grad_()
    xc.clamp(-1, 2).sum().backward()

    def run() -> torch.Tensor:
        xd = torch.linspace(-3, 3, 13).to("flemu").requires_grad_()
        xd.clamp(-1, 2).sum().backward()
        return xd.grad

    assert_close(run_native(run, ["aten::clamp"]), xc.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32], ids=str)
def test_clamp_min_max_tensor_bound(dtype: torch.dtype) -> None:
    """clamp_min/clamp_max with a broadcast tensor bound, functional, in-place and out=."""
    x = make((5, 6), dtype, seed=13, low=-9, high=9, noncontiguous=True)
    bound = make((6,), dtype, seed=14, low=-3, high=3)
    if dtype.is_floating_point:
        x[0, 0], bound[1] = float("nan"), float("nan")

    def run() -> list[torch.Tensor]:
        xd, bd = x.to("flemu"), bound.to("flemu")
        inplace = xd.clone()
        inplace.clamp_max_(bd)
        out = torch.empty_like(xd)
        torch.clamp_min(xd, bd, out=out)
        return [torch.clamp_min(xd, bd), torch.clamp_max(xd, bd), inplace, out]

    outs = run_native(run, ["aten::clamp_min.Tensor", "aten::clamp_max.Tensor"])
    assert_close(outs, [torch.clamp_min(x, bound), torch.clamp_max(x, bound), torch.clamp_max(x, bound),
                        torch.clamp_min(x, bound)])


def test_clamp_min_tensor_promotes_and_backward() -> None:
    x = make((3, 4), torch.float32, seed=15).requires_grad_()
    bound = make((4,), torch.float64, seed=16)
    torch.clamp_min(x, bound.float()).pow(2).sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.detach().to("flemu").requires_grad_()
        y = torch.clamp_min(xd, bound.to("flemu"))  # float32 and float64 promote to float64
        y.pow(2).sum().backward()
        return y, xd.grad

    y, grad = run_native(run, ["aten::clamp_min.Tensor"])
    assert_close(y, torch.clamp_min(x.detach(), bound))
    assert_close(grad, x.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
def test_minimum_maximum(dtype: torch.dtype) -> None:
    a = make((4, 7), dtype, seed=11, low=-9, high=9)
    b = make((7,), dtype, seed=12, low=-9, high=9)
    outs = run_native(lambda: [torch.maximum(a.to("flemu"), b.to("flemu")), torch.minimum(a.to("flemu"), b.to("flemu"))],
                      ["aten::maximum", "aten::minimum"])
    assert_close(outs, [torch.maximum(a, b), torch.minimum(a, b)])


def test_maximum_nan() -> None:
    a = torch.tensor([1.0, float("nan"), 3.0])
    b = torch.tensor([float("nan"), 2.0, 1.0])
    out = run_native(lambda: torch.maximum(a.to("flemu"), b.to("flemu")), ["aten::maximum"])
    assert_close(out, torch.maximum(a, b))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_addcmul_addcdiv_lerp(dtype: torch.dtype) -> None:
    s = make((5, 6), dtype, seed=13)
    t1 = make((5, 6), dtype, seed=14, noncontiguous=True)
    t2 = make((6,), dtype, seed=15, low=0.5, high=2)
    w = make((5, 6), dtype, seed=16, low=0, high=1)

    def run() -> list[torch.Tensor]:
        sd, ad, bd, wd = (t.to("flemu") for t in (s, t1, t2, w))
        inplace = sd.clone()
        inplace.addcdiv_(ad, bd, value=-0.3)
        return [torch.addcmul(sd, ad, bd, value=0.5), torch.addcdiv(sd, ad, bd, value=2), inplace,
                torch.lerp(sd, ad, 0.3), torch.lerp(sd, ad, 0.9), torch.lerp(sd, ad, wd)]

    outs = run_native(run, ["aten::addcmul", "aten::addcdiv", "aten::addcdiv_", "aten::lerp.Scalar",
                            "aten::lerp.Tensor"])
    inplace = s.clone()
    inplace.addcdiv_(t1, t2, value=-0.3)
    refs = [torch.addcmul(s, t1, t2, value=0.5), torch.addcdiv(s, t1, t2, value=2), inplace,
            torch.lerp(s, t1, 0.3), torch.lerp(s, t1, 0.9), torch.lerp(s, t1, w)]
    for out, ref in zip(outs, refs):
        assert_close(out, ref, **tol(dtype, 4))


def test_lerp_endpoint_exact() -> None:
    s, e = make((10,), torch.float32, seed=17), make((10,), torch.float32, seed=18)
    out = run_native(lambda: torch.lerp(s.to("flemu"), e.to("flemu"), 1.0), ["aten::lerp.Scalar"])
    assert torch.equal(out.cpu(), e), "lerp with weight 1 must give `end` exactly"


def test_int_input_to_float_op_is_not_claimed_native() -> None:
    """exp of an int64 tensor is outside the kernel's dtype mask: it must not run
    (natively or silently) as if it were; under strict mode it is refused."""
    x = torch.arange(4, device="flemu")
    with pytest.raises(NotImplementedError, match="aten::exp"):
        run_native(lambda: torch.exp(x), [])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_logit_eps_clamps_in_the_tensors_dtype(dtype: torch.dtype) -> None:
    # With eps, inputs outside [eps, 1 - eps] are clamped (the bounds rounded
    # to the dtype: in bfloat16 1 - 1e-6 is 1) and their gradient is 0.
    x = torch.tensor([-0.5, 0.0, 1e-7, 0.005, 0.3, 0.995, 1.0, 1.5], dtype=dtype)
    for eps in (1e-6, 0.01):
        xc = x.clone().requires_grad_()
        ref = torch.logit(xc, eps=eps)
        ref.sum().backward()

        def run(eps=eps) -> tuple[torch.Tensor, torch.Tensor]:
            xd = x.to("flemu").requires_grad_()
            out = torch.logit(xd, eps=eps)
            out.sum().backward()
            return out.detach(), xd.grad

        out, grad = run_native(run, ["aten::logit", "aten::logit_backward"])
        out = out.cpu()
        assert torch.equal(out.isinf(), ref.detach().isinf()), (out, ref)
        finite = ref.detach().isfinite()
        assert_close(out[finite], ref.detach()[finite], **tol(dtype, 4))
        assert_close(grad, xc.grad, **tol(dtype, 4))


@pytest.mark.parametrize("name", [u[0] for u in UNARY if u[0] in {
    "exp2", "expm1", "log2", "log10", "tan", "atan", "sinh", "cosh", "asin", "acos", "atanh", "asinh", "acosh",
    "logit"}])
def test_special_values_as_the_cpu(name: str) -> None:
    # Signed zeros, infinities, NaN, domain edges, tiny and huge arguments: the
    # CPU's values in float64 rounded to float32 (its NaNs where the domain
    # ends), the sign of a zero included. Not the CPU's float32 kernels: on
    # AVX2 hosts their vector sinh and cosh overflow to inf at 89, where the
    # results (2.2e38) are finite.
    x = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-30, -1e-30, 1e-45, 88.0, 89.0, -104.0, 128.0, -150.0,
                      1e6, -1e6, float("inf"), float("-inf"), float("nan")])
    fn = getattr(torch, name)
    out = run_native(lambda: fn(x.to("flemu")), [f"aten::{name}"])
    ref = fn(x.double()).float()
    assert_close(out, ref, atol=0.0, rtol=3e-7)
    zeros = ref == 0
    assert torch.equal(out.cpu()[zeros].signbit(), ref[zeros].signbit()), (x[zeros], out[zeros], ref[zeros])

