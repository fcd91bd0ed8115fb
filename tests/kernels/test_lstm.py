"""The fused LSTM cell on flemu: nn.LSTM on a non-CPU device runs
aten::_thnn_fused_lstm_cell per step and _thnn_fused_lstm_cell_backward_impl in
backward (CUDA-only ops upstream: there is no CPU kernel to fall back to).
Checked against nn.LSTM on the CPU and against ATen's cell equations."""

from __future__ import annotations

import pytest
import torch
from native_check import FLOAT_DTYPES, assert_close, make, run_native, tol

CELL_OPS = ["aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl"]


def reference_cell(ig: torch.Tensor, hg: torch.Tensor, cx: torch.Tensor, ib: torch.Tensor | None,
                   hb: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    gates = ig + hg if ib is None else ig + hg + ib + hb
    i, f, g, o = gates.chunk(4, 1)
    cy = torch.sigmoid(f) * cx + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cy), cy


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_cell_forward_backward(dtype: torch.dtype, bias: bool) -> None:
    b, h = 3, 5
    ig, hg = make((b, 4 * h), dtype, seed=1), make((b, 4 * h), dtype, seed=2)
    cx = make((b, h), dtype, seed=3)
    ib = make((4 * h,), dtype, seed=4) if bias else None
    hb = make((4 * h,), dtype, seed=5) if bias else None
    leaves = [t for t in (ig, hg, cx, ib, hb) if t is not None]
    ref_in = [t.detach().double().clone().requires_grad_() for t in leaves]
    rhy, rcy = reference_cell(ref_in[0], ref_in[1], ref_in[2], *(ref_in[3:] if bias else (None, None)))
    (rhy.sum() + 2 * rcy.sum()).backward()

    def run() -> tuple[torch.Tensor, ...]:
        dev = [t.to("flemu").requires_grad_() for t in leaves]
        hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(dev[0], dev[1], dev[2], *(dev[3:] if bias else (None, None)))
        (hy.sum() + 2 * cy.sum()).backward()
        return (hy.detach(), cy.detach(), *(t.grad for t in dev))

    outs = run_native(run, CELL_OPS)
    refs = [rhy.detach(), rcy.detach(), *(t.grad for t in ref_in)]
    for o, r in zip(outs, refs):
        assert_close(o, r.to(dtype), **tol(dtype, 8))


def test_cell_without_bias_is_native() -> None:
    # PyTorch's meta function reads the absent biases; the bridge shapes the outputs.
    g, c = make((2, 8), torch.float32, seed=15), make((2, 2), torch.float32, seed=16)
    hy, cy, ws = run_native(
        lambda: torch.ops.aten._thnn_fused_lstm_cell(g.to("flemu"), g.to("flemu"), c.to("flemu")),
        CELL_OPS[:1])
    rhy, rcy = reference_cell(g, g, c, None, None)
    assert ws.shape == (2, 8)
    assert_close(hy, rhy, **tol(torch.float32, 8))
    assert_close(cy, rcy, **tol(torch.float32, 8))


def test_cell_backward_without_bias_leaves_grad_bias_undefined() -> None:
    """has_bias=False: the bias gradient is not requested (a NULL output)."""
    ig, hg = make((3, 8), torch.float64, seed=17), make((3, 8), torch.float64, seed=18)
    cx = make((3, 2), torch.float64, seed=23)
    ref = [t.clone().requires_grad_() for t in (ig, hg, cx)]
    rhy, rcy = reference_cell(*ref, None, None)
    gh, gc = make((3, 2), torch.float64, seed=24), make((3, 2), torch.float64, seed=25)
    torch.autograd.backward([rhy, rcy], [gh, gc])
    _, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(ig.to("flemu"), hg.to("flemu"), cx.to("flemu"),
                                                    torch.zeros(8, dtype=torch.float64, device="flemu"),
                                                    torch.zeros(8, dtype=torch.float64, device="flemu"))
    grad_gates, grad_cx, grad_bias = run_native(
        lambda: torch.ops.aten._thnn_fused_lstm_cell_backward_impl(gh.to("flemu"), gc.to("flemu"), cx.to("flemu"),
                                                                  cy, ws, False), CELL_OPS[1:])
    assert grad_bias is None
    assert_close(grad_gates, ref[0].grad, **tol(torch.float64))
    assert_close(grad_gates, ref[1].grad, **tol(torch.float64))
    assert_close(grad_cx, ref[2].grad, **tol(torch.float64))


