"""The OpInfo sweep: every operator of PyTorch's op_db, per dtype, on the device
against the CPU, classified by how it ran (op_stats) and whether it was right.

Classes, worst first: crash (the process died; set by the runner), wrong (outputs or
gradients outside tolerance), error (raised on the device though the CPU runs it),
fallback (ran, some part on the CPU fallback), decomposed (ran as native parts),
native (ran on the plugin's kernels), unsupported (dtype not advertised, no sample
the CPU accepts, or every sample needs a capability the plugin does not advertise).

Random operators (a CPU run calls an ATen op tagged nondeterministic_seeded) draw from
the device's generator, whose stream legitimately differs from the CPU's: their samples
are compared by structure, finiteness and reproducibility under the same device seed,
not by value. Samples that need a non-strided layout (sparse tensors in or out) are
set aside unless the plugin advertises the "sparse" capability.
"""

from __future__ import annotations

import fnmatch
import itertools
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from functools import lru_cache, partial
from typing import Any

from torch_fl_conformance.target import SWEEP_DTYPES
from torch_fl_conformance.tolerances import (
    Mismatch,
    compare,
    compared_outputs,
    flatten,
    tie_order_indices,
)

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


# Capability a sample needs when a tensor in or out has a non-strided layout.
SPARSE_CAPABILITY = "sparse"


@dataclass
class Evaluation:
    case: Case
    samples: int = 0  # samples the CPU ran and the device was asked to run
    random: bool = False  # some sample drew random numbers (compared by properties)
    # capability -> samples set aside because the plugin does not advertise it
    unsupported_samples: dict[str, int] = field(default_factory=dict)
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


class _SeededOpProbe:
    """Records whether an operator's CPU run calls an ATen op tagged
    nondeterministic_seeded (bernoulli_, normal, randperm, native_dropout, ...): the
    tag PyTorch itself uses to mark random ops, so no list of names is needed."""

    def __init__(self) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        probe = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:
                if torch.Tag.nondeterministic_seeded in func.tags:
                    probe.seeded.add(func.name())
                return func(*args, **(kwargs or {}))

        self.seeded: set[str] = set()
        self.mode = Mode()


def _layout_capability(values: Any) -> str:
    """The capability a sample needs for its layouts ("" for strided tensors only)."""
    import torch
    from torch.utils._pytree import tree_flatten

    for t in tree_flatten(values)[0]:
        if isinstance(t, torch.Tensor) and t.layout != torch.strided:
            return SPARSE_CAPABILITY
    return ""


def evaluate(case: Case, device: str, samples: int, seed: int,
             capabilities: frozenset[str] | None = None, op: Any = None) -> Evaluation:
    """Evaluates one (op, dtype). `capabilities`: what the plugin advertises (None: all);
    `op`: an OpInfo to use instead of op_db's entry named case.op."""
    caps = capabilities if capabilities is None else frozenset(capabilities)
    key = (case, device, samples, seed, caps, id(op))
    if key in _cache:
        return _cache[key]
    ev = _evaluate(case, device, samples, seed, caps, op)
    _cache[key] = ev
    while len(_cache) > 16:
        _cache.popitem(last=False)
    return ev


