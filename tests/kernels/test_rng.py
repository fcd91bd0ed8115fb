"""Random numbers on flemu: uniform_, normal_, bernoulli (scalar and tensor
probabilities), random_ (default, to, from/to ranges), randperm, and what
torch.rand/randn/randint/randperm/bernoulli reach, all native.

Statistics: with n draws, a sample mean is off by more than 6 standard errors
with probability below 2e-9, and the Kolmogorov-Smirnov statistic exceeds
1.95/sqrt(n) with probability below 0.1% (asymptotic Kolmogorov distribution);
a chi-square statistic over k equiprobable bins is compared with its mean
k-1 plus 6 of its standard deviations sqrt(2(k-1)). The seeds are fixed, so a
pass is reproducible, and the bounds are wide enough that a correct generator
fails them essentially never, while a biased one (a wrong range, a missing
scale, correlated lanes) fails them at these sample sizes."""

from __future__ import annotations

import math

import pytest
import torch
from nn_parity import ALL_FLOATS, run_native

DEVICE = "flemu"
N = 1 << 16


def ks_statistic(samples: torch.Tensor, cdf) -> float:
    x, _ = torch.sort(samples.double().flatten())
    n = x.numel()
    f = cdf(x)
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    lower = f - torch.arange(0, n, dtype=torch.float64) / n
    return float(torch.maximum(upper, lower).max())


def ks_bound(n: int) -> float:
    return 1.95 / math.sqrt(n)


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def chi_square(counts: torch.Tensor) -> tuple[float, float]:
    """The statistic against equal expected counts, and its 6-sigma bound."""
    counts = counts.double()
    k = counts.numel()
    expected = counts.sum() / k
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, (k - 1) + 6 * math.sqrt(2 * (k - 1))


def mean_bound(std: float, n: int) -> float:
    return 6 * std / math.sqrt(n)


@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=str)
def test_uniform(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    x = run_native(lambda: torch.empty(N, device=DEVICE, dtype=dtype).uniform_(-2.0, 3.0), ("aten::uniform_",))
    x = x.cpu().double()  # type: ignore[union-attr]
    assert float(x.min()) >= -2.0 and float(x.max()) <= 3.0, f"range [{float(x.min())}, {float(x.max())}]"
    assert abs(float(x.mean()) - 0.5) < mean_bound(5 / math.sqrt(12), N), f"mean {float(x.mean())}"
    assert abs(float(x.var()) - 25 / 12) < 0.05 * 25 / 12, f"variance {float(x.var())}, expected {25 / 12:.4f}"
    if dtype in (torch.float32, torch.float64):
        d = ks_statistic(x, lambda v: ((v + 2) / 5).clamp(0, 1))
        assert d < ks_bound(N), f"KS statistic {d:.5f} >= {ks_bound(N):.5f}"


def test_rand_is_half_open() -> None:
    torch.manual_seed(2)
    x = run_native(lambda: torch.rand(N, device=DEVICE), ("aten::uniform_",)).cpu()  # type: ignore[union-attr]
    assert float(x.min()) >= 0.0 and float(x.max()) < 1.0


@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=str)
def test_normal(dtype: torch.dtype) -> None:
    torch.manual_seed(3)
    x = run_native(lambda: torch.empty(N, device=DEVICE, dtype=dtype).normal_(1.5, 2.0), ("aten::normal_",))
    x = x.cpu().double()  # type: ignore[union-attr]
    assert abs(float(x.mean()) - 1.5) < mean_bound(2.0, N), f"mean {float(x.mean())}"
    # The sample variance of n normals has standard deviation sigma^2 sqrt(2/(n-1)).
    assert abs(float(x.var()) - 4.0) < 6 * 4.0 * math.sqrt(2 / (N - 1)) + 0.02, f"variance {float(x.var())}"
    if dtype in (torch.float32, torch.float64):
        d = ks_statistic((x - 1.5) / 2.0, normal_cdf)
        assert d < ks_bound(N), f"KS statistic {d:.5f} >= {ks_bound(N):.5f}"


