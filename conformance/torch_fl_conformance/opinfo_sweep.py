"""The OpInfo sweep: every operator of PyTorch's op_db, per dtype, on the device
against the CPU, classified by how it ran (op_stats) and whether it was right.

Classes, worst first: crash (the process died; set by the runner), wrong (outputs or
gradients outside tolerance), error (raised on the device though the CPU runs it),
fallback (ran, some part on the CPU fallback), decomposed (ran as native parts),
native (ran on the plugin's kernels), unsupported (dtype not advertised, or no sample
the CPU accepts).
"""

from __future__ import annotations

import fnmatch
import itertools
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from torch_fl_conformance.target import SWEEP_DTYPES
from torch_fl_conformance.tolerances import compare, compared_outputs

__all__ = ["Case", "Evaluation", "cases", "evaluate"]

CLASSES = ("native", "decomposed", "fallback", "error", "wrong", "crash", "timeout",
           "unsupported")


@dataclass(frozen=True)
class Case:
    op: str  # op_db name, ".variant" appended when the entry has one
    dtype: str
    grad: bool  # the CPU supports the backward for this dtype

    @property
    def id(self) -> str:
        return f"{self.op}-{self.dtype}"


@lru_cache(maxsize=1)
def op_infos() -> dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    out: dict[str, Any] = {}
    for op in op_db:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        while name in out:  # op_db has a few entries with identical names
            name += "_"
        out[name] = op
    return out


def _selected(name: str, patterns: list[str] | None) -> bool:
    if not patterns:
        return True
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def cases(patterns: list[str] | None = None) -> list[Case]:
    """Every (op, dtype) the CPU supports among the sweep dtypes."""
    import torch

    out = []
    for name, op in op_infos().items():
        if not _selected(name, patterns):
            continue
        supported = op.supported_dtypes("cpu")
        backward = op.supported_backward_dtypes("cpu") if op.supports_autograd else set()
        for dname in SWEEP_DTYPES:
            dtype = getattr(torch, dname)
            if dtype in supported:
                out.append(Case(name, dname, dtype in backward and dtype.is_floating_point))
    return out


@dataclass
class Evaluation:
    case: Case
    samples: int = 0  # samples the CPU ran
    forward: str = "unsupported"
    forward_error: str = ""
    wrong: str = ""
    backward: str | None = None  # None: no backward checked
    backward_error: str = ""
    grad_wrong: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    grad_max_abs: float = 0.0
    grad_max_rel: float = 0.0
    shape_only: bool = False
    fallback_ops: list[str] = field(default_factory=list)
    decomposed_ops: list[str] = field(default_factory=list)

    @property
    def coverage_class(self) -> str:
        if self.wrong or self.grad_wrong:
            return "wrong"
        if self.forward_error or self.backward_error:
            return "error"
        return self.forward

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["op"], d["dtype"] = self.case.op, self.case.dtype
        del d["case"]
        d["class"] = self.coverage_class
        return d


_cache: OrderedDict[tuple, Evaluation] = OrderedDict()


def _skipped_decorator(op: Any, test_name: str, dtype: Any) -> bool:
    """Whether PyTorch's own OpInfo tests skip `test_name` for this op and dtype."""
    for d in getattr(op, "decorators", ()):
        if getattr(d, "test_name", None) != test_name:
            continue
        if getattr(d, "device_type", None) not in (None, "cpu"):
            continue
        dtypes = getattr(d, "dtypes", None)
        if dtypes is not None and dtype not in dtypes:
            continue
        if getattr(d, "active_if", True):
            return True
    return False


def _how(table: Any) -> tuple[str, list[str], list[str]]:
    fallback = sorted({r.op for r in table if r.cpu_fallback})
    decomposed = sorted({r.op for r in table if r.decomposed})
    if fallback:
        return "fallback", fallback, decomposed
    if decomposed:
        return "decomposed", fallback, decomposed
    return "native", fallback, decomposed


def _err(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:400] if text else type(exc).__name__


