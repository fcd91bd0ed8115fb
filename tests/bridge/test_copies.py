"""Copies host<->device and device<->device: dense, strided, dtype-changing, across
the two devices with and without peer access."""

from __future__ import annotations

import pytest
import torch
import torch_fl
from support import assert_ok, run_python

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int8, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_every_dtype(dtype: torch.dtype) -> None:
    host = (torch.arange(24) % 7).to(dtype).reshape(2, 3, 4)
    dev = host.to("flemu")
    assert dev.device.type == "flemu" and dev.dtype == dtype
    back = dev.cpu()
    assert torch.equal(back, host), (back, host)


def test_non_contiguous_sources_and_destinations() -> None:
    host = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    dev = host.to("flemu")
    for view in (lambda t: t.transpose(0, 2), lambda t: t[:, 1:3, ::2], lambda t: t.permute(1, 2, 0),
                 lambda t: t[1], lambda t: t.expand(2, 3, 4, 5)[1]):
        assert torch.equal(view(dev).cpu(), view(host))
    # Host strided view into a device strided view.
    dst = torch.zeros(5, 4, device="flemu")
    dst.t()[1:3].copy_(host[0, 1:3])
    expected = torch.zeros(5, 4)
    expected.t()[1:3].copy_(host[0, 1:3])
    assert torch.equal(dst.cpu(), expected)


def test_dtype_conversion_on_copy() -> None:
    host = torch.linspace(-3, 3, 12)
    dev = host.to("flemu")
    assert torch.equal(dev.to(torch.float64).cpu(), host.double())
    assert torch.equal(dev.to(torch.int32).cpu(), host.to(torch.int32))
    assert torch.equal(dev.half().cpu(), host.half())
    assert torch.equal(host.to("flemu", torch.bfloat16).cpu(), host.bfloat16())
    out = torch.empty(12, dtype=torch.float64)
    out.copy_(dev)
    assert torch.equal(out, host.double())


def test_broadcasting_copy() -> None:
    dst = torch.zeros(3, 4, device="flemu")
    dst.copy_(torch.arange(4.0))
    assert torch.equal(dst.cpu(), torch.arange(4.0).expand(3, 4))
    dst.copy_(torch.arange(3.0, device="flemu").unsqueeze(1))
    assert torch.equal(dst.cpu(), torch.arange(3.0).unsqueeze(1).expand(3, 4))


def test_copies_across_devices() -> None:
    host = torch.randn(64, 33)
    a = host.to("flemu:0")
    b = a.to("flemu:1")
    assert b.device.index == 1 and torch.equal(b.cpu(), host)
    c = a.t().to("flemu:1")
    assert torch.equal(c.cpu(), host.t())
    d = a.to("flemu:1", torch.float64)
    assert torch.equal(d.cpu(), host.double())
    e = torch.empty(33, 64, device="flemu:1")
    e.copy_(a.t())
    assert torch.equal(e.cpu(), host.t())


def test_cross_device_copies_staged_through_host_without_peer_access() -> None:
    out = assert_ok(run_python(
        """
        import torch, torch_fl
        assert torch_fl.get_plugin().devices[0].has("peer_access") is False
        h = torch.randn(1000)
        a = h.to("flemu:0")
        with torch_fl.op_stats_scope() as s:
            b = a.to("flemu:1")
        assert torch.equal(b.cpu(), h)
        print(s.table.get("aten::_copy_from").bytes_copied)
        """, env={"FLEMU_PEER_ACCESS": "0"}))
    # Staged: device->host then host->device.
    assert int(out.strip()) == 2 * 1000 * 4, out


def test_peer_copy_moves_no_bytes_through_the_host() -> None:
    a = torch.randn(1000, device="flemu:0")
    with torch_fl.op_stats_scope() as s:
        b = a.to("flemu:1")
    assert s.table.get("aten::_copy_from").bytes_copied == 0
    assert torch.equal(a.cpu(), b.cpu())


def test_pinned_memory_and_non_blocking_copies() -> None:
    host = torch.randn(256, 256).pin_memory()
    assert host.is_pinned()
    dev = host.to("flemu", non_blocking=True)
    back = torch.empty_like(host).pin_memory()
    back.copy_(dev, non_blocking=True)
    torch.flemu.synchronize()
    assert torch.equal(back, host)


def test_item_and_scalar_reads() -> None:
    x = torch.tensor([1.5, 2.5], device="flemu")
    assert x[1].item() == 2.5
    assert torch.tensor(7, device="flemu").item() == 7
    assert bool(torch.tensor(True, device="flemu"))
    assert x.sum().item() == 4.0
    assert x.tolist() == [1.5, 2.5]


def test_clone_and_contiguous_keep_values() -> None:
    host = torch.randn(6, 5)
    dev = host.to("flemu")
    t = dev.t()
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c.is_contiguous() and torch.equal(c.cpu(), host.t())
    assert torch.equal(dev.clone().cpu(), host)


def test_lazy_conjugate_and_negative_bits_are_resolved_by_copies() -> None:
    c = torch.randn(6, dtype=torch.complex64)
    d = c.to("flemu")
    assert torch.equal(d.conj().cpu(), c.conj().resolve_conj())
    assert torch.equal(d.conj()._neg_view().cpu(), -c.conj().resolve_conj())
    into_conj = torch.empty(6, dtype=torch.complex64, device="flemu")
    into_conj.conj().copy_(c)  # the destination carries the bit
    assert torch.equal(into_conj.cpu(), c.conj().resolve_conj())
    on_device = torch.empty_like(d)
    on_device.copy_(d.conj())
    assert torch.equal(on_device.cpu(), c.conj().resolve_conj())


def test_ops_that_conjugate_internally_fall_back_instead_of_recursing() -> None:
    x = torch.randn(5)
    with torch_fl.op_stats_scope() as s:
        assert torch.allclose(torch.fft.hfft(x.to("flemu")).cpu(), torch.fft.hfft(x), atol=1e-5)
    assert s.table.get("aten::_fft_c2r").cpu_fallback == 1
