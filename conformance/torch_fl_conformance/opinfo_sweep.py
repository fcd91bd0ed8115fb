"""The OpInfo sweep: every operator of PyTorch's op_db, per dtype, on the device
against the CPU, classified by how it ran (op_stats) and whether it was right.

Samples: for an operator's primary dtype (float32 where the CPU has it, else the
first sweep dtype it supports) up to SAMPLES samples spread over the first
SAMPLE_POOL op_db gives; for its other dtypes the first OTHER_SAMPLES. On the
primary dtype every applicable variant of variants.py (non-contiguous, offset,
broadcast, in-place, out=) runs on up to VARIANT_SAMPLES samples, each a check of
its own. Every run compares every output and every input tensor after the call
(whole storages: what an operator mutates, and what a kernel must not touch), and
reads results only after the device is synchronized.

Classes, worst first: crash (the process died; set by the runner), wrong (outputs,
mutated inputs or gradients outside tolerance, in any variant), error (raised on the
device though the CPU runs it), fallback (ran, some part on the CPU fallback),
decomposed (ran as native parts), native (ran on the plugin's kernels), unsupported
(dtype not advertised, no sample the CPU accepts, or every sample needs a capability
the plugin does not advertise).

Random operators (a CPU run calls an ATen op tagged nondeterministic_seeded) draw from
the device's generator, whose stream legitimately differs from the CPU's: their samples
are compared by structure, finiteness and reproducibility under the same device seed,
not by value, and derive no variants. Samples that need a non-strided layout (sparse
tensors in or out) are set aside unless the plugin advertises the "sparse" capability.

A wrong result or a device error records the kernels (schema names) of the device
run that showed it, by how they ran (native, decomposed, fallback, failed).
"""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import math
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from functools import lru_cache, partial
from typing import Any

from torch_fl_conformance import variants as variant_forms
from torch_fl_conformance.kernel_watch import kernels_of, synchronize, watching
from torch_fl_conformance.target import SWEEP_DTYPES
from torch_fl_conformance.tolerances import (
    Mismatch,
    compare,
    compared_outputs,
    duplicate_write_dims,
    flatten,
    tie_order_indices,
)

__all__ = ["Case", "Evaluation", "cases", "checks_of", "evaluate"]

CLASSES = ("native", "decomposed", "fallback", "error", "wrong", "crash", "timeout",
           "blocked", "unsupported")
SAMPLES = 8  # of the primary dtype, spread over the first SAMPLE_POOL samples
SAMPLE_POOL = 40
OTHER_SAMPLES = 3  # of the other dtypes: the first ones
VARIANT_SAMPLES = 3  # samples each variant of the primary dtype derives from
# The checks of a case: name -> (requirement, what it checks).
CHECKS = {
    "runs": ("TFL-OPS-001", "the forward and backward run on the device"),
    "output": ("TFL-OPS-002", "outputs and inputs after the call match the CPU"),
    "grad": ("TFL-OPS-003", "input gradients match the CPU"),
    "noncontiguous": ("TFL-OPS-002", "the same on non-contiguous inputs"),
    "noncontiguous_grad": ("TFL-OPS-003", "gradients on non-contiguous inputs"),
    "offset": ("TFL-OPS-002", "the same on inputs at a storage offset"),
    "broadcast": ("TFL-OPS-002", "the same with a stride-0 (expanded) input"),
    "inplace": ("TFL-OPS-002", "the in-place variant"),
    "out": ("TFL-OPS-002", "the out= variant into preallocated outputs"),
}


@dataclass(frozen=True)
class Case:
    op: str  # op_db name, ".variant" appended when the entry has one
    dtype: str
    grad: bool  # the CPU supports the backward for this dtype
    primary: bool = False  # the dtype the variants run on

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
        dnames = [d for d in SWEEP_DTYPES if getattr(torch, d) in supported]
        for dname in dnames:
            dtype = getattr(torch, dname)
            out.append(Case(name, dname, dtype in backward and dtype.is_floating_point,
                            primary=dname == dnames[0]))
    return out


def checks_of(case: Case, op: Any = None) -> list[str]:
    """The checks (tests) of a case, in the order they run (`op`: the OpInfo, by
    default op_db's entry named case.op)."""
    op = op_infos().get(case.op) if op is None else op
    names = ["runs", "output"] + (["grad"] if case.grad else [])
    if case.primary and op is not None:
        names += ["noncontiguous"] + (["noncontiguous_grad"] if case.grad else [])
        names += ["offset", "broadcast"]
        names += ["inplace"] if variant_forms.inplace_form(op) is not None else []
        names += ["out"] if op.supports_out else []
    return names