def _evaluate(case: Case, device: str, samples: int, seed: int,
              capabilities: frozenset[str] | None, op: Any) -> Evaluation:
    import torch
    import torch_fl
    from torch.utils._pytree import tree_flatten, tree_map

    if op is None:
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
    ties = tie_order_indices(case.op)

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
        # The second run also records whether the op draws random numbers.
        probe = _SeededOpProbe()
        try:
            _seed(seed, device)
            ref, ref_leaves = run(sample, clone)
            _seed(seed + 1, device)
            with probe.mode:
                again, _ = run(sample, clone)
        except Exception:  # noqa: BLE001, S112 - a sample the CPU rejects says nothing
            continue
        need = _layout_capability((sample.input, sample.args, sample.kwargs, ref))
        if need and capabilities is not None and need not in capabilities:
            ev.unsupported_samples[need] = ev.unsupported_samples.get(need, 0) + 1
            continue
        ev.samples += 1
        random = bool(probe.seeded)
        ev.random |= random
        shape_only = (not comparable or random
                      or bool(compare(again, ref, "output", case.op)[0]))
        ev.shape_only |= shape_only
        try:
            _seed(seed, device)
            with torch_fl.op_stats_scope() as scope:
                out, dev_leaves = run(sample, to_dev)
            out_cpu = tree_map(to_cpu, out)
            dev_mapper = to_dev
        except Exception as exc:  # noqa: BLE001 - any device error is the finding
            # Some operators take index tensors that must stay on the CPU
            # (tensor_split's sections): retry with only the input on the device.
            try:
                _seed(seed, device)
                with torch_fl.op_stats_scope() as scope:
                    out, dev_leaves = run(sample, to_dev, clone)
                out_cpu = tree_map(to_cpu, out)
                dev_mapper = clone
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
        # Gradients of equal inputs trade places under an unstable order.
        reordered = ties is not None and not _asks_stable(sample)
        if bad and reordered and not shape_only:
            # Unstable sorts order equal elements as they like: accept index outputs
            # that pick the same input values as the CPU's (tolerances.toml, tie_order).
            same = _tie_equivalent(out_cpu, ref, sample.input, ties)
            if same is not None:
                bad2, ab2, rel2 = compare(pick(same), pick(ref), "output", case.op)
                if not bad2:
                    bad, ab, rel = bad2, ab2, rel2
        if random and not bad:
            bad = _random_properties(
                pick(out_cpu), pick(ref), pick(again), case.op,
                partial(_rerun_on_device, run, sample, dev_mapper, seed, device, to_cpu))
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
        # Gradients of a random sample depend on the draw (the dropout mask): the
        # backward must run, and is compared by structure and finiteness.
        if case.grad and (random or not shape_only):
            _backward(ev, ref, ref_leaves, out, dev_leaves, seed, device, order,
                      by_value=not shape_only,
                      wide=lambda cots, s=sample: _wide_grads(op, s, dtype, cots, seed, device),
                      tie_groups=sample.input if reordered else None)
    if ran:
        ev.forward = worst[0]
    elif ev.forward_error:
        ev.forward = "error"
    return ev


def _asks_stable(sample: Any) -> bool:
    return sample.kwargs.get("stable") is True


def _tie_equivalent(out: Any, ref: Any, inp: Any, positions: list[int]) -> Any:
    """`out` with its index outputs replaced by the CPU's where both pick the same
    input values along some dimension (the two differ only in the order of equal
    elements); None when some index output picks different values."""
    import torch

    single = not isinstance(out, (tuple, list))
    outs, refs = ([out], [ref]) if single else (list(out), list(ref))
    if not isinstance(inp, torch.Tensor) or len(outs) != len(refs):
        return None
    x = inp.detach().reshape(1) if inp.dim() == 0 else inp.detach()
    for i in positions:
        if i >= len(outs):
            return None
        a, e = outs[i], refs[i]
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) \
                or a.dtype != torch.int64 or a.shape != e.shape:
            return None
        if torch.equal(a, e):
            continue
        a1, e1 = (a.reshape(1), e.reshape(1)) if a.dim() == 0 else (a, e)
        if a1.dim() != x.dim():
            return None
        for d in range(x.dim()):
            if any(a1.shape[j] != x.shape[j] for j in range(x.dim()) if j != d):
                continue
            try:
                picked = torch.take_along_dim(x, a1, d)
                expected = torch.take_along_dim(x, e1, d)
            except (IndexError, RuntimeError):
                continue
            if bool(((picked == expected) | (picked.isnan() & expected.isnan())).all()):
                outs[i] = e
                break
        else:
            return None
    return outs[0] if single else type(out)(outs) if isinstance(out, list) else tuple(outs)


def _group_sums(grad: Any, x: Any) -> Any:
    """`grad` summed over each group of equal values of `x`, in the order of the values."""
    import torch

    _, inverse = torch.unique(x.detach().flatten(), return_inverse=True)
    sums = torch.zeros(int(inverse.max()) + 1 if inverse.numel() else 0, dtype=torch.float64)
    sums.index_add_(0, inverse, grad.detach().flatten().double())
    return sums.to(grad.dtype)


