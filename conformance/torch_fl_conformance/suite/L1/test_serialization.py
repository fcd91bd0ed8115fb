"""L1 serialization: torch.save / torch.load of device tensors and modules."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch


def _roundtrip(obj: Any, **load_kwargs: Any) -> Any:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.requirement("TFL-SER-001")
def test_save_load_device(target: Any, device: str) -> None:
    x = torch.randn(5, 7, device=device)
    view = x[1:3]
    model = torch.nn.Sequential(torch.nn.Linear(7, 4), torch.nn.ReLU()).to(device)
    out = _roundtrip({"x": x, "view": view, "state": model.state_dict(), "n": 3})
    assert out["x"].device == x.device, f"loaded to {out['x'].device}, saved from {x.device}"
    assert torch.equal(out["x"].cpu(), x.cpu()), "values changed"
    assert torch.equal(out["view"].cpu(), view.cpu()), "a saved view changed"
    fresh = torch.nn.Sequential(torch.nn.Linear(7, 4), torch.nn.ReLU()).to(device)
    fresh.load_state_dict(out["state"])
    inp = torch.randn(2, 7, device=device)
    assert torch.equal(fresh(inp).cpu(), model(inp).cpu()), "reloaded module computes otherwise"
    if target.device_count > 1:
        y = torch.arange(6.0, device=f"{target.device_type}:1")
        back = _roundtrip(y)
        assert back.device == y.device, f"device index lost: {back.device}"


@pytest.mark.requirement("TFL-SER-002")
def test_map_location(device: str) -> None:
    x = torch.randn(3, 4, device=device)
    on_cpu = _roundtrip(x, map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, x.cpu()), on_cpu.device
    c = torch.randn(3, 4)
    on_dev = _roundtrip({"w": c}, map_location=device)["w"]
    assert on_dev.device == torch.device(device), on_dev.device
    assert torch.equal(on_dev.cpu(), c)
    fn = _roundtrip(x, map_location=lambda storage, loc: storage)
    assert fn.device.type == "cpu", f"map_location callable kept {fn.device}"
    mapped = _roundtrip(c, map_location={"cpu": device})
    assert mapped.device == torch.device(device), mapped.device