# Capability a sample needs when a tensor in or out has a non-strided layout.
SPARSE_CAPABILITY = "sparse"
# The ABI's error code of a plugin that found itself broken (errors.h).
INTERNAL = "TFL_ERR_INTERNAL"


@dataclass
class CheckResult:
    """One check's findings: samples compared, the first mismatch, the first device
    error, and the kernels of the device run that showed either."""

    samples: int = 0
    wrong: str = ""
    error: str = ""
    kernels: dict[str, list[str]] = field(default_factory=dict)
    max_abs: float = 0.0
    max_rel: float = 0.0
    # How its device runs ran, worst first ("" before any ran): native, decomposed,
    # fallback; and the ATen ops of those runs by how (op statistics' names).
    how: str = ""
    ran_ops: dict[str, list[str]] = field(default_factory=dict)

    def ran(self, table: Any) -> None:
        """Notes how one of the check's device runs ran (its op statistics)."""
        how, _, _ = _how(table)
        self.how = max(self.how or "native", how, key=_ORDER.__getitem__)
        for kind, names in kernels_of(table).items():
            self.ran_ops[kind] = sorted(set(self.ran_ops.get(kind, ())) | set(names))

    def found(self, *, wrong: str = "", error: str = "",
              kernels: dict[str, list[str]] | None = None) -> None:
        if error and INTERNAL in error:
            # Not a refusal: the kernel ran and the plugin's own checks found it broken
            # (an out-of-bounds write its guard regions caught). Its results cannot be
            # trusted, and hardware without such checks would return them silently.
            wrong, error = f"the plugin reported an internal error: {error}", ""
        if (wrong and not self.wrong) or (error and not self.error and not self.wrong):
            self.kernels = kernels or {}
        self.wrong = self.wrong or wrong
        self.error = self.error or error


@dataclass
class Evaluation:
    case: Case
    samples: int = 0  # samples the CPU ran and the device was asked to run
    random: bool = False  # some sample drew random numbers (compared by properties)
    # capability -> samples set aside because the plugin does not advertise it
    unsupported_samples: dict[str, int] = field(default_factory=dict)
    forward: str = "unsupported"
    backward: str | None = None  # None: no backward checked
    shape_only: bool = False
    fallback_ops: list[str] = field(default_factory=list)
    decomposed_ops: list[str] = field(default_factory=list)
    checks: dict[str, CheckResult] = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)  # the plugin's kernels any run used

    def check(self, name: str) -> CheckResult:
        return self.checks.setdefault(name, CheckResult())

    # The plain sample's findings under their former names.
    @property
    def wrong(self) -> str:
        return self.check("output").wrong

    @property
    def grad_wrong(self) -> str:
        return self.check("grad").wrong

    @property
    def forward_error(self) -> str:
        return self.check("output").error

    @property
    def backward_error(self) -> str:
        return self.check("grad").error

    @property
    def max_abs(self) -> float:
        return self.check("output").max_abs

    @property
    def max_rel(self) -> float:
        return self.check("output").max_rel

    @property
    def grad_max_abs(self) -> float:
        return self.check("grad").max_abs

    @property
    def grad_max_rel(self) -> float:
        return self.check("grad").max_rel

    @property
    def coverage_class(self) -> str:
        if any(c.wrong for c in self.checks.values()):
            return "wrong"
        if any(c.error for c in self.checks.values()):
            return "error"
        return self.forward

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["op"], d["dtype"] = self.case.op, self.case.dtype
        del d["case"], d["checks"]  # summarized below; kernels go with the failing test
        d["class"] = self.coverage_class
        for name in ("wrong", "grad_wrong", "forward_error", "backward_error", "max_abs",
                     "max_rel", "grad_max_abs", "grad_max_rel"):
            d[name] = getattr(self, name)
        d["variants"] = {k: {"samples": c.samples, "wrong": c.wrong, "error": c.error}
                         for k, c in self.checks.items() if k not in ("output", "grad")}
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


