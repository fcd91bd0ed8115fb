"""flemu's _foreach_ kernels on lists that mix layouts: contiguous tensors run
as flat loops over their data, transposed, sliced and broadcast-strided ones
walk their strides; each element must match the CPU's foreach result, and a
dense tensor next to a strided one must not take the other's layout."""

from __future__ import annotations

import pytest
import torch
from native_check import assert_close, run_native

DEVICE = "flemu"


def mixed_list(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(6, 8, generator=g)
    return [
        torch.randn(5, 7, generator=g),        # dense
        base.t(),                              # transposed (8, 6)
        torch.randn(9, 4, generator=g)[::2],   # every other row: (5, 4)
        torch.randn(3, generator=g),           # dense, 1-d
        torch.randn(4, 6, generator=g)[:, 1:5],  # a column slice: (4, 4)
        torch.randn(2, 3, 4, generator=g).permute(2, 0, 1),  # (4, 2, 3)
    ]


def like(tensors: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """Tensors shaped like `tensors`: every other one dense, the rest with
    their dimensions' strides in reverse order."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, t in enumerate(tensors):
        if i % 2 == 0 and t.dim() >= 2:
            reverse = tuple(range(t.dim() - 1, -1, -1))
            out.append(torch.randn(tuple(reversed(t.shape)), generator=g).permute(reverse))
        else:
            out.append(torch.randn(t.shape, generator=g))
    return out


def on_device(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Device copies that keep each tensor's strides (and so its layout)."""
    out = []
    for t in tensors:
        d = torch.empty_strided(t.size(), t.stride(), device=DEVICE)
        d.copy_(t)
        out.append(d)
    return out


def test_add_scalar_in_place_mixed_layouts() -> None:
    cpu = [t.clone() if t.is_contiguous() else t for t in mixed_list(0)]
    dev = on_device(cpu)
    torch._foreach_add_(cpu, 0.75)
    run_native(lambda: torch._foreach_add_(dev, 0.75), ["aten::_foreach_add_.Scalar"])
    for i, (d, c) in enumerate(zip(dev, cpu)):
        assert d.stride() == c.stride(), f"tensor {i} changed its strides"
        assert_close(d, c, rtol=0, atol=0)


@pytest.mark.parametrize("alpha", [1.0, -0.5])
def test_add_list_functional_mixed_layouts(alpha: float) -> None:
    a, b = mixed_list(1), like(mixed_list(1), 2)
    expected = torch._foreach_add([t.contiguous() for t in a], [t.contiguous() for t in b], alpha=alpha)
    got = run_native(lambda: torch._foreach_add(on_device(a), on_device(b), alpha=alpha), [])
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-6, atol=1e-6)


def test_addcdiv_scalar_list_in_place_mixed_layouts() -> None:
    params = mixed_list(3)
    t1, t2 = like(params, 4), [x.abs() + 0.5 for x in like(params, 5)]
    scalars = [0.1 * (i + 1) for i in range(len(params))]
    cpu = [p.clone() for p in params]
    torch._foreach_addcdiv_(cpu, t1, t2, scalars)
    dev = on_device(params)
    run_native(lambda: torch._foreach_addcdiv_(dev, on_device(t1), on_device(t2), scalars), [])
    for d, c in zip(dev, cpu):
        assert_close(d, c, rtol=1e-6, atol=1e-6)