def test_randn_lanes_are_independent() -> None:
    """Adjacent elements share one Philox block: they must not be correlated."""
    torch.manual_seed(4)
    x = run_native(lambda: torch.randn(N, device=DEVICE), ("aten::normal_",)).cpu().double()  # type: ignore[union-attr]
    for lag in (1, 2, 3, 4):
        r = float((x[:-lag] * x[lag:]).mean())
        assert abs(r) < mean_bound(1.0, N), f"lag-{lag} correlation {r:.5f}"


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])
def test_bernoulli_scalar(p: float) -> None:
    torch.manual_seed(5)
    x = run_native(lambda: torch.empty(N, device=DEVICE).bernoulli_(p), ("aten::bernoulli_.float",))
    x = x.cpu()  # type: ignore[union-attr]
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(float(x.mean()) - p) < mean_bound(math.sqrt(p * (1 - p)), N), f"mean {float(x.mean())}"


def test_bernoulli_tensor_probabilities() -> None:
    torch.manual_seed(6)
    probs = torch.tensor([0.0, 0.25, 0.5, 1.0]).repeat(N // 4)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        p = probs.to(DEVICE)
        return torch.bernoulli(p), torch.empty(N, device=DEVICE, dtype=torch.float64).bernoulli_(p)

    a, b = run_native(run, ("aten::bernoulli",))  # type: ignore[misc]
    for x in (a.cpu().double(), b.cpu().double()):
        lanes = x.view(-1, 4).mean(0)
        assert float(lanes[0]) == 0.0 and float(lanes[3]) == 1.0, f"p=0 / p=1 lanes gave {lanes.tolist()}"
        for i, p in ((1, 0.25), (2, 0.5)):
            assert abs(float(lanes[i]) - p) < mean_bound(math.sqrt(p * (1 - p)), N // 4)


def test_bernoulli_integer_and_bool_targets() -> None:
    torch.manual_seed(7)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.empty(N, device=DEVICE, dtype=torch.int64).bernoulli_(0.3),
                torch.empty(N, device=DEVICE, dtype=torch.bool).bernoulli_(0.3))

    a, b = run_native(run, ("aten::bernoulli_.float",))  # type: ignore[misc]
    for x in (a.cpu(), b.cpu()):
        assert abs(float(x.double().mean()) - 0.3) < mean_bound(math.sqrt(0.21), N)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.float64], ids=str)
def test_randint_range_and_uniformity(dtype: torch.dtype) -> None:
    torch.manual_seed(8)
    x = run_native(lambda: torch.randint(-3, 17, (N,), device=DEVICE, dtype=dtype)
                   if dtype != torch.uint8 else torch.randint(3, 23, (N,), device=DEVICE, dtype=dtype),
                   ("aten::random_.from",)).cpu().long()  # type: ignore[union-attr]
    low = -3 if dtype != torch.uint8 else 3
    assert int(x.min()) == low and int(x.max()) == low + 19, f"range [{int(x.min())}, {int(x.max())}]"
    stat, bound = chi_square(torch.bincount(x - low, minlength=20))
    assert stat < bound, f"chi-square {stat:.1f} >= {bound:.1f} over 20 values"


def test_random_variants() -> None:
    torch.manual_seed(9)

    def run() -> tuple[torch.Tensor, ...]:
        return (torch.empty(N, device=DEVICE, dtype=torch.int64).random_(5),          # [0, 5)
                torch.empty(N, device=DEVICE, dtype=torch.uint8).random_(),           # [0, 255]
                torch.empty(N, device=DEVICE, dtype=torch.float16).random_(),         # [0, 2^11]
                torch.empty(N, device=DEVICE, dtype=torch.int64).random_(-(2**62), 2**62),  # wide range
                torch.empty(N, device=DEVICE, dtype=torch.int8).random_(-100, None))  # [-100, 127]

    to5, u8, f16, wide, i8 = (t.cpu() for t in run_native(run, ("aten::random_", "aten::random_.to",  # type: ignore[union-attr]
                                                                   "aten::random_.from")))
    assert int(to5.min()) == 0 and int(to5.max()) == 4
    assert int(u8.long().min()) == 0 and int(u8.long().max()) == 255
    assert float(f16.min()) >= 0 and float(f16.max()) <= 2048 and bool((f16 == f16.round()).all())
    assert int(wide.min()) >= -(2**62) and int(wide.max()) < 2**62
    # 2^63 - 1 values: the mean of a uniform draw is near 0 within 6 standard errors.
    assert abs(float(wide.double().mean())) < mean_bound(2.0**63 / math.sqrt(3), N)
    assert int(i8.min()) == -100 and int(i8.max()) == 127