def evaluate(case: Case, device: str, samples: int | None, seed: int,
             capabilities: frozenset[str] | None = None, op: Any = None,
             variant_samples: int | None = None) -> Evaluation:
    """Evaluates one (op, dtype). `samples`: the sample budget (None: the sweep's);
    `capabilities`: what the plugin advertises (None: all); `op`: an OpInfo to use
    instead of op_db's entry named case.op; `variant_samples`: samples each variant
    derives from (None: VARIANT_SAMPLES, at most `samples`)."""
    caps = capabilities if capabilities is None else frozenset(capabilities)
    key = (case, device, samples, seed, caps, id(op), variant_samples)
    if key in _cache:
        return _cache[key]
    if op is None:
        op = op_infos()[case.op]
    ev = _Sweep(case, op, device, samples, seed, caps, variant_samples).run()
    _cache[key] = ev
    while len(_cache) > 16:
        _cache.popitem(last=False)
    return ev


def _spread(n: int, k: int) -> list[int]:
    """Indices of k of n items evenly spread (first and last included), then the rest
    in order: the order samples are tried in (rejected ones make room for others)."""
    if n <= k:
        return list(range(n))
    first = sorted({round(j * (n - 1) / (k - 1)) for j in range(k)}) if k > 1 else [0]
    return first + [i for i in range(n) if i not in set(first)]


@dataclass
class _Run:
    """One call of the operator: its result and every tensor it got, as placed."""

    out: Any
    replicas: list[Any]  # variants.Replica per tensor leaf of (input, args, kwargs)
    grad_leaves: list[Any]
    table: Any = ()  # op statistics of a device run
    sources: list[Any] = field(default_factory=list)  # the CPU tensor of each replica
    layouts: list[Any] = field(default_factory=list)  # (data_ptr, strides) before the call

    def inputs_after(self) -> list[Any]:
        """Every input tensor after the call, whole storages, on the CPU."""
        return [(r.flat if r.flat is not None else r.view).detach().cpu()
                for r in self.replicas]


def _plain(op: Any, inp: Any, *args: Any, **kwargs: Any) -> Any:
    return op(inp, *args, **kwargs)


_WIDER = {"float32": "float64", "float16": "float32", "bfloat16": "float32"}


