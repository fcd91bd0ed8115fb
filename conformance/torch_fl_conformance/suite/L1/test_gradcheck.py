"""L1 gradcheck of the core differentiable operators.

float64 (TFL-GRAD-001, devices with fp64): torch.autograd.gradcheck on the device,
fast mode (a random projection of the Jacobian), eps 1e-6, atol 1e-5, rtol 1e-3.

float32 (TFL-GRAD-002, every device): finite differences in float32 are too noisy to
be a test, so the device's float32 analytic vector-Jacobian products are compared
with float64 ones computed on the CPU (whose correctness gradcheck confirms first),
within the float32 gradient bound of 1e-2.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch_fl_conformance import opinfo_sweep

CORE_OPS = [
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "exp", "log", "sqrt", "pow", "tanh",
    "sigmoid", "sum", "mean", "matmul", "mm", "addmm", "bmm", "t", "cat", "stack",
    "index_select", "gather", "where", "clamp", "cumsum", "max.reduction_with_dim",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "softmax",
    "log_softmax", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.layer_norm", "nn.functional.embedding", "nn.functional.mse_loss",
    "nn.functional.cross_entropy", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.dropout",
]
MAX_ELEMENTS = 256


def _params() -> list[Any]:
    out = []
    for op in CORE_OPS:
        out.append(pytest.param(op, "float64", id=f"{op}-float64",
                                marks=pytest.mark.requirement("TFL-GRAD-001")))
        out.append(pytest.param(op, "float32", id=f"{op}-float32",
                                marks=pytest.mark.requirement("TFL-GRAD-002")))
    return out


def _sample(op_name: str) -> tuple[Any, Any]:
    infos = opinfo_sweep.op_infos()
    if op_name not in infos:
        pytest.fail(f"{op_name} is not in this PyTorch's op_db; update CORE_OPS", pytrace=False)
    op = infos[op_name]
    best: tuple[int, Any] | None = None
    for s in itertools.islice(op.sample_inputs("cpu", torch.float64, requires_grad=True), 30):
        tensors = [t for t in tree_flatten((s.input, s.args, s.kwargs))[0]
                   if isinstance(t, torch.Tensor)]
        size = sum(t.numel() for t in tensors)
        if any(t.requires_grad for t in tensors) and 0 < size and (best is None
                                                                   or size < best[0]):
            best = (size, s)
        if best is not None and best[0] <= MAX_ELEMENTS:
            break
    if best is None:
        pytest.skip(f"op_db has no differentiable sample of {op_name}")
    return op, best[1]


def _fn(op: Any, sample: Any, leaves_pos: list[int], template: list[Any]) -> Any:
    def f(*leaves: torch.Tensor) -> Any:
        flat = list(template)
        for i, leaf in zip(leaves_pos, leaves):
            flat[i] = leaf
        _, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
        inp, args, kwargs = torch.utils._pytree.tree_unflatten(flat, spec)
        out = op(inp, *args, **kwargs)
        return tuple(t for t in tree_flatten(out)[0]
                     if isinstance(t, torch.Tensor) and t.is_floating_point())
    return f


def _setup(op: Any, sample: Any, device: str, dtype: torch.dtype) -> tuple[Any, list[Any]]:
    flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    template = [t.detach().to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
                if isinstance(t, torch.Tensor) else t for t in flat]
    pos = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.requires_grad]
    leaves = [template[i].clone().requires_grad_(True) for i in pos]
    return _fn(op, sample, pos, template), leaves


@pytest.mark.parametrize(("op_name", "dtype"), _params())
def test_gradients(op_name: str, dtype: str, device: str) -> None:
    op, sample = _sample(op_name)
    seed = 17
    if dtype == "float64":
        fn, leaves = _setup(op, sample, device, torch.float64)
        torch.manual_seed(seed)
        try:
            ok = torch.autograd.gradcheck(fn, tuple(leaves), eps=1e-6, atol=1e-5, rtol=1e-3,
                                          fast_mode=True, raise_exception=True)
        except Exception as exc:  # noqa: BLE001 - any error is the finding
            pytest.fail(f"gradcheck on {device} float64: {type(exc).__name__}: "
                        f"{str(exc)[:800]}", pytrace=False)
        assert ok
        return
    ref_fn, ref_leaves = _setup(op, sample, "cpu", torch.float64)
    torch.manual_seed(seed)
    try:
        torch.autograd.gradcheck(ref_fn, tuple(ref_leaves), eps=1e-6, atol=1e-5, rtol=1e-3,
                                 fast_mode=True)
    except Exception:  # noqa: BLE001 - an unusable reference is not the device's fault
        pytest.skip("the CPU float64 reference gradient does not pass gradcheck itself")
    torch.manual_seed(seed)
    ref_out = ref_fn(*ref_leaves)
    gen = torch.Generator().manual_seed(seed)
    cots = [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in ref_out]
    ref_grads = torch.autograd.grad(ref_out, ref_leaves, cots, allow_unused=True)
    fn, leaves = _setup(op, sample, device, torch.float32)
    torch.manual_seed(seed)
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, [c.float().to(device) for c in cots],
                                allow_unused=True)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        if r is None:
            continue
        assert g is not None, f"input {i}: no gradient on the device"
        torch.testing.assert_close(g.cpu().double(), r, atol=1e-2, rtol=1e-2,
                                   msg=lambda m, i=i: f"input {i} gradient: {m}")
    _ = tree_map
