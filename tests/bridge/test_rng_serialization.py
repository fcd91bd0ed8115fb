"""RNG seeding and generator state; torch.save / torch.load of device tensors."""

from __future__ import annotations

import io

import torch
from support import assert_ok, run_python


def test_manual_seed_makes_device_randomness_reproducible() -> None:
    torch.manual_seed(123)
    a = torch.randn(100, device="flemu")
    torch.manual_seed(123)
    b = torch.randn(100, device="flemu")
    c = torch.randn(100, device="flemu")
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(b.cpu(), c.cpu())
    torch.flemu.manual_seed(5)
    d = torch.rand(10, device="flemu")
    torch.flemu.manual_seed(5)
    assert torch.equal(d.cpu(), torch.rand(10, device="flemu").cpu())


def test_generator_state_round_trips() -> None:
    torch.flemu.manual_seed(7)
    state = torch.flemu.get_rng_state()
    x = torch.rand(8, device="flemu")
    torch.flemu.set_rng_state(state)
    assert torch.equal(x.cpu(), torch.rand(8, device="flemu").cpu())
    assert torch.flemu.initial_seed() == 7


def test_explicit_device_generator() -> None:
    g = torch.Generator(device="flemu")
    g.manual_seed(42)
    a = torch.randn(5, device="flemu", generator=g)
    g.manual_seed(42)
    b = torch.randn(5, device="flemu", generator=g)
    assert g.device.type == "flemu"
    assert torch.equal(a.cpu(), b.cpu())


def test_fork_rng_restores_the_device_state() -> None:
    torch.manual_seed(1)
    with torch.random.fork_rng(device_type="flemu"):
        torch.rand(3, device="flemu")
    after_fork = torch.rand(3, device="flemu")
    torch.manual_seed(1)
    assert torch.equal(after_fork.cpu(), torch.rand(3, device="flemu").cpu())


def test_save_and_load_device_tensors() -> None:
    x = torch.randn(3, 4, device="flemu:1")
    buf = io.BytesIO()
    torch.save({"x": x, "view": x[1]}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["x"].device == torch.device("flemu", 1)
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    assert torch.equal(loaded["view"].cpu(), x[1].cpu())
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu["x"].device.type == "cpu" and torch.equal(on_cpu["x"], x.cpu())
    buf.seek(0)
    moved = torch.load(buf, map_location="flemu:0")
    assert moved["x"].device == torch.device("flemu", 0)


def test_module_state_dict_round_trip() -> None:
    m = torch.nn.Linear(3, 2).to("flemu")
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = torch.nn.Linear(3, 2)
    m2.load_state_dict(torch.load(buf, map_location="cpu"))
    assert torch.equal(m2.weight, m.weight.cpu())


def test_random_fills_need_no_python_meta_function() -> None:
    # In-place fills keep self's metadata; PyTorch's Python meta for normal_
    # would import torch._dynamo (seconds) on the first torch.randn.
    out = assert_ok(run_python(
        """
        import sys, torch, torch_fl
        x = torch.randn(4, 4, device="flemu")
        x.uniform_(); x.bernoulli_(0.5); x.fill_(2.0)
        print("torch._dynamo" in sys.modules, torch_fl.op_stats().get("aten::normal_").native)
        """))
    assert out.split() == ["False", "1"], out
