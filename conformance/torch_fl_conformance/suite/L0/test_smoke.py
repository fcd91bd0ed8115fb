"""L0 smoke: load, enumerate, properties, allocation, copies, and the most used
tensor APIs against the CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch_fl_conformance.kernel_watch import synchronize
from torch_fl_conformance.tolerances import compare

DTYPES = {
    "bool": "", "uint8": "", "int8": "", "int16": "", "int32": "", "int64": "",
    "float16": "fp16", "bfloat16": "bf16", "float32": "", "float64": "fp64",
}
KNOWN_FLAGS = {"fp64", "fp16", "bf16", "unified_memory", "peer_access", "host_mapping",
               "complex", "timing_events", "async_copy"}


def _need(target: Any, dtype: str) -> torch.dtype:
    cap = DTYPES[dtype]
    if cap and not target.has(cap):
        pytest.skip(f"{cap} not advertised by {target.plugin_name}")
    return getattr(torch, dtype)


def _random(dtype: torch.dtype, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=gen,
                         dtype=torch.int64).to(dtype)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1)
    return flat if t.dtype == torch.bool else flat.view(torch.uint8)


@pytest.mark.requirement("TFL-SMOKE-001")
def test_load(target: Any) -> None:
    import torch_fl

    h = torch_fl.get_plugin()
    assert h is not None and h.name == target.device_type, (h, target.device_type)
    for field in ("plugin_name", "vendor", "version"):
        assert getattr(h, field).strip(), f"the plugin reports an empty {field}"
    assert h.abi[0] == h.host_abi[0], f"plugin ABI {h.abi} vs host ABI {h.host_abi}"
    assert hasattr(torch, target.device_type), f"torch.{target.device_type} is not registered"


@pytest.mark.requirement("TFL-SMOKE-002")
def test_enumerate(target: Any) -> None:
    mod = getattr(torch, target.device_type)
    n = mod.device_count()
    assert n >= 1, f"device_count() = {n}"
    assert n == target.device_count, f"device_count() {n} vs handle {target.device_count}"
    for i in range(n):
        t = torch.ones(3, device=f"{target.device_type}:{i}")
        assert t.device == torch.device(target.device_type, i), t.device
        assert t.cpu().sum().item() == 3.0
    with pytest.raises((RuntimeError, ValueError, IndexError)):
        torch.ones(1, device=f"{target.device_type}:{n}")


@pytest.mark.requirement("TFL-SMOKE-003")
def test_properties(target: Any) -> None:
    mod = getattr(torch, target.device_type)
    for i in range(target.device_count):
        p = mod.get_device_properties(i)
        assert isinstance(p.name, str) and p.name.strip(), f"device {i}: empty name"
        assert p.total_memory > 0, f"device {i}: total_memory {p.total_memory}"
        a = p.memory_alignment
        assert a > 0 and a & (a - 1) == 0, f"device {i}: alignment {a} is not a power of two"
        unknown = set(p.capabilities) - KNOWN_FLAGS
        assert not unknown, f"device {i}: unknown capability flags {sorted(unknown)}"


@pytest.mark.requirement("TFL-SMOKE-004")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_allocate(dtype: str, target: Any, device: str) -> None:
    dt = _need(target, dtype)
    mod = getattr(torch, target.device_type)
    before = mod.memory_allocated()
    for shape in [(), (0,), (0, 4), (7,), (3, 5, 2), (1 << 18,)]:
        t = torch.empty(shape, dtype=dt, device=device)
        assert (t.device, t.dtype, tuple(t.shape)) == (torch.device(device), dt, shape), \
            (t.device, t.dtype, t.shape)
    big = torch.empty(1 << 18, dtype=dt, device=device)
    grown = mod.memory_allocated() - before
    assert grown >= big.numel() * big.element_size(), \
        f"memory_allocated grew by {grown} bytes for a {big.nbytes}-byte tensor"


@pytest.mark.requirement("TFL-SMOKE-005")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_copy_roundtrip(dtype: str, target: Any, device: str) -> None:
    dt = _need(target, dtype)
    gen = torch.Generator().manual_seed(1)
    for shape in [(), (1,), (33,), (4, 7, 3), (1 << 16,)]:
        x = _random(dt, shape, gen)
        back = x.to(device).cpu()
        assert back.shape == x.shape and torch.equal(_bytes(back), _bytes(x)), \
            f"{dtype}{shape}: host->device->host changed the bytes"
    base = _random(dt, (6, 10), gen)
    for name, view in [("transposed", base.t()), ("sliced", base[::2, 1::3]),
                       ("expanded", base[:1].expand(4, 10))]:
        d = view.to(device)
        assert torch.equal(d.cpu(), view), f"{dtype} {name}: host->device copy differs"
    d = base.to(device)
    assert torch.equal(d.t().cpu(), base.t()), f"{dtype}: strided device->host copy differs"
    assert torch.equal(d[::2, 1::3].contiguous().cpu(), base[::2, 1::3]), \
        f"{dtype}: strided device-side contiguous() differs"
    dst = torch.empty_like(d)
    dst.copy_(d)
    assert torch.equal(dst.cpu(), base), f"{dtype}: device->device copy differs"


def _apis() -> dict[str, Callable[..., Any]]:
    return {
        "zeros": lambda d, x, y, m: torch.zeros(3, 4, device=d),
        "ones": lambda d, x, y, m: torch.ones(2, 5, device=d),
        "full": lambda d, x, y, m: torch.full((3, 3), 2.5, device=d),
        "arange": lambda d, x, y, m: torch.arange(0, 10, 2, device=d),
        "fill_": lambda d, x, y, m: torch.empty(4, 4, device=d).fill_(1.5),
        "zero_": lambda d, x, y, m: x.clone().zero_(),
        "add": lambda d, x, y, m: x + y,
        "add_alpha": lambda d, x, y, m: torch.add(x, y, alpha=2),
        "sub": lambda d, x, y, m: x - y,
        "mul": lambda d, x, y, m: x * y,
        "div": lambda d, x, y, m: x / (y.abs() + 1),
        "neg": lambda d, x, y, m: -x,
        "abs": lambda d, x, y, m: x.abs(),
        "relu": lambda d, x, y, m: torch.relu(x),
        "exp": lambda d, x, y, m: x.exp(),
        "log": lambda d, x, y, m: (x.abs() + 1).log(),
        "sqrt": lambda d, x, y, m: x.abs().sqrt(),
        "pow": lambda d, x, y, m: x.pow(2),
        "sigmoid": lambda d, x, y, m: torch.sigmoid(x),
        "tanh": lambda d, x, y, m: torch.tanh(x),
        "clamp": lambda d, x, y, m: x.clamp(-0.5, 0.5),
        "sum": lambda d, x, y, m: x.sum(),
        "sum_dim": lambda d, x, y, m: x.sum(dim=1),
        "mean": lambda d, x, y, m: x.mean(dim=0),
        "std": lambda d, x, y, m: x.std(),
        "max_dim": lambda d, x, y, m: x.max(dim=1),
        "argmax": lambda d, x, y, m: x.argmax(dim=1),
        "matmul": lambda d, x, y, m: x @ m,
        "mm": lambda d, x, y, m: torch.mm(x, m),
        "linear": lambda d, x, y, m: torch.nn.functional.linear(x, m.t(), m[0, :3].clone()),
        "softmax": lambda d, x, y, m: torch.softmax(x, dim=1),
        "transpose": lambda d, x, y, m: x.t().contiguous(),
        "reshape": lambda d, x, y, m: x.reshape(5, 4).view(20),
        "cat": lambda d, x, y, m: torch.cat([x, y], dim=0),
        "stack": lambda d, x, y, m: torch.stack([x, y]),
        "slice": lambda d, x, y, m: x[1:3, ::2].clone(),
        "index_select": lambda d, x, y, m: x.index_select(1, torch.tensor([0, 2], device=d)),
        "gather": lambda d, x, y, m: x.gather(1, torch.tensor([[0], [1], [2], [3]], device=d)),
        "masked_fill": lambda d, x, y, m: x.masked_fill(x > 0, 0.0),
        "where": lambda d, x, y, m: torch.where(x > y, x, y),
        "compare": lambda d, x, y, m: (x > y, x == y.abs(), x <= 0),
        "to_dtype": lambda d, x, y, m: (x.to(torch.int32), (x > 0).to(torch.float32)),
        "sort": lambda d, x, y, m: torch.sort(x, dim=1),
        "topk": lambda d, x, y, m: torch.topk(x, 2, dim=1),
        "cumsum": lambda d, x, y, m: x.cumsum(dim=1),
        "expand_clone": lambda d, x, y, m: x[:1].expand(3, 5).clone(),
        "inplace_add": lambda d, x, y, m: x.clone().add_(y).mul_(2),
        "item": lambda d, x, y, m: x.sum().item(),
    }


APIS = _apis()
# The op_db name whose tolerance class an API's result is compared with (its own
# name where that is one): a sum or a matmul may accumulate in another order.
_TOLERANCE_OF = {"sum_dim": "sum", "max_dim": "max.reduction_with_dim",
                 "linear": "nn.functional.linear", "add_alpha": "add", "inplace_add": "add"}


@pytest.mark.parametrize("check", [
    pytest.param("matches_cpu", marks=pytest.mark.requirement("TFL-SMOKE-006")),
    pytest.param("native", marks=pytest.mark.requirement("TFL-SMOKE-007")),
])
@pytest.mark.parametrize("api", list(APIS))
def test_api(api: str, check: str, target: Any, device: str, record: Any) -> None:
    import torch_fl

    fn = APIS[api]
    gen = torch.Generator().manual_seed(7)
    x, y = torch.randn(4, 5, generator=gen), torch.randn(4, 5, generator=gen)
    m = torch.randn(5, 3, generator=gen)
    ref = fn("cpu", x, y, m)
    dx, dy, dm = x.to(device), y.to(device), m.to(device)
    with torch_fl.op_stats_scope() as scope:
        out = fn(device, dx, dy, dm)
        synchronize(device)
        out_cpu = torch.utils._pytree.tree_map(
            lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, out)
    fallback = sorted({r.op for r in scope.table if r.cpu_fallback})
    record("fallback_ops", fallback)
    if check == "matches_cpu":
        bad, _, _ = compare(out_cpu, ref, "output", _TOLERANCE_OF.get(api, api))
        assert not bad, f"{api}: {bad[0].where}: {bad[0].message}"
    else:
        assert not fallback, f"{api} ran on the CPU fallback: {', '.join(fallback)}"