def _rerun_on_device(run: Any, sample: Any, mapper: Any, seed: int, device: str,
                     to_cpu: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    _seed(seed, device)
    with torch.no_grad():
        out, _ = run(sample, mapper)
    return tree_map(to_cpu, out)


def _random_properties(out: Any, ref: Any, again: Any, op: str,
                       rerun: Any) -> list[Mismatch]:
    """What a random op's device result must satisfy although its values differ from
    the CPU's: finite wherever both CPU draws are finite, and the same result when
    the device generator is seeded the same way again."""
    import torch

    a_items: list[tuple[str, Any]] = []
    r_items: list[tuple[str, Any]] = []
    g_items: list[tuple[str, Any]] = []
    flatten(out, "out", a_items)
    flatten(ref, "out", r_items)
    flatten(again, "out", g_items)
    for (where, a), (_, r), (_, g) in zip(a_items, r_items, g_items):
        if (isinstance(a, torch.Tensor) and isinstance(r, torch.Tensor)
                and isinstance(g, torch.Tensor) and r.is_floating_point()
                and a.shape == r.shape == g.shape and a.layout == torch.strided
                and bool(torch.isfinite(r).all()) and bool(torch.isfinite(g).all())
                and not bool(torch.isfinite(a).all())):
            n = int((~torch.isfinite(a)).sum())
            return [Mismatch(where, f"random op: {n} non-finite value(s) where every CPU "
                                    "draw is finite")]
    bad, _, _ = compare(rerun(), out, "output", op)
    if bad:
        return [Mismatch(bad[0].where, "random op: not reproducible on the device under the "
                                       f"same seed ({bad[0].message})")]
    return []


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


def _wide_grads(op: Any, sample: Any, dtype: Any, cots: list[Any], seed: int,
                device: str) -> list[Any] | None:
    """The CPU gradient of a half-precision sample computed in float32 (inputs and
    cotangents widened exactly), in the order of the sample's differentiable leaves."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    def up(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        y = x.detach().float() if x.dtype == dtype else x.detach().clone()
        return y.requires_grad_(x.requires_grad)

    try:
        _seed(seed, device)
        inp, args, kwargs = tree_map(up, (sample.input, sample.args, sample.kwargs))
        out = op(inp, *args, **kwargs)
        leaves = [t for t in tree_flatten((inp, args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        outs = [t for t in tree_flatten(out)[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None
                and t.is_floating_point()]
        if len(outs) != len(cots):
            return None
        grads = torch.autograd.grad(outs, leaves, [c.to(o.dtype) for c, o in zip(cots, outs)],
                                    allow_unused=True)
    except Exception:  # noqa: BLE001 - no float32 gradient, the plain bound decides
        return None
    return [None if g is None else g.detach() for g in grads]


def _backward(ev: Evaluation, ref: Any, ref_leaves: list[Any], out: Any, dev_leaves: list[Any],
              seed: int, device: str, order: dict[str, int], by_value: bool = True,
              wide: Any = None, tie_groups: Any = None) -> None:
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
    if tie_groups is not None and grads_cpu and grads_cpu[0] is not None \
            and ref_cpu[0] is not None and grads_cpu[0].shape == tie_groups.shape:
        # The device ordered equal inputs differently, so their gradients trade
        # places: compare the gradient summed over each group of equal input values.
        grads_cpu[0] = _group_sums(grads_cpu[0], tie_groups)
        ref_cpu[0] = _group_sums(ref_cpu[0], tie_groups)
    bad, ab, rel = compare(grads_cpu, ref_cpu, "grad", ev.case.op, shape_only=not by_value)
    if bad and by_value and wide is not None and ev.case.dtype in ("float16", "bfloat16"):
        # Measure the CPU's own rounding error of this gradient (tolerances.toml,
        # of_cpu_error); only paid when the plain bound fails.
        wide_grads = wide(cots)
        if wide_grads is not None:
            bad, ab, rel = compare(grads_cpu, ref_cpu, "grad", ev.case.op,
                                   cpu_error=wide_grads)
    if not by_value and not bad:
        bad = _random_properties(grads_cpu, ref_cpu, ref_cpu, ev.case.op, lambda: grads_cpu)
    ev.grad_max_abs, ev.grad_max_rel = max(ev.grad_max_abs, ab), max(ev.grad_max_rel, rel)
    if bad and not ev.grad_wrong:
        ev.grad_wrong = f"grad {bad[0].where}: {bad[0].message}"


def capability_reason(ev: Evaluation, plugin: str) -> str:
    """Why samples were set aside: "sparse not advertised by P (3 sample(s) need ...)"."""
    return "; ".join(
        f"{cap} not advertised by {plugin} ({n} sample(s) need a "
        f"{'sparse (non-strided) layout' if cap == SPARSE_CAPABILITY else cap})"
        for cap, n in sorted(ev.unsupported_samples.items()))


def describe(ev: Evaluation) -> str:
    parts = [f"{ev.case.op} {ev.case.dtype}: {ev.coverage_class}", f"{ev.samples} sample(s)"]
    if ev.random:
        parts.append("random: compared by structure, finiteness and same-seed reproducibility")
    if ev.unsupported_samples:
        parts.append(capability_reason(ev, "the plugin"))
    if ev.fallback_ops:
        parts.append("CPU fallback for " + ", ".join(ev.fallback_ops[:6]))
    return "; ".join(parts)


def format_exc() -> str:
    return traceback.format_exc(limit=3)
