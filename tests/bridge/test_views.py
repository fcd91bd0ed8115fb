"""Views share storage with their base; in-place ops write through views."""

from __future__ import annotations

import torch


def test_views_share_storage() -> None:
    base = torch.zeros(4, 6, device="flemu")
    for view in (base.view(24), base.reshape(2, 12), base.t(), base[1:3], base[:, 2],
                 base.unsqueeze(0), base.as_strided((2, 2), (6, 1), 1), base.unfold(1, 2, 2)):
        assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    base.view(24)[5] = 1.0
    assert base[0, 5].item() == 1.0
    base.t()[2].fill_(3.0)
    assert torch.equal(base[:, 2].cpu(), torch.full((4,), 3.0))


def test_in_place_ops_on_views_and_bases() -> None:
    host = torch.arange(12.0).reshape(3, 4)
    dev = host.clone().to("flemu")
    dev[1].add_(10)
    host[1].add_(10)
    dev[:, 1:3].mul_(2)
    host[:, 1:3].mul_(2)
    dev.t()[0].neg_()
    host.t()[0].neg_()
    assert torch.equal(dev.cpu(), host)
    dev.zero_()
    assert torch.count_nonzero(dev.cpu()) == 0


def test_in_place_ops_keep_identity_and_version() -> None:
    x = torch.ones(5, device="flemu")
    ptr = x.data_ptr()
    version = x._version
    y = x.add_(1).mul_(3).relu_()
    assert y is x and x.data_ptr() == ptr and x._version == version + 3
    assert x.cpu().tolist() == [6.0] * 5


def test_out_variants_resize_and_fill() -> None:
    a = torch.randn(3, 4, device="flemu")
    b = torch.randn(4, 5, device="flemu")
    out = torch.empty(0, device="flemu")
    torch.mm(a, b, out=out)
    assert out.shape == (3, 5)
    assert torch.allclose(out.cpu(), a.cpu() @ b.cpu(), atol=1e-5)
    out64 = torch.empty(3, 4, device="flemu", dtype=torch.float64)
    torch.add(a, a, out=out64)
    assert out64.dtype == torch.float64
    assert torch.allclose(out64.cpu(), (a.cpu() + a.cpu()).double())


def test_resize_and_set() -> None:
    x = torch.arange(4.0, device="flemu")
    x.resize_(8)
    assert x.shape == (8,) and x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.empty(0, device="flemu")
    y.set_(x.untyped_storage(), 2, (2, 2), (2, 1))
    assert y.cpu().tolist() == [[2.0, 3.0], [x[4].item(), x[5].item()]]
    z = torch.empty(3, device="flemu").set_(x)
    assert z.data_ptr() == x.data_ptr() and z.shape == x.shape