class _Sweep:
    """The evaluation of one case: its samples, their variants, the comparisons."""

    def __init__(self, case: Case, op: Any, device: str, samples: int | None, seed: int,
                 capabilities: frozenset[str] | None,
                 variant_samples: int | None = None) -> None:
        import torch

        self.case, self.op, self.device, self.seed = case, op, device, seed
        self.capabilities = capabilities
        self.dtype = getattr(torch, case.dtype)
        self.ev = Evaluation(case)
        self.comparable = not _skipped_decorator(op, "test_compare_cpu", self.dtype)
        self.ev.shape_only = not self.comparable
        self.keep = compared_outputs(case.op)
        self.ties = tie_order_indices(case.op)
        self.scatter_dims = duplicate_write_dims(case.op)
        default = SAMPLES if case.primary else OTHER_SAMPLES
        self.budget = default if samples is None else samples
        self.variant_budget = VARIANT_SAMPLES if samples is None else min(VARIANT_SAMPLES,
                                                                           samples)
        if variant_samples is not None:
            self.variant_budget = variant_samples
        names = set(checks_of(case, op))
        self.variants = [v for v in variant_forms.VARIANTS if v in names]
        self.variant_runs = dict.fromkeys(self.variants, 0)
        self.reproduced = False  # a sample's CPU result reproduced: the op is deterministic
        self.ran = 0
        self.worst = "native"

    # -- running -----------------------------------------------------------------
    def run(self) -> Evaluation:
        ev = self.ev
        _seed(self.seed, self.device)
        generator = self.op.sample_inputs_func(self.op, "cpu", self.dtype,
                                               requires_grad=self.case.grad)
        pool = list(itertools.islice(generator, SAMPLE_POOL if self.case.primary
                                     else self.budget * 3))
        for i in _spread(len(pool), self.budget):
            if ev.samples >= self.budget:
                break
            self._sample(pool[i])
        if self.ran:
            ev.forward = self.worst
        elif ev.forward_error:
            ev.forward = "error"
        return ev

    def _call(self, sample: Any, call: Any, where: str, grad: bool,
              args_on_cpu: bool = False) -> _Run:
        """Calls the operator on replicas of the sample's tensors placed on `where`."""
        import torch
        from torch.utils._pytree import tree_flatten, tree_unflatten

        n_input = len(tree_flatten(sample.input)[0])
        flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
        replicas, placed, sources = [], [], []
        for i, x in enumerate(flat):
            if isinstance(x, torch.Tensor):
                on = "cpu" if args_on_cpu and i >= n_input else where
                r = variant_forms.replicate(x, on, requires_grad=grad and x.requires_grad)
                replicas.append(r)
                sources.append(x)
                placed.append(r.view)
            else:
                placed.append(x)
        inp, args, kwargs = tree_unflatten(placed, spec)
        layouts = [(r.view.data_ptr(), r.view.stride()) if r.flat is not None else (0, ())
                   for r in replicas]
        out = call(self.op, inp, *args, **kwargs)
        run = _Run(out, replicas, [r.view for r in replicas if r.view.requires_grad])
        run.sources, run.layouts = sources, layouts
        return run

    def _cpu(self, sample: Any, call: Any, grad: bool, seed: int | None = None,
             probe: _SeededOpProbe | None = None) -> _Run:
        """A CPU run, under the same kernel watch as a device run: a few operators
        behave otherwise under any Python dispatch mode (linalg.matrix_rank's out=
        is left unwritten), and both sides must meet the same instrumentation."""
        _seed(self.seed if seed is None else seed, self.device)
        with watching(), probe.mode if probe is not None else contextlib.nullcontext():
            return self._call(sample, call, "cpu", grad)

    def _device(self, sample: Any, call: Any, grad: bool, args_on_cpu: bool = False) -> _Run:
        """A device run; results are read only after the device is synchronized. On
        an error, the exception carries the run's op statistics (`table`)."""
        import torch_fl

        _seed(self.seed, self.device)
        with torch_fl.op_stats_scope() as scope, watching():
            try:
                run = self._call(sample, call, self.device, grad, args_on_cpu)
                synchronize(self.device)
            except Exception as exc:
                exc.table = scope  # read once the scope has closed
                raise
        run.table = scope.table
        self._used(scope.table)
        return run

    def _used(self, table: Any) -> None:
        names = {r.op for r in table if r.native}
        if not names <= set(self.ev.kernels):
            self.ev.kernels = sorted(set(self.ev.kernels) | names)

    # -- one sample --------------------------------------------------------------
    def _sample(self, sample: Any) -> None:
        ev, case = self.ev, self.case
        probe = _SeededOpProbe()
        try:
            ref = self._cpu(sample, _plain, case.grad, probe=probe)
        except Exception:  # noqa: BLE001 - a sample the CPU rejects says nothing
            return
        random = bool(probe.seeded)
        again = None
        if random or not self.reproduced:
            # A second CPU run with another seed: a CPU that does not reproduce itself
            # (uninitialized memory) is compared by shape; random ops by properties.
            try:
                again = self._cpu(sample, _plain, False, seed=self.seed + 1)
            except Exception:  # noqa: BLE001
                return
        need = _layout_capability((sample.input, sample.args, sample.kwargs, ref.out))
        if need and self.capabilities is not None and need not in self.capabilities:
            ev.unsupported_samples[need] = ev.unsupported_samples.get(need, 0) + 1
            return
        ev.samples += 1
        ev.random |= random
        unstable = again is not None and bool(compare(again.out, ref.out, "output", case.op)[0])
        if again is not None and not random and not unstable and _has_values(ref.out):
            self.reproduced = True
        shape_only = not self.comparable or random or unstable
        ev.shape_only |= shape_only
        try:
            dev = self._device(sample, _plain, case.grad)
        except Exception as exc:  # noqa: BLE001 - any device error is the finding
            # Some operators take index tensors that must stay on the CPU
            # (tensor_split's sections): retry with only the input on the device.
            try:
                dev = self._device(sample, _plain, case.grad, args_on_cpu=True)
            except Exception:  # noqa: BLE001 - the first error is the finding
                ev.check("output").found(error=_err(exc), kernels=_table_kernels(exc))
                return
        self.ran += 1
        how, fb, dc = _how(dev.table)
        ev.fallback_ops = sorted(set(ev.fallback_ops) | set(fb))
        ev.decomposed_ops = sorted(set(ev.decomposed_ops) | set(dc))
        self.worst = max(self.worst, how, key=_ORDER.__getitem__)
        check = ev.check("output")
        check.samples += 1
        check.ran(dev.table)
        reordered = self.ties is not None and not _asks_stable(sample)
        bad, ab, rel = self._judge(dev, ref, sample, _plain, shape_only, reordered=reordered,
                                   random=random, again=again)
        check.max_abs, check.max_rel = max(check.max_abs, ab), max(check.max_rel, rel)
        if bad:
            check.found(wrong=f"{bad[0].where}: {bad[0].message}", kernels=kernels_of(dev.table))
        # Gradients of a random sample depend on the draw (the dropout mask): the
        # backward must run, and is compared by structure and finiteness.
        if case.grad and (random or not shape_only):
            self._backward("grad", ref, dev, sample, by_value=not shape_only,
                           tie_groups=sample.input if reordered else None)
        if case.primary and not random and not shape_only and not reordered \
                and _on(dev.out, self.device):
            self._variants(sample, ref)

    def _variants(self, sample: Any, ref: _Run) -> None:
        written: frozenset[int] | None = None
        for v in self.variants:
            if self.variant_runs[v] >= self.variant_budget:
                continue
            if written is None:
                written = variant_forms.mutated(sample, ref.inputs_after())
            used = False
            for form in variant_forms.derive(v, sample, self.variant_runs[v], self.op, ref.out,
                                             written):
                used |= self._variant(v, form, ref)
            if used:
                self.variant_runs[v] += 1

    def _variant(self, name: str, form: variant_forms.Form, plain: _Run) -> bool:
        """One derived form on both sides; False when the CPU does not accept it, or
        when its in-place or out= form does not give the CPU's own functional result
        (the CPU's out= into a strided tensor is unreliable for a few operators)."""
        grad = name == "noncontiguous" and self.case.grad
        label, call = form.label, form.call
        form_sample = form.sample
        try:
            ref = self._cpu(form_sample, call, grad)
        except Exception:  # noqa: BLE001 - a form the CPU refuses says nothing
            return False
        if form.same_result and compare(ref.out, plain.out, "output", self.case.op)[0]:
            return False
        check = self.ev.check(name)
        try:
            dev = self._device(form_sample, call, grad)
        except Exception as exc:  # noqa: BLE001 - any device error is the finding
            try:  # index tensors that must stay on the CPU, as for the plain sample
                dev = self._device(form_sample, call, grad, args_on_cpu=True)
            except Exception:  # noqa: BLE001 - the first error is the finding
                check.found(error=f"{label}: {_err(exc)}", kernels=_table_kernels(exc))
                return True
        check.samples += 1
        check.ran(dev.table)
        bad, ab, rel = self._judge(dev, ref, form_sample, call, False)
        check.max_abs, check.max_rel = max(check.max_abs, ab), max(check.max_rel, rel)
        if not bad and name == "inplace" and ref.out is ref.replicas[0].view \
                and dev.out is not dev.replicas[0].view:
            bad = [Mismatch("out", "the in-place variant returned a new tensor, not its input")]
        if not bad and name == "out" and not _out_kept(form_sample, ref):
            bad = _out_kept(form_sample, dev)
        if bad:
            check.found(wrong=f"{label}: {bad[0].where}: {bad[0].message}",
                        kernels=kernels_of(dev.table))
        if grad:
            self._backward("noncontiguous_grad", ref, dev, form_sample, by_value=True,
                           noncontiguous=True)
        return True

    # -- judging -----------------------------------------------------------------
    def _pick(self, out: Any) -> Any:
        if self.keep is None or not isinstance(out, (tuple, list)):
            return out
        return [out[i] for i in self.keep]

    def _judge(self, dev: _Run, ref: _Run, sample: Any, call: Any, shape_only: bool,
               reordered: bool = False, random: bool = False,
               again: _Run | None = None) -> tuple[list[Mismatch], float, float]:
        """Outputs, then every input after the call, of a device run against the CPU's."""
        from torch.utils._pytree import tree_map

        op = self.case.op
        out = tree_map(_to_cpu, dev.out)
        bad, ab, rel = compare(self._pick(out), self._pick(ref.out), "output", op,
                               shape_only=shape_only)
        if bad and reordered and not shape_only:
            # Unstable sorts order equal elements as they like: accept index outputs
            # that pick the same input values as the CPU's (tolerances.toml, tie_order).
            same = _tie_equivalent(out, ref.out, sample.input, self.ties)
            if same is not None:
                bad2, ab2, rel2 = compare(self._pick(same), self._pick(ref.out), "output", op)
                if not bad2:
                    bad, ab, rel = bad2, ab2, rel2
        if bad and self.scatter_dims is not None and not shape_only \
                and _resolves_duplicate_writes(out, sample, self.scatter_dims):
            # Repeated scatter targets hold one of their sources (tolerances.toml,
            # duplicate_writes): compare the rest of the call against the CPU's.
            bad, ab, rel = [], 0.0, 0.0
        if random and not bad and again is not None:
            bad = _random_properties(self._pick(out), self._pick(ref.out),
                                     self._pick(again.out), op,
                                     partial(self._rerun, sample, call))
        if bad and not shape_only:
            bad, ab, rel = self._wider(out, ref.out, sample, call, (bad, ab, rel))
        if not bad:
            got, want = dev.inputs_after(), ref.inputs_after()
            bad_in, ab2, rel2 = compare(got, want, "output", op, shape_only=shape_only or random)
            if bad_in and not (shape_only or random):
                # An out= or in-place tensor holds a result: it gets the output's
                # allowance for computing wider or summing in another order.
                bad_in, ab2, rel2 = self._wider(got, want, sample, call, (bad_in, ab2, rel2),
                                                after=True)
            for m in bad_in:
                m.where = "input" + m.where.removeprefix("out")
                m.message = f"after the call: {m.message}"
            bad, ab, rel = bad_in, max(ab, ab2), max(rel, rel2)
        return bad, ab, rel

    def _wider(self, out: Any, ref: Any, sample: Any, call: Any,
               plain: tuple[list[Mismatch], float, float],
               after: bool = False) -> tuple[list[Mismatch], float, float]:
        """A device may compute in a wider type and round once (more accurate than
        the CPU): it passes when it agrees with the CPU's result computed one dtype
        wider and rounded. It may also sum in another order: the class's
        of_cpu_error allows a multiple of the CPU's own rounding error. `after`:
        `out` and `ref` are the inputs after the call (whole storages), not the
        outputs."""
        import torch
        from torch.utils._pytree import tree_map

        wide_name = _WIDER.get(self.case.dtype)
        if wide_name is None:
            return plain
        wide_run = _wide_run(self, sample, call, getattr(torch, wide_name))
        if wide_run is None:
            return plain
        pick = (lambda x: x) if after else self._pick
        wide = wide_run.inputs_after() if after else wide_run.out
        if after and [t.shape for t in wide] != [t.shape for t in out]:
            return plain
        rounded = tree_map(lambda t: t.to(self.dtype) if isinstance(t, torch.Tensor)
                           and t.dtype == getattr(torch, wide_name) else t, wide)
        op = self.case.op
        got = compare(pick(out), pick(rounded), "output", op)
        if not got[0]:
            return got
        got = compare(pick(out), pick(ref), "output", op, cpu_error=pick(wide))
        if not got[0]:
            return got
        if after:
            return plain  # the contiguous-copy reference below is of outputs only
        # The CPU itself may compute differently on a derived layout than on the
        # same values laid out contiguously (another code path, another rounding:
        # a constant batch-norm channel), so its result on a contiguous copy is an
        # equally valid reference, with its own rounding error allowed.
        dense = _contiguous_reference(self, sample, call)
        if dense is None:
            return plain
        got = compare(pick(out), pick(dense), "output", op, cpu_error=pick(wide))
        return got if not got[0] else plain

    def _rerun(self, sample: Any, call: Any) -> Any:
        import torch
        from torch.utils._pytree import tree_map

        with torch.no_grad():
            run = self._device(sample, call, False)
        return tree_map(_to_cpu, run.out)

    def _backward(self, name: str, ref: _Run, dev: _Run, sample: Any, by_value: bool = True,
                  tie_groups: Any = None, noncontiguous: bool = False) -> None:
        import torch
        import torch_fl
        from torch.testing._internal.common_utils import noncontiguous_like
        from torch.utils._pytree import tree_flatten

        ev, check = self.ev, self.ev.check(name)

        def differentiable(out: Any) -> list[Any]:
            return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)
                    and t.grad_fn is not None and t.is_floating_point()]

        ref_outs, dev_outs = differentiable(ref.out), differentiable(dev.out)
        if not ref_outs or not ref.grad_leaves or len(ref_outs) != len(dev_outs):
            return
        gen = torch.Generator().manual_seed(self.seed)
        cots = [torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.dtype)
                for t in ref_outs]
        if noncontiguous:
            cots = [noncontiguous_like(c) for c in cots]
        try:
            ref_grads = torch.autograd.grad(ref_outs, ref.grad_leaves, cots, allow_unused=True)
        except Exception:  # noqa: BLE001 - no CPU backward, nothing to compare
            return
        # Each cotangent lives where its output does (`x.to('cpu')` has a CPU output).
        dev_cots = [variant_forms.replicate(c, o.device).view for c, o in zip(cots, dev_outs)]
        with torch_fl.op_stats_scope() as scope, watching():
            try:
                grads = torch.autograd.grad(dev_outs, dev.grad_leaves, dev_cots,
                                            allow_unused=True)
                synchronize(self.device)
                grads_cpu = [None if g is None else g.detach().cpu() for g in grads]
                error = None
            except Exception as exc:  # noqa: BLE001 - any device error is the finding
                error = exc
        if error is not None:
            check.found(error=_err(error), kernels=kernels_of(scope.table))
            return
        check.samples += 1
        check.ran(scope.table)
        self._used(scope.table)
        how, fb, dc = _how(scope.table)
        ev.fallback_ops = sorted(set(ev.fallback_ops) | set(fb))
        ev.decomposed_ops = sorted(set(ev.decomposed_ops) | set(dc))
        if name == "grad":
            ev.backward = max(ev.backward or "native", how, key=_ORDER.__getitem__)
        ref_cpu = [None if g is None else g.detach() for g in ref_grads]
        if tie_groups is not None and grads_cpu and grads_cpu[0] is not None \
                and ref_cpu[0] is not None and grads_cpu[0].shape == tie_groups.shape:
            # The device ordered equal inputs differently, so their gradients trade
            # places: compare the gradient summed over each group of equal input values.
            grads_cpu[0] = _group_sums(grads_cpu[0], tie_groups)
            ref_cpu[0] = _group_sums(ref_cpu[0], tie_groups)
        op = self.case.op
        bad, ab, rel = compare(grads_cpu, ref_cpu, "grad", op, shape_only=not by_value)
        wide_name = _WIDER.get(self.case.dtype)
        if bad and by_value and wide_name is not None:
            # Measure the CPU's own rounding error of this gradient (tolerances.toml,
            # of_cpu_error); only paid when the plain bound fails.
            wide_grads = _wide_grads(self, sample, getattr(torch, wide_name), cots)
            if wide_grads is not None:
                bad, ab, rel = compare(grads_cpu, ref_cpu, "grad", op, cpu_error=wide_grads)
        if not by_value and not bad:
            bad = _random_properties(grads_cpu, ref_cpu, ref_cpu, op, lambda: grads_cpu)
        check.max_abs, check.max_rel = max(check.max_abs, ab), max(check.max_rel, rel)
        if bad:
            check.found(wrong=f"grad {bad[0].where}: {bad[0].message}",
                        kernels=kernels_of(scope.table))


