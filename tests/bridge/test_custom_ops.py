"""Plugin custom operators with a backward kernel, and the symbol convention."""

from __future__ import annotations

import torch
import torch_fl


def test_custom_op_forward_and_backward(flemu: torch_fl.PluginHandle) -> None:
    assert "flemu::scale_add" in flemu.custom_ops
    x = torch.randn(3, 4, device="flemu", requires_grad=True)
    y = torch.randn(3, 4, device="flemu", requires_grad=True)
    out = torch.ops.flemu.scale_add(x, y, 0.5)
    assert torch.allclose(out.cpu(), (x + 0.5 * y).detach().cpu())
    out.sum().backward()
    assert torch.allclose(x.grad.cpu(), torch.ones(3, 4))
    assert torch.allclose(y.grad.cpu(), torch.full((3, 4), 0.5))


def test_custom_op_passes_gradcheck_in_the_float32_strategy() -> None:
    # flemu's custom op takes float32: check the analytic gradient against
    # finite differences with float32-appropriate tolerances.
    x = torch.randn(5, device="flemu", requires_grad=True)
    y = torch.randn(5, device="flemu", requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b: torch.ops.flemu.scale_add(a, b, 2.0), (x, y), eps=1e-2, atol=1e-2, rtol=1e-2
    )


def test_symbol_convention_kernels_are_registered(flemu: torch_fl.PluginHandle) -> None:
    assert "torch_fl_op_abs" in flemu.symbol_kernels
    assert "aten::abs" in flemu.kernels and "aten::maximum" in flemu.kernels
    a = torch.tensor([[-1.0, 2.0], [3.0, -4.0]], device="flemu")
    b = torch.tensor([0.5, 0.5], device="flemu")
    with torch_fl.op_stats_scope() as s:
        m = torch.maximum(a, b)      # broadcast done by the bridge for the kernel
        n = torch.abs(a.t())         # made contiguous by the bridge for the kernel
    assert s.table.get("aten::maximum").native == 1 and s.table.get("aten::abs").native == 1
    assert torch.equal(m.cpu(), torch.maximum(a.cpu(), b.cpu()))
    assert torch.equal(n.cpu(), a.cpu().t().abs())


def test_custom_op_traces_under_fake_tensors_and_dynamo(flemu: torch_fl.PluginHandle) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 5, device="flemu")
        out = torch.ops.flemu.scale_add(x, x, 2.0)
    assert out.shape == (3, 5) and out.device.type == "flemu"

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.ops.flemu.scale_add(a, b, 0.5) * 2

    a = torch.randn(4, 6, device="flemu")
    b = torch.randn(4, 6, device="flemu")
    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert torch.allclose(compiled(a, b).cpu(), (a.cpu() + 0.5 * b.cpu()) * 2, atol=1e-6)
