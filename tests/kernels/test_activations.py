"""Activation kernels and their backward kernels on flemu against the CPU:
sigmoid, tanh, gelu (exact and tanh), silu, leaky_relu, hardtanh, threshold,
relu's threshold_backward, elu (and selu, celu through it), softplus, mish,
hardswish, hardsigmoid; every floating dtype, odd and non-contiguous shapes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from native_check import FLOAT_DTYPES, assert_close, make, run_native, tol

# (name, function, forward op, backward op)
ACTIVATIONS: list[tuple[str, Callable[[torch.Tensor], torch.Tensor], str, str]] = [
    ("sigmoid", torch.sigmoid, "aten::sigmoid", "aten::sigmoid_backward"),
    ("tanh", torch.tanh, "aten::tanh", "aten::tanh_backward"),
    ("gelu", F.gelu, "aten::gelu", "aten::gelu_backward"),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), "aten::gelu", "aten::gelu_backward"),
    # silu_backward is CompositeImplicitAutograd: it runs as sigmoid, mul, sub, add.
    ("silu", F.silu, "aten::silu", "aten::sigmoid"),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2), "aten::leaky_relu", "aten::leaky_relu_backward"),
    ("hardtanh", lambda x: F.hardtanh(x, -0.5, 1.5), "aten::hardtanh", "aten::hardtanh_backward"),
    ("relu", torch.relu, "aten::relu", "aten::threshold_backward"),
    ("elu", lambda x: F.elu(x, alpha=1.5), "aten::elu", "aten::elu_backward"),
    ("selu", F.selu, "aten::elu", "aten::elu_backward"),
    ("celu", lambda x: F.celu(x, alpha=0.5), "aten::elu", "aten::elu_backward"),
    ("softplus", F.softplus, "aten::softplus", "aten::softplus_backward"),
    ("softplus_beta", lambda x: F.softplus(x, beta=2.0, threshold=3.0), "aten::softplus", "aten::softplus_backward"),
    # mish_backward is CompositeImplicitAutograd too: softplus, tanh, sigmoid and arithmetic.
    ("mish", F.mish, "aten::mish", "aten::softplus"),
    ("hardswish", F.hardswish, "aten::hardswish", "aten::hardswish_backward"),
    ("hardsigmoid", F.hardsigmoid, "aten::hardsigmoid", "aten::hardsigmoid_backward"),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name,fn,fwd_op,bwd_op", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_forward_backward(name: str, fn, fwd_op: str, bwd_op: str, dtype: torch.dtype) -> None:
    x = make((7, 13), dtype, seed=1, low=-4, high=4, noncontiguous=True)
    g = make((7, 13), dtype, seed=2)
    x_cpu = x.clone().requires_grad_()
    ref = fn(x_cpu)
    ref.backward(g)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        out = fn(xd)
        out.backward(g.to("flemu"))
        return out.detach(), xd.grad

    out, grad = run_native(run, [fwd_op, bwd_op])
    assert_close(out, ref.detach(), **tol(dtype, 2))
    assert_close(grad, x_cpu.grad, **tol(dtype, 4))


@pytest.mark.parametrize("shape", [(), (1,), (5, 1, 3), (2, 3, 4, 5)], ids=str)
def test_odd_shapes(shape: tuple[int, ...]) -> None:
    x = make(shape, torch.float32, seed=3)
    out = run_native(lambda: F.gelu(x.to("flemu")), ["aten::gelu"])
    assert_close(out, F.gelu(x), **tol(torch.float32))


def test_inplace_and_out_variants() -> None:
    x = make((4, 6), torch.float32, seed=4)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        a = x.to("flemu")
        a.sigmoid_()
        out = torch.empty(4, 6, device="flemu")
        torch.tanh(x.to("flemu"), out=out)
        return a, out

    a, out = run_native(run, ["aten::sigmoid_", "aten::tanh.out"])
    assert_close(a, torch.sigmoid(x), **tol(torch.float32))
    assert_close(out, torch.tanh(x), **tol(torch.float32))


def test_extreme_values() -> None:
    x = torch.tensor([-1e4, -88.0, -1.0, 0.0, 1.0, 88.0, 1e4, float("nan"), float("inf"), -float("inf")])
    for fn, op in ((torch.sigmoid, "aten::sigmoid"), (F.silu, "aten::silu"), (torch.tanh, "aten::tanh")):
        out = run_native(lambda: fn(x.to("flemu")), [op])  # noqa: B023
        assert_close(out, fn(x), **tol(torch.float32))


def test_threshold_and_int_hardtanh() -> None:
    x = make((9,), torch.float32, seed=5)
    out = run_native(lambda: F.threshold(x.to("flemu"), 0.1, -3.0), ["aten::threshold"])
    assert_close(out, F.threshold(x, 0.1, -3.0))
    xi = torch.arange(-5, 6)
    out = run_native(lambda: F.hardtanh(xi.to("flemu"), -2, 3), ["aten::hardtanh"])
    assert_close(out, F.hardtanh(xi, -2, 3))


def test_bad_gelu_approximation_is_rejected() -> None:
    x = torch.ones(3, device="flemu")
    # gelu's C++ meta function takes any string, as on the CPU, where the kernel
    # checks it: flemu's kernel refuses it (TFL_ERR_INVALID_ARGUMENT, a ValueError).
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        torch.ops.aten.gelu(x, approximate="cubic")


def test_inplace_elu_backward_from_its_result() -> None:
    # elu_(x) keeps only its result: the gradient below 0 comes from it
    # (elu_backward with is_result), input_scale and scale included.
    x = make((5, 9), torch.float64, seed=5, low=-3, high=3)
    g = make((5, 9), torch.float64, seed=6)

    def grad_on(device: str) -> torch.Tensor:
        w = x.clone().to(device).requires_grad_()
        y = w * 1.0
        torch.ops.aten.elu_(y, 1.5, 1.2, 0.7)
        y.backward(g.to(device))
        return w.grad

    grad = run_native(lambda: grad_on("flemu"), ["aten::elu_backward"])
    assert_close(grad, grad_on("cpu"), **tol(torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_new_activations_at_extremes(dtype: torch.dtype) -> None:
    # Far tails, the thresholds and the kinks, infinities and NaN: forward and gradient as the CPU's.
    x = torch.tensor([-1e4, -200.0, -30.0, -20.5, -3.0, -1e-30, -0.0, 0.0, 1e-30, 3.0, 3.0000002, 19.9, 20.0,
                      20.5, 30.0, 1e4, float("inf"), float("-inf"), float("nan")], dtype=dtype)
    fns = [lambda t: F.elu(t, alpha=1.5), F.selu, F.softplus, lambda t: F.softplus(t, beta=0.5, threshold=4.0),
           F.mish, F.hardswish, F.hardsigmoid]
    for fn in fns:
        xc = x.clone().requires_grad_()
        ref = fn(xc)
        ref.backward(torch.ones_like(ref))

        def run(fn=fn) -> tuple[torch.Tensor, torch.Tensor]:
            xd = x.to("flemu").requires_grad_()
            out = fn(xd)
            out.backward(torch.ones_like(out))
            return out.detach(), xd.grad

        out, grad = run_native(run, [])
        assert_close(out, ref.detach(), **tol(dtype))
        assert_close(grad, xc.grad, **tol(dtype))