_ORDER = {"native": 0, "decomposed": 1, "fallback": 2}


def _to_cpu(x: Any) -> Any:
    import torch

    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def _on(out: Any, device: str) -> bool:
    """Whether every tensor output is on the device (a factory operator's is not,
    and derived forms of its samples are not the same program on the device)."""
    import torch
    from torch.utils._pytree import tree_flatten

    dev = torch.device(device).type
    return all(t.device.type == dev for t in tree_flatten(out)[0]
               if isinstance(t, torch.Tensor))


def _has_values(out: Any) -> bool:
    import torch
    from torch.utils._pytree import tree_flatten

    return any(isinstance(t, torch.Tensor) and t.numel() > 0 for t in tree_flatten(out)[0])


def _table_kernels(exc: BaseException) -> dict[str, list[str]]:
    scope = getattr(exc, "table", None)
    return kernels_of(scope.table) if scope is not None else {}


def _out_kept(form: Any, dev: _Run) -> list[Mismatch]:
    """out= tensors must be written where they are: same memory, same strides."""
    import torch
    from torch.utils._pytree import tree_flatten

    outs = {id(t) for t in tree_flatten(form.kwargs.get("out"))[0]
            if isinstance(t, torch.Tensor)}
    for i, (src, r, (ptr, stride)) in enumerate(zip(dev.sources, dev.replicas, dev.layouts)):
        if id(src) in outs and (r.view.data_ptr() != ptr or r.view.stride() != stride):
            return [Mismatch(f"input[{i}]", f"the out= tensor was reallocated or restrided "
                                            f"(strides {stride} -> {r.view.stride()})")]
    return []


