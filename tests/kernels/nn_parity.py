"""Forward + backward parity of an operation on flemu against the CPU, with CPU
fallbacks forbidden and the native operators checked in op_stats.

Reduced-precision runs (float16, bfloat16) are compared with a float32 CPU
reference computed from the same rounded inputs; the tolerances below are a few
units in the last place of each dtype, relative to the largest magnitude of the
reference (flemu rounds once, after float32 arithmetic)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from native_check import run_native

DEVICE = "flemu"

# (rtol, atol relative to max |reference|)
TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (4e-3, 2e-3),
    torch.bfloat16: (3e-2, 1.6e-2),
}

ALL_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def reference_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str,
                 scale: float = 1.0) -> None:
    """`actual` (any device, `dtype`) against a CPU reference (any floating dtype)."""
    rtol, atol_rel = TOLERANCE[dtype]
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != expected {tuple(e.shape)}"
    mag = float(e.abs().max()) if e.numel() else 0.0
    torch.testing.assert_close(
        a, e, rtol=rtol * scale, atol=atol_rel * scale * max(mag, 1e-3), equal_nan=True,
        msg=lambda m: f"{what} ({dtype}): {m}")


def make(shape: Sequence[int], seed: int, low: float = -2.0, high: float = 2.0) -> torch.Tensor:
    """A float64 CPU tensor with values in [low, high)."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(tuple(shape), generator=g, dtype=torch.float64) * (high - low) + low


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values in storage with the first two dims swapped."""
    if t.dim() < 2:
        return t[None].expand(2, *t.shape)[0]
    out = t.transpose(0, 1).contiguous().transpose(0, 1)
    assert not out.is_contiguous() or min(t.shape[:2]) <= 1
    return out


def check_forward_backward(
    fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
    inputs: Sequence[torch.Tensor | None],
    grad_inputs: Sequence[bool],
    dtype: torch.dtype,
    ops: Iterable[str],
    layout: Callable[[torch.Tensor], torch.Tensor] | None = None,
    scale: float = 1.0,
    reference: torch.dtype | None = None,
) -> None:
    """Runs fn(*inputs) forward and backward on the CPU (in `reference`, by default
    reference_dtype(dtype)) and on flemu (`dtype`, inputs optionally re-laid out
    by `layout`), and compares the outputs and the gradients of the inputs
    flagged in grad_inputs. An ill-conditioned case (a normalization over one
    element, where the CPU's own float32 rounding noise is the whole answer)
    takes a float64 reference."""
    ref_dtype = reference or reference_dtype(dtype)
    rounded = [None if t is None else t.to(dtype) for t in inputs]
    ref_in = [None if t is None else t.to(ref_dtype).detach().requires_grad_(g)
              for t, g in zip(rounded, grad_inputs)]
    ref_out = fn(*ref_in)
    ref_outs = ref_out if isinstance(ref_out, tuple) else (ref_out,)
    grads = [make(o.shape, seed=100 + i).to(dtype) for i, o in enumerate(ref_outs)]
    torch.autograd.backward(list(ref_outs), [g.to(ref_dtype) for g in grads])

    def on_device() -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor | None]]:
        dev_in = []
        for t, g in zip(rounded, grad_inputs):
            if t is None:
                dev_in.append(None)
                continue
            d = t.to(DEVICE)
            if layout is not None:
                d = layout(d)
            dev_in.append(d.detach().requires_grad_(g))
        out = fn(*dev_in)
        outs = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward(list(outs), [g.to(DEVICE) for g in grads])
        return outs, [None if t is None else t.grad for t in dev_in]

    outs, dev_grads = run_native(on_device, ops)  # type: ignore[misc]
    for i, (o, r) in enumerate(zip(outs, ref_outs)):
        assert o.device.type == DEVICE
        assert o.dtype == dtype, f"output {i} has dtype {o.dtype}, expected {dtype}"
        assert_close(o, r, dtype, f"output {i}", scale)
    for i, (t, want) in enumerate(zip(ref_in, grad_inputs)):
        if t is None or not want:
            continue
        assert dev_grads[i] is not None, f"input {i} got no gradient on flemu"
        assert_close(dev_grads[i], t.grad, dtype, f"gradient of input {i}", scale)
