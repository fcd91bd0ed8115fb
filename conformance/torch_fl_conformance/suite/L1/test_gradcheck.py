"""L1 gradcheck of the core differentiable operators, in full (slow) mode.

Fast mode checks one random projection of the Jacobian: a backward kernel off by
2% in some elements can hide in it. Every Jacobian element is checked here, so the
sample is small: the largest of op_db's first samples with at most MAX_ELEMENTS
differentiable input elements (the smallest when none is that small).

float64 (TFL-GRAD-001, devices with fp64): torch.autograd.gradcheck on the device,
fast_mode=False, eps 1e-6, atol 1e-5, rtol 1e-3 (finite differences in float64).

float32 (TFL-GRAD-002, every device): finite differences in float32 are too noisy to
decide anything, so the device's float32 analytic Jacobian (every row, one backward
per output element) is compared with the float64 analytic Jacobian computed on the
CPU, itself first confirmed by a full float64 gradcheck on the CPU. An element
passes when |J_device - J_64| <= atol + rtol * |J_64| + 2 * e_cpu, with the op
class's float32 gradient bound (tolerances.toml) and e_cpu the CPU's own float32
error, max |J_cpu32 - J_64| of that input: the device must be about as accurate as
the CPU in float32. Random operators (dropout) draw their own masks on each side, so
their float32 Jacobians are not comparable; float64 gradcheck covers them (the
generator is reseeded before every evaluation).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch_fl_conformance import opinfo_sweep
from torch_fl_conformance.kernel_watch import synchronize
from torch_fl_conformance.tolerances import tolerance

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
MAX_ELEMENTS = 128
CANDIDATES = 40
CPU_ERROR_FACTOR = 2.0
SEED = 17


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
    torch.manual_seed(SEED)
    fits: tuple[int, Any] | None = None
    smallest: tuple[int, Any] | None = None
    samples = op.sample_inputs_func(op, "cpu", torch.float64, requires_grad=True)
    for s in itertools.islice(samples, CANDIDATES):
        tensors = [t for t in tree_flatten((s.input, s.args, s.kwargs))[0]
                   if isinstance(t, torch.Tensor)]
        size = sum(t.numel() for t in tensors if t.requires_grad)
        if size == 0:
            continue
        try:
            out = op(s.input, *s.args, **s.kwargs)
        except Exception:  # noqa: BLE001, S112 - a sample the CPU rejects says nothing
            continue
        if not any(isinstance(t, torch.Tensor) and t.numel() and t.requires_grad
                   for t in tree_flatten(out)[0]):
            continue
        if size <= MAX_ELEMENTS and (fits is None or size > fits[0]):
            fits = (size, s)
        if smallest is None or size < smallest[0]:
            smallest = (size, s)
    best = fits or smallest
    if best is None:
        pytest.skip(f"op_db has no differentiable sample of {op_name}")
    return op, best[1]


def _fn(op: Any, sample: Any, device: str, dtype: torch.dtype) -> tuple[Any, list[Any]]:
    """f(*leaves) -> the op's floating outputs, on `device` in `dtype`; the leaves.
    Every evaluation reseeds the generators, so a random op draws the same each time."""
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    template = [t.detach().to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
                if isinstance(t, torch.Tensor) else t for t in flat]
    pos = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.requires_grad]
    leaves = [template[i].clone().requires_grad_(True) for i in pos]
    dev = torch.device(device)

    def f(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        torch.default_generator.manual_seed(SEED)
        if dev.type != "cpu":
            getattr(torch, dev.type).manual_seed(SEED)
        values = list(template)
        for i, x in zip(pos, xs):
            values[i] = x
        inp, args, kwargs = tree_unflatten(values, spec)
        out = op(inp, *args, **kwargs)
        return tuple(t for t in tree_flatten(out)[0]
                     if isinstance(t, torch.Tensor) and t.is_floating_point())
    return f, leaves


def _jacobian(f: Any, leaves: list[Any]) -> list[torch.Tensor]:
    """The analytic Jacobian of f, one (outputs x inputs) block per leaf, on the CPU
    in float64: one backward per output element."""
    outs = f(*leaves)
    n_out = sum(o.numel() for o in outs)
    blocks = [torch.zeros(n_out, leaf.numel(), dtype=torch.float64) for leaf in leaves]
    row = 0
    for o in outs:
        for j in range(o.numel()):
            cot = torch.zeros(o.numel(), dtype=o.dtype).view(o.shape)
            cot.view(-1)[j] = 1
            grads = torch.autograd.grad(o, leaves, cot.to(o.device), retain_graph=True,
                                        allow_unused=True)
            for b, g in zip(blocks, grads):
                if g is not None:
                    b[row] = g.detach().reshape(-1).cpu().double()
            row += 1
    if leaves and leaves[0].device.type != "cpu":
        synchronize(leaves[0].device)
    return blocks


def _is_random(op: Any, sample: Any) -> bool:
    seeded: set[str] = set()
    from torch.utils._python_dispatch import TorchDispatchMode

    class Probe(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if torch.Tag.nondeterministic_seeded in func.tags:
                seeded.add(func.name())
            return func(*args, **(kwargs or {}))

    with Probe(), torch.no_grad():
        op(sample.input, *sample.args, **sample.kwargs)
    return bool(seeded)


def _gradcheck(f: Any, leaves: list[Any]) -> None:
    torch.autograd.gradcheck(f, tuple(leaves), eps=1e-6, atol=1e-5, rtol=1e-3,
                             fast_mode=False, raise_exception=True)


@pytest.mark.parametrize(("op_name", "dtype"), _params())
def test_gradients(op_name: str, dtype: str, device: str, record: Any) -> None:
    op, sample = _sample(op_name)
    if dtype == "float64":
        fn, leaves = _fn(op, sample, device, torch.float64)
        record("elements", sum(x.numel() for x in leaves))
        try:
            _gradcheck(fn, leaves)
        except Exception as exc:  # noqa: BLE001 - any error is the finding
            pytest.fail(f"full gradcheck on {device} float64: {type(exc).__name__}: "
                        f"{str(exc)[:800]}", pytrace=False)
        return
    if _is_random(op, sample):
        pytest.skip(f"{op_name} is random: the device draws other masks than the CPU, so "
                    "float32 Jacobians are not comparable (float64 gradcheck covers it)")
    ref_fn, ref_leaves = _setup_cpu(op, sample)
    try:
        _gradcheck(ref_fn, ref_leaves)
    except Exception:  # noqa: BLE001 - an unusable reference is not the device's fault
        pytest.skip("the CPU float64 reference gradient does not pass gradcheck itself")
    exact = _jacobian(ref_fn, ref_leaves)
    cpu32 = _jacobian(*_fn(op, sample, "cpu", torch.float32))
    got = _jacobian(*_fn(op, sample, device, torch.float32))
    bound = tolerance("float32", "grad", op_name)
    assert bound is not None
    record("elements", sum(x.numel() for x in ref_leaves))
    for i, (g, e, c) in enumerate(zip(got, exact, cpu32)):
        cpu_error = float((c - e).abs().max()) if e.numel() else 0.0
        allowed = bound.atol + bound.rtol * e.abs() + CPU_ERROR_FACTOR * cpu_error
        over = (g - e).abs() > allowed
        if bool(over.any()):
            k = int(torch.argmax((g - e).abs() - allowed))
            pytest.fail(
                f"input {i}: {int(over.sum())} of {e.numel()} Jacobian elements of the "
                f"device's float32 gradient are outside atol={bound.atol:g} "
                f"rtol={bound.rtol:g} + {CPU_ERROR_FACTOR:g} x the CPU's float32 error "
                f"{cpu_error:.3g}: worst {float(g.view(-1)[k]):.6g}, float64 "
                f"{float(e.view(-1)[k]):.6g}", pytrace=False)


def _setup_cpu(op: Any, sample: Any) -> tuple[Any, list[Any]]:
    return _fn(op, sample, "cpu", torch.float64)