def _asks_stable(sample: Any) -> bool:
    return sample.kwargs.get("stable") is True


def _resolves_duplicate_writes(out: Any, sample: Any, dims: int) -> bool:
    """Whether `out` is what scattering sample.input to the places sample.args[0]
    names (within each of the leading planes) gives for some choice among
    sources that share a place: every written place holds one of its sources'
    values, every other place 0."""
    import torch

    inp = sample.input
    idx = sample.args[0] if sample.args else sample.kwargs.get("indices")
    if not (isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor)
            and isinstance(idx, torch.Tensor)) or inp.shape != idx.shape \
            or out.dim() != inp.dim() or out.dim() < dims or out.shape[:-dims] != inp.shape[:-dims]:
        return False
    planes = math.prod(out.shape[:-dims])
    o = out.detach().cpu().reshape(planes, -1)
    x = idx.detach().cpu().reshape(planes, -1).long()
    v = inp.detach().cpu().reshape(planes, -1).to(o.dtype)
    if x.numel() == 0:
        return bool((o == 0).all())
    if int(x.min()) < 0 or int(x.max()) >= o.shape[1]:
        return False
    written = torch.zeros(o.shape, dtype=torch.bool).scatter_(1, x, torch.ones_like(x, dtype=torch.bool))
    landed = o.gather(1, x)
    same = (landed == v) | (landed.isnan() & v.isnan())
    # A written place is explained when at least one of its sources left its value.
    explained = torch.zeros(o.shape, dtype=torch.float64).scatter_reduce_(1, x, same.double(), "amax") > 0
    return bool((explained == written).all() and (o[~written] == 0).all())


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