def _seed(seed: int, device: str) -> None:
    """Seeds the CPU and the device generators (torch.manual_seed also seeds every
    lazily initialized backend, which costs milliseconds per call)."""
    import torch

    torch.default_generator.manual_seed(seed)
    dev = torch.device(device)
    getattr(torch, dev.type).manual_seed(seed)


def evaluate(case: Case, device: str, samples: int, seed: int) -> Evaluation:
    key = (case, device, samples, seed)
    if key in _cache:
        return _cache[key]
    ev = _evaluate(case, device, samples, seed)
    _cache[key] = ev
    while len(_cache) > 16:
        _cache.popitem(last=False)
    return ev


def _evaluate(case: Case, device: str, samples: int, seed: int) -> Evaluation:
    import torch
    import torch_fl
    from torch.utils._pytree import tree_flatten, tree_map

    op = op_infos()[case.op]
    dtype = getattr(torch, case.dtype)
    ev = Evaluation(case)
    comparable = not _skipped_decorator(op, "test_compare_cpu", dtype)
    ev.shape_only = not comparable
    worst = ["native"]
    ran = 0
    order = {"native": 0, "decomposed": 1, "fallback": 2}

    def clone(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().clone().requires_grad_(x.requires_grad)
        return x

    def to_dev(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().to(device).requires_grad_(x.requires_grad)
        return x

    def to_cpu(x: Any) -> Any:
        return x.detach().cpu() if isinstance(x, torch.Tensor) else x

    keep = compared_outputs(case.op)

    def pick(out: Any) -> Any:
        if keep is None or not isinstance(out, (tuple, list)):
            return out
        return [out[i] for i in keep]

    def run(sample: Any, mapper: Any, args_mapper: Any = None) -> tuple[Any, list[Any]]:
        inp = mapper(sample.input) if isinstance(sample.input, torch.Tensor) else tree_map(
            mapper, sample.input)
        args, kwargs = tree_map(args_mapper or mapper, (sample.args, sample.kwargs))
        out = op(inp, *args, **kwargs)
        leaves = [t for t in tree_flatten((inp, args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        return out, leaves

    _seed(seed, device)
    generator = op.sample_inputs("cpu", dtype, requires_grad=case.grad)
    for sample in itertools.islice(generator, samples * 3):
        if ev.samples >= samples:
            break
        # CPU reference, run twice with different seeds: a CPU that does not
        # reproduce itself (random ops, uninitialized memory) is compared by shape.
        try:
            _seed(seed, device)
            ref, ref_leaves = run(sample, clone)
            _seed(seed + 1, device)
            again, _ = run(sample, clone)
        except Exception:  # noqa: BLE001, S112 - a sample the CPU rejects says nothing
            continue
        ev.samples += 1
        shape_only = not comparable or bool(compare(again, ref, "output", case.op)[0])
        ev.shape_only |= shape_only
        try:
            _seed(seed, device)
            with torch_fl.op_stats_scope() as scope:
                out, dev_leaves = run(sample, to_dev)
            out_cpu = tree_map(to_cpu, out)
        except Exception as exc:  # noqa: BLE001 - any device error is the finding
            # Some operators take index tensors that must stay on the CPU
            # (tensor_split's sections): retry with only the input on the device.
            try:
                _seed(seed, device)
                with torch_fl.op_stats_scope() as scope:
                    out, dev_leaves = run(sample, to_dev, clone)
                out_cpu = tree_map(to_cpu, out)
            except Exception:  # noqa: BLE001 - the first error is the finding
                if not ev.forward_error:
                    ev.forward_error = _err(exc)
                continue
        ran += 1
        how, fb, dc = _how(scope.table)
        ev.fallback_ops = sorted(set(ev.fallback_ops) | set(fb))
        ev.decomposed_ops = sorted(set(ev.decomposed_ops) | set(dc))
        worst[0] = max(worst[0], how, key=order.__getitem__)
        bad, ab, rel = compare(pick(out_cpu), pick(ref), "output", case.op,
                               shape_only=shape_only)
        if bad and not shape_only and dtype in (torch.float16, torch.bfloat16):
            # A device may compute half types in float32 and round once, which is
            # more accurate than the CPU's half kernels: accept agreement with the
            # CPU result computed in float32 and rounded.
            wide = _upcast_reference(op, sample, dtype, seed, device)
            if wide is not None:
                bad2, ab2, rel2 = compare(pick(out_cpu), pick(wide), "output", case.op)
                if not bad2:
                    bad, ab, rel = bad2, ab2, rel2
        ev.max_abs, ev.max_rel = max(ev.max_abs, ab), max(ev.max_rel, rel)
        if bad and not ev.wrong:
            ev.wrong = f"{bad[0].where}: {bad[0].message}"
        if case.grad and not shape_only:
            _backward(ev, ref, ref_leaves, out, dev_leaves, seed, device, order)
    if ran:
        ev.forward = worst[0]
    elif ev.forward_error:
        ev.forward = "error"
    return ev


def _upcast_reference(op: Any, sample: Any, dtype: Any, seed: int, device: str) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == dtype:
            return x.detach().float()
        return x.detach() if isinstance(x, torch.Tensor) else x

    def down(x: Any) -> Any:
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    try:
        _seed(seed, device)
        inp, args, kwargs = tree_map(up, (sample.input, sample.args, sample.kwargs))
        return tree_map(down, op(inp, *args, **kwargs))
    except Exception:  # noqa: BLE001 - no float32 reference, the half one decides
        return None


def _backward(ev: Evaluation, ref: Any, ref_leaves: list[Any], out: Any, dev_leaves: list[Any],
              seed: int, device: str, order: dict[str, int]) -> None:
    import torch
    import torch_fl
    from torch.utils._pytree import tree_flatten

    ref_outs = [t for t in tree_flatten(ref)[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None
                and t.is_floating_point()]
    dev_outs = [t for t in tree_flatten(out)[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None
                and t.is_floating_point()]
    if not ref_outs or not ref_leaves or len(ref_outs) != len(dev_outs):
        return
    gen = torch.Generator().manual_seed(seed)
    cots = [torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.dtype)
            for t in ref_outs]
    try:
        ref_grads = torch.autograd.grad(ref_outs, ref_leaves, cots, allow_unused=True)
    except Exception:  # noqa: BLE001 - no CPU backward, nothing to compare
        return  # the CPU has no backward for this sample
    # Each cotangent lives where its output does (`x.to('cpu')` has a CPU output).
    dev_cots = [c.to(o.device) for c, o in zip(cots, dev_outs)]
    try:
        with torch_fl.op_stats_scope() as scope:
            grads = torch.autograd.grad(dev_outs, dev_leaves, dev_cots, allow_unused=True)
        grads_cpu = [None if g is None else g.detach().cpu() for g in grads]
    except Exception as exc:  # noqa: BLE001 - any device error is the finding
        if not ev.backward_error:
            ev.backward_error = _err(exc)
        return
    how, fb, dc = _how(scope.table)
    ev.fallback_ops = sorted(set(ev.fallback_ops) | set(fb))
    ev.decomposed_ops = sorted(set(ev.decomposed_ops) | set(dc))
    ev.backward = max(ev.backward or "native", how, key=order.__getitem__)
    ref_cpu = [None if g is None else g.detach() for g in ref_grads]
    bad, ab, rel = compare(grads_cpu, ref_cpu, "grad", ev.case.op)
    ev.grad_max_abs, ev.grad_max_rel = max(ev.grad_max_abs, ab), max(ev.grad_max_rel, rel)
    if bad and not ev.grad_wrong:
        ev.grad_wrong = f"grad {bad[0].where}: {bad[0].message}"


def describe(ev: Evaluation) -> str:
    parts = [f"{ev.case.op} {ev.case.dtype}: {ev.coverage_class}", f"{ev.samples} sample(s)"]
    if ev.fallback_ops:
        parts.append("CPU fallback for " + ", ".join(ev.fallback_ops[:6]))
    return "; ".join(parts)


def format_exc() -> str:
    return traceback.format_exc(limit=3)