def test_random_bad_range_is_reported() -> None:
    with pytest.raises((RuntimeError, ValueError), match="from|to"):
        torch.empty(3, device=DEVICE, dtype=torch.int64).random_(5, 5)
    torch.flemu.synchronize()


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_randperm(n: int) -> None:
    torch.manual_seed(10)
    p = run_native(lambda: torch.randperm(n, device=DEVICE), ("aten::randperm",) if n else ()).cpu()  # type: ignore[union-attr]
    assert p.dtype == torch.int64
    assert torch.equal(p.sort().values, torch.arange(n)), "randperm must return a permutation"


def test_randperm_is_uniform() -> None:
    """All 24 orders of 4 elements come up about equally often."""
    g = torch.Generator(device=DEVICE).manual_seed(11)
    perms = run_native(lambda: [torch.randperm(4, device=DEVICE, generator=g).cpu() for _ in range(2400)],
                       ("aten::randperm.generator",))
    codes = torch.tensor([int("".join(map(str, p.tolist()))) for p in perms])  # type: ignore[union-attr]
    _, counts = codes.unique(return_counts=True)
    assert counts.numel() == 24, f"only {counts.numel()} of the 24 orders appeared"
    stat, bound = chi_square(counts)
    assert stat < bound, f"chi-square {stat:.1f} >= {bound:.1f} over the 24 orders"


def draw_all() -> list[torch.Tensor]:
    return [torch.rand(100, device=DEVICE).cpu(), torch.randn(100, device=DEVICE).cpu(),
            torch.randint(0, 1000, (100,), device=DEVICE).cpu(), torch.randperm(50, device=DEVICE).cpu(),
            torch.bernoulli(torch.full((100,), 0.5, device=DEVICE)).cpu()]


def test_reproducible_from_manual_seed() -> None:
    torch.manual_seed(123)
    a = draw_all()
    torch.manual_seed(123)
    b = draw_all()
    torch.flemu.manual_seed(123)
    c = draw_all()
    torch.manual_seed(124)
    d = draw_all()
    for x, y, z, w in zip(a, b, c, d):
        assert torch.equal(x, y), "torch.manual_seed must make the device draws reproducible"
        assert torch.equal(x, z), "torch.flemu.manual_seed must seed the same generator"
        assert not torch.equal(x, w), "another seed must give other draws"
    assert not torch.equal(a[0], draw_all()[0]), "consecutive draws must differ"


def test_generator_objects_and_state() -> None:
    g1 = torch.Generator(device=DEVICE).manual_seed(5)
    g2 = torch.Generator(device=DEVICE).manual_seed(5)
    x = torch.empty(1000, device=DEVICE).normal_(generator=g1).cpu()
    torch.manual_seed(99)  # the default generator does not affect explicit ones
    y = torch.empty(1000, device=DEVICE).normal_(generator=g2).cpu()
    assert torch.equal(x, y)
    state = torch.flemu.get_rng_state()
    a = torch.rand(64, device=DEVICE).cpu()
    torch.flemu.set_rng_state(state)
    b = torch.rand(64, device=DEVICE).cpu()
    assert torch.equal(a, b), "restoring the RNG state must replay the draws"


def test_values_do_not_depend_on_layout() -> None:
    """Element i of a strided target gets draw i of its logical order."""
    torch.manual_seed(21)
    dense = torch.empty(64, 48, device=DEVICE).uniform_().cpu()
    torch.manual_seed(21)
    t = torch.empty(48, 64, device=DEVICE).t()  # a transposed view
    t.uniform_()
    assert torch.equal(t.cpu(), dense)