def _contiguous_reference(sweep: _Sweep, sample: Any, call: Any) -> Any:
    """The CPU result of the call with every tensor of the sample a contiguous
    copy; None when the sample is contiguous already or the CPU refuses."""
    import torch
    from torch.utils._pytree import tree_leaves

    tensors = [t for t in tree_leaves((sample.input, sample.args, sample.kwargs))
               if isinstance(t, torch.Tensor)]
    if all(t.is_contiguous() for t in tensors):
        return None

    def dense(x: Any) -> Any:
        return x.detach().contiguous() if isinstance(x, torch.Tensor) else x

    try:
        return sweep._cpu(sample.transform(dense), call, False).out
    except Exception:  # noqa: BLE001 - no such reference, the others decide
        return None


def _wide_run(sweep: _Sweep, sample: Any, call: Any, wide: Any) -> _Run | None:
    """The CPU run of the call with the sample's tensors of the case's dtype
    widened to `wide` (exactly, whole storages, same strides and offsets), not
    rounded back; None when the CPU refuses."""
    import torch

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == sweep.dtype:
            return variant_forms.widen(x, wide)
        return x.detach() if isinstance(x, torch.Tensor) else x

    try:
        return sweep._cpu(sample.transform(up), call, False)
    except Exception:  # noqa: BLE001 - no wider reference, the plain bound decides
        return None


