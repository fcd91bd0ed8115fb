"""flemu's elementwise math kernels against PyTorch's own CPU kernels (SLEEF's
vectorized forms), same run: each op over 1M float32 values (4 MiB) in the
range a model feeds it (sin and cos up to 100 in magnitude, as rotary
position embeddings do). Ratio of medians flemu / CPU (target: <= 1.1x), the
two sides timed in the same rounds (_interleave.py); nothing fails on a time.
Before timing, each op's flemu result is held to float64 within the bound its
float32 form keeps (support/fast_math.h: 1 ulp, sin and cos 0.51, erf 0.82, atan 0.85, asin 0.67, exp2 0.92 and log2 0.75; log1p and tanh 2, sigmoid
2.5 and silu 3.5, built from exp; rounding exact; the forms evaluated in
double, support/double_math.h, 1; hardswish 2), so a fast kernel that got less accurate
fails here instead of reporting a ratio."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_fl
from _interleave import interleaved
from _report import row

N = 1 << 20
# op: (low, high) of the uniform inputs, ulp bound against float64
FLOAT32_OPS = {
    "exp": ((-10.0, 10.0), 1.0),
    "exp2": ((-20.0, 20.0), 0.92),
    "log": ((1e-3, 100.0), 1.0),
    "log2": ((1e-3, 100.0), 0.75),
    "log1p": ((-0.99, 100.0), 2.0),
    "sqrt": ((0.0, 100.0), 0.5),
    "rsqrt": ((1e-3, 100.0), 1.5),
    "sin": ((-100.0, 100.0), 0.51),
    "cos": ((-100.0, 100.0), 0.51),
    "erf": ((-4.0, 4.0), 0.82),
    "atan": ((-10.0, 10.0), 0.85),
    "asin": ((-1.0, 1.0), 0.67),
    "tanh": ((-10.0, 10.0), 2.0),
    "sigmoid": ((-10.0, 10.0), 2.5),
    "silu": ((-10.0, 10.0), 3.5),
    "softplus": ((-10.0, 10.0), 3.0),  # log1p_f32 of exp_f32, as the CPU's log1p of exp
    "floor": ((-100.0, 100.0), 0.0),
    "round": ((-100.0, 100.0), 0.0),
    "hardswish": ((-5.0, 5.0), 2.0),  # x + 3, the product and the quotient each rounded, as the CPU's (1.90)
}
# Evaluated in double (support/double_math.h; they ran on the CPU fallback
# before): their own row.
IN_DOUBLE_OPS = {
    "expm1": ((-5.0, 5.0), 1.0),
    "tan": ((-1.5, 1.5), 1.0),
    "sinh": ((-10.0, 10.0), 1.0),
    "logit": ((1e-3, 0.999), 1.0),
    "elu": ((-5.0, 5.0), 1.0),
    "mish": ((-10.0, 10.0), 1.0),
}
OPS = {**FLOAT32_OPS, **IN_DOUBLE_OPS}


def _function(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return getattr(torch, name, None) or getattr(torch.nn.functional, name)


def _ulp_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest |got - want| in float32 spacings at want."""
    w = want.float().abs()
    spacing = (torch.nextafter(w, torch.full_like(w, float("inf"))) - w).double()
    return ((got.double() - want).abs() / spacing).max().item()


def _op(name: str, device: str) -> Callable[[], None]:
    (low, high), _ = OPS[name]
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(N, generator=g, dtype=torch.float64) * (high - low) + low).float().to(device)
    fn = _function(name)

    def run() -> None:
        fn(x)
        if device != "cpu":
            torch.flemu.synchronize()

    run()
    return run


@pytest.mark.parametrize("name", OPS)
def test_math_flemu(benchmark, name: str) -> None:  # noqa: ANN001
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    (low, high), bound = OPS[name]
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(N, generator=g, dtype=torch.float64) * (high - low) + low).float()
    with torch_fl.fallback_mode("error"):
        got = _function(name)(x.to("flemu")).cpu()
    error = _ulp_error(got, _function(name)(x.double()))
    assert error <= bound, f"flemu's {name} is {error:.2f} ulp from float64 (bound {bound})"
    row(benchmark, "elementwise math over 1M float32 values, flemu vs CPU"
        + (", evaluated in double" if name in IN_DOUBLE_OPS else ""), name, 1.1)
    with torch_fl.fallback_mode("error"):
        interleaved(benchmark, _op(name, "flemu"), _op(name, "cpu"),
                    f"CPU {name}, interleaved", rounds=30, warmup=20)
