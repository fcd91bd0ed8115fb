"""torch.autocast on the device."""

from __future__ import annotations

import torch


def test_autocast_runs_matmul_in_bfloat16_and_keeps_sums_in_float32() -> None:
    a = torch.randn(8, 8, device="flemu")
    with torch.autocast("flemu", dtype=torch.bfloat16):
        y = a @ a
        s = torch.nn.functional.softmax(y, dim=-1)
    assert y.dtype == torch.bfloat16
    assert s.dtype == torch.float32
    ref = (a.cpu().bfloat16() @ a.cpu().bfloat16()).float()
    assert torch.allclose(y.float().cpu(), ref, atol=0.1, rtol=0.02)


def test_autocast_linear_float16() -> None:
    m = torch.nn.Linear(4, 4).to("flemu")
    x = torch.randn(2, 4, device="flemu")
    with torch.autocast("flemu", dtype=torch.float16):
        y = m(x)
    assert y.dtype == torch.float16


def test_ops_without_an_autocast_rule_run_unchanged() -> None:
    x = torch.randn(3, 3, device="flemu")
    with torch.autocast("flemu", dtype=torch.bfloat16):
        s = x + x
        r = torch.arange(0, 8, device="flemu")
        e = torch.nn.functional.embedding(r[:2], x)
    assert s.dtype == torch.float32 and r.dtype == torch.int64 and e.dtype == torch.float32
    assert torch.equal(s.cpu(), x.cpu() * 2)
    assert torch.equal(r.cpu(), torch.arange(0, 8))