def _wide_grads(sweep: _Sweep, sample: Any, wide: Any, cots: list[Any]) -> list[Any] | None:
    """The CPU gradient of the sample computed in `wide` (inputs and cotangents
    widened exactly), in the order of the sample's differentiable leaves."""
    import torch
    from torch.utils._pytree import tree_flatten

    def up(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        y = x.detach().to(wide) if x.dtype == sweep.dtype else x.detach().clone()
        return y.requires_grad_(x.requires_grad)

    try:
        run = sweep._cpu(sample.transform(up), _plain, True)
        outs = [t for t in tree_flatten(run.out)[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None
                and t.is_floating_point()]
        if len(outs) != len(cots):
            return None
        grads = torch.autograd.grad(outs, run.grad_leaves,
                                    [c.to(o.dtype) for c, o in zip(cots, outs)],
                                    allow_unused=True)
    except Exception:  # noqa: BLE001 - no wider gradient, the plain bound decides
        return None
    return [None if g is None else g.detach() for g in grads]


def capability_reason(ev: Evaluation, plugin: str) -> str:
    """Why samples were set aside: "sparse not advertised by P (3 sample(s) need ...)"."""
    return "; ".join(
        f"{cap} not advertised by {plugin} ({n} sample(s) need a "
        f"{'sparse (non-strided) layout' if cap == SPARSE_CAPABILITY else cap})"
        for cap, n in sorted(ev.unsupported_samples.items()))


def describe(ev: Evaluation) -> str:
    parts = [f"{ev.case.op} {ev.case.dtype}: {ev.coverage_class}", f"{ev.samples} sample(s)"]
    ran = [f"{k} {c.samples}" for k, c in ev.checks.items() if k not in ("output", "grad")]
    if ran:
        parts.append("variants: " + ", ".join(ran))
    if ev.random:
        parts.append("random: compared by structure, finiteness and same-seed reproducibility")
    if ev.unsupported_samples:
        parts.append(capability_reason(ev, "the plugin"))
    if ev.fallback_ops:
        parts.append("CPU fallback for " + ", ".join(ev.fallback_ops[:6]))
    return "; ".join(parts)


def format_exc() -> str:
    return traceback.format_exc(limit=3)
