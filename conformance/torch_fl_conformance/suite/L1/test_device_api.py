"""L1 device APIs: the torch.<name> module, torch.accelerator, module movement, autocast."""

from __future__ import annotations

from typing import Any

import pytest
import torch


@pytest.mark.requirement("TFL-DEV-001")
def test_device_module(target: Any) -> None:
    mod = getattr(torch, target.device_type)
    assert mod.is_available(), "is_available() is False for a loaded plugin"
    assert mod.device_count() == target.device_count
    start = mod.current_device()
    last = target.device_count - 1
    try:
        mod.set_device(last)
        assert mod.current_device() == last, mod.current_device()
        t = torch.ones(2, device=target.device_type)
        assert t.device.index == last, f"default index {t.device.index}, current {last}"
        with mod.device(0):
            assert mod.current_device() == 0
        assert mod.current_device() == last, "the device context did not restore"
    finally:
        mod.set_device(start)
    mod.synchronize()
    assert mod.get_device_name(0) == mod.get_device_properties(0).name


@pytest.mark.requirement("TFL-DEV-002")
def test_accelerator(target: Any) -> None:
    acc = torch.accelerator
    assert acc.is_available(), "torch.accelerator.is_available() is False"
    cur = acc.current_accelerator()
    assert cur is not None and cur.type == target.device_type, cur
    assert acc.device_count() == target.device_count, acc.device_count()
    start = acc.current_device_index()
    try:
        acc.set_device_index(target.device_count - 1)
        assert acc.current_device_index() == target.device_count - 1
    finally:
        acc.set_device_index(start)
    s = acc.current_stream()
    assert s.device.type == target.device_type, s.device
    x = torch.randn(100, device=target.device_type) * 2
    acc.synchronize()
    assert x.cpu().shape == (100,)


@pytest.mark.requirement("TFL-DEV-003")
def test_module_to(target: Any, device: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    moved = model.to(device)
    for name, p in list(moved.named_parameters()) + list(moved.named_buffers()):
        assert p.device == torch.device(device), f"{name} on {p.device}"
    x = torch.randn(3)
    method = getattr(x, target.device_type, None)
    assert method is not None, f"Tensor.{target.device_type}() is missing"
    assert method().device.type == target.device_type
    assert getattr(x.to(device), f"is_{target.device_type}", False), \
        f"Tensor.is_{target.device_type} is missing or False"


@pytest.mark.requirement("TFL-DEV-003")
@pytest.mark.capability("amp")
def test_autocast(target: Any, device: str) -> None:
    mod = getattr(torch, target.device_type)
    dtypes = mod.get_amp_supported_dtype()
    assert dtypes, "get_amp_supported_dtype() is empty although fp16/bf16 is advertised"
    a, b = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    for dt in dtypes:
        with torch.autocast(device_type=target.device_type, dtype=dt):
            c = a @ b
        assert c.dtype == dt, f"autocast({dt}) matmul gave {c.dtype}"
        torch.testing.assert_close(c.float().cpu(), a.cpu() @ b.cpu(), atol=0.1, rtol=0.05)