def test_cell_workspace_holds_activated_gates() -> None:
    ig, hg = make((2, 8), torch.float32, seed=6), make((2, 8), torch.float32, seed=7)
    cx = make((2, 2), torch.float32, seed=8)
    ib, hb = make((8,), torch.float32, seed=19), make((8,), torch.float32, seed=20)
    _, _, ws = run_native(lambda: torch.ops.aten._thnn_fused_lstm_cell(*(t.to("flemu") for t in (ig, hg, cx, ib, hb))),
                          CELL_OPS[:1])
    i, f, g, o = (ig + hg + ib + hb).chunk(4, 1)
    assert_close(ws, torch.cat([torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)], 1),
                 **tol(torch.float32, 2))


def test_cell_backward_with_only_one_gradient() -> None:
    """grad_hy or grad_cy may be undefined (a state that is not used downstream)."""
    ig, hg = make((2, 12), torch.float64, seed=9), make((2, 12), torch.float64, seed=10)
    cx = make((2, 3), torch.float64, seed=11)
    ib, hb = make((12,), torch.float64, seed=21), make((12,), torch.float64, seed=22)
    for use in ("hy", "cy"):
        ref = [t.clone().requires_grad_() for t in (ig, hg, cx, ib, hb)]
        rhy, rcy = reference_cell(*ref)
        (rhy if use == "hy" else rcy).pow(2).sum().backward()

        def run() -> list[torch.Tensor]:
            dev = [t.to("flemu").requires_grad_() for t in (ig, hg, cx, ib, hb)]
            hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(*dev)
            (hy if use == "hy" else cy).pow(2).sum().backward()  # noqa: B023
            return [t.grad for t in dev]

        for o, r in zip(run_native(run, CELL_OPS), ref):
            assert_close(o, r.grad, **tol(torch.float64))


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
def test_nn_lstm_matches_cpu(batch_first: bool) -> None:
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 10, num_layers=2, batch_first=batch_first)
    x = make((3, 5, 6) if batch_first else (5, 3, 6), torch.float32, seed=12)
    h0 = make((2, 3, 10), torch.float32, seed=13)
    c0 = make((2, 3, 10), torch.float32, seed=14)
    xc = x.clone().requires_grad_()
    ref, (rh, rc) = lstm(xc, (h0, c0))
    (ref.sum() + rh.pow(2).sum() + rc.sum()).backward()
    ref_grads = [p.grad.clone() for p in lstm.parameters()]
    lstm.zero_grad()
    dev = lstm.to("flemu")

    def run() -> list[torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        out, (hn, cn) = dev(xd, (h0.to("flemu"), c0.to("flemu")))
        (out.sum() + hn.pow(2).sum() + cn.sum()).backward()
        return [out.detach(), hn.detach(), cn.detach(), xd.grad, *(p.grad for p in dev.parameters())]

    outs = run_native(run, CELL_OPS)
    refs = [ref.detach(), rh.detach(), rc.detach(), xc.grad, *ref_grads]
    for o, r in zip(outs, refs):
        assert_close(o, r, atol=1e-5, rtol=1e-4)


@pytest.mark.filterwarnings("ignore:.*is not native:UserWarning")
def test_bad_shapes_are_rejected() -> None:
    # Refused with the sizes before any kernel runs (the bridge shapes this
    # bias-free cell itself).
    ig = torch.zeros(2, 8, device="flemu")
    cx = torch.zeros(2, 3, device="flemu")  # 4 * 3 != 8
    with pytest.raises(RuntimeError, match="size"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig, cx)
        torch.flemu.synchronize()
