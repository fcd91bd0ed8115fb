"""L1 random numbers: seeding, reproducibility, generator state, distributions."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def _draw(device: str) -> list[torch.Tensor]:
    return [torch.rand(4096, device=device).cpu(), torch.randn(4096, device=device).cpu(),
            torch.randint(0, 1000, (4096,), device=device).cpu(),
            torch.nn.functional.dropout(torch.ones(4096, device=device), 0.5).cpu()]


@pytest.mark.requirement("TFL-RNG-001")
def test_seeding(device: str) -> None:
    torch.manual_seed(1234)
    a = _draw(device)
    torch.manual_seed(1234)
    b = _draw(device)
    torch.manual_seed(4321)
    c = _draw(device)
    names = ["rand", "randn", "randint", "dropout"]
    for name, x, y, z in zip(names, a, b, c):
        assert torch.equal(x, y), f"{name}: the same seed gave different numbers"
        assert not torch.equal(x, z), f"{name}: different seeds gave the same numbers"
    assert not torch.equal(a[0][:2048], a[0][2048:]), "rand repeats itself within one call"


@pytest.mark.requirement("TFL-RNG-002")
def test_generator_state(target: Any, device: str) -> None:
    mod = getattr(torch, target.device_type)
    torch.manual_seed(99)
    state = mod.get_rng_state()
    first = torch.rand(1000, device=device).cpu()
    mod.set_rng_state(state)
    again = torch.rand(1000, device=device).cpu()
    assert torch.equal(first, again), "restoring the state did not replay the numbers"
    torch.manual_seed(5)
    with torch.random.fork_rng(devices=[0], device_type=target.device_type):
        torch.rand(1000, device=device)
    after_fork = torch.rand(1000, device=device).cpu()
    torch.manual_seed(5)
    plain = torch.rand(1000, device=device).cpu()
    assert torch.equal(after_fork, plain), "fork_rng leaked draws into the outer stream"
    g = torch.Generator(device=device)
    g.manual_seed(7)
    x = torch.rand(100, device=device, generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(x, torch.rand(100, device=device, generator=g).cpu()), \
        "an explicit device generator is not reproducible"


@pytest.mark.requirement("TFL-RNG-004")
def test_distributions(device: str) -> None:
    torch.manual_seed(2024)
    n = 200_000
    u = torch.rand(n, device=device).cpu().double()
    assert u.min() >= 0.0 and u.max() < 1.0, (float(u.min()), float(u.max()))
    assert abs(float(u.mean()) - 0.5) < 0.01, f"uniform mean {float(u.mean())}"
    z = torch.randn(n, device=device).cpu().double()
    assert abs(float(z.mean())) < 0.02, f"normal mean {float(z.mean())}"
    assert abs(float(z.std()) - 1.0) < 0.02, f"normal std {float(z.std())}"
    b = torch.bernoulli(torch.full((n,), 0.3, device=device)).cpu().double()
    assert abs(float(b.mean()) - 0.3) < 0.01, f"bernoulli rate {float(b.mean())}"
    r = torch.randint(0, 10, (n,), device=device).cpu()
    counts = torch.bincount(r, minlength=10).double() / n
    assert r.min() >= 0 and r.max() <= 9 and float((counts - 0.1).abs().max()) < 0.01, counts
    # The range of uniform_ with bounds, and its spread (the variance of U(a, b) is
    # (b - a)^2 / 12), not only its mean.
    w = torch.empty(n, device=device).uniform_(-3.0, 5.0).cpu().double()
    assert w.min() >= -3.0 and w.max() < 5.0, (float(w.min()), float(w.max()))
    assert abs(float(w.mean()) - 1.0) < 0.03, f"uniform_(-3, 5) mean {float(w.mean())}"
    assert abs(float(w.var()) - 64 / 12) < 0.1, f"uniform_(-3, 5) variance {float(w.var())}"
    assert abs(float(u.var()) - 1 / 12) < 0.002, f"rand variance {float(u.var())}"
    m = torch.normal(2.0, 3.0, (n,), device=device).cpu().double()
    assert abs(float(m.mean()) - 2.0) < 0.05 and abs(float(m.std()) - 3.0) < 0.05, \
        (float(m.mean()), float(m.std()))
