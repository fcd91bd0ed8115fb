"""How the op_db sweep classifies results that legitimately differ from the CPU
(random draws, sparse layouts a plugin does not advertise, half-precision gradients
near zero), and that real defects of the same kinds still fail.

The sweep runs in this process on the flemu device; defects are injected by
OpInfos whose operator behaves differently on the device than on the CPU."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import torch_fl
from torch.testing import make_tensor
from torch.testing._internal.opinfo.core import OpInfo, SampleInput
from torch_fl_conformance import opinfo_sweep
from torch_fl_conformance.opinfo_sweep import Case, evaluate
from torch_fl_conformance.tolerances import compare, tolerance

SEED = 1234
NO_SPARSE = frozenset({"fp64", "fp16", "bf16"})


@pytest.fixture(scope="module")
def device(flemu: torch_fl.PluginHandle) -> str:
    return f"{flemu.name}:0"


def _samples(op: Any, device: Any, dtype: Any, requires_grad: bool, **_: Any) -> Any:
    for shape in ((64,), (16, 24)):
        yield SampleInput(make_tensor(shape, device=device, dtype=dtype, low=-2, high=2,
                                      requires_grad=requires_grad))


def _op(name: str, fn: Any) -> OpInfo:
    return OpInfo(name, op=fn, sample_inputs_func=_samples,
                  dtypes=(torch.float32, torch.float64, torch.bfloat16),
                  supports_autograd=True)


def _on_device(x: torch.Tensor) -> bool:
    return x.device.type != "cpu"


# Random operators: values differ from the CPU, properties must hold.

@pytest.mark.parametrize("name", ["nn.functional.alpha_dropout", "nn.functional.dropout"])
def test_op_db_random_ops_are_compared_by_properties(name: str, device: str) -> None:
    ev = evaluate(Case(name, "float32", True), device, 3, SEED, NO_SPARSE)
    assert ev.samples > 0 and ev.random, ev
    assert not ev.wrong and not ev.grad_wrong, ev
    assert ev.backward is not None, "the backward of a random op still runs on the device"


def test_random_is_detected_from_the_rng_tag_not_the_name(device: str) -> None:
    # An operator no list names: it draws through bernoulli_.
    op = _op("my_noise", lambda x: x * torch.empty_like(x).bernoulli_(0.5))
    ev = evaluate(Case("my_noise", "float32", True), device, 2, SEED, NO_SPARSE, op=op)
    assert ev.random and not ev.wrong and not ev.grad_wrong, ev


def test_deterministic_wrong_result_still_fails(device: str) -> None:
    op = _op("off_by_one", lambda x: x * 2 + (1 if _on_device(x) else 0))
    ev = evaluate(Case("off_by_one", "float32", True), device, 2, SEED, NO_SPARSE, op=op)
    assert not ev.random and ev.coverage_class == "wrong", ev
    assert "elements outside" in ev.wrong, ev.wrong


def test_random_op_not_reproducible_under_the_same_seed_fails(device: str) -> None:
    calls = itertools.count()

    def drifting(x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.dropout(x, 0.5, training=True)
        return y + next(calls) if _on_device(x) else y

    op = _op("drifting_dropout", drifting)
    ev = evaluate(Case("drifting_dropout", "float32", False), device, 2, SEED, NO_SPARSE, op=op)
    assert ev.random and ev.coverage_class == "wrong", ev
    assert "not reproducible on the device under the same seed" in ev.wrong, ev.wrong


def test_random_op_with_non_finite_values_fails(device: str) -> None:
    def poisoned(x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.dropout(x, 0.5, training=True)
        return y / 0 if _on_device(x) else y

    op = _op("poisoned_dropout", poisoned)
    ev = evaluate(Case("poisoned_dropout", "float32", False), device, 2, SEED, NO_SPARSE, op=op)
    assert ev.random and "non-finite" in ev.wrong, ev.wrong


def test_random_op_with_wrong_shape_fails(device: str) -> None:
    def truncated(x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.dropout(x, 0.5, training=True)
        return y[..., 1:] if _on_device(x) else y

    op = _op("truncated_dropout", truncated)
    ev = evaluate(Case("truncated_dropout", "float32", False), device, 2, SEED, NO_SPARSE, op=op)
    assert ev.random and "dtype/shape" in ev.wrong, ev.wrong


# Sparse layouts: a capability.

@pytest.mark.parametrize("name", ["to_sparse", "sparse.sampled_addmm"])
def test_sparse_samples_are_unsupported_by_capability(name: str, device: str) -> None:
    ev = evaluate(Case(name, "float32", False), device, 3, SEED, NO_SPARSE)
    assert ev.samples == 0 and ev.unsupported_samples.get("sparse", 0) > 0, ev
    assert ev.coverage_class == "unsupported" and not ev.forward_error, ev
    reason = opinfo_sweep.capability_reason(ev, "flemu")
    assert reason.startswith("sparse not advertised by flemu") and "layout" in reason, reason


def test_sparse_samples_run_when_the_plugin_advertises_sparse(device: str) -> None:
    ev = evaluate(Case("to_sparse", "float32", False), device, 3, SEED,
                  NO_SPARSE | {"sparse"})
    assert ev.samples > 0 and not ev.unsupported_samples, ev
    # flemu has no sparse kernels: advertising the capability makes this a finding.
    assert ev.coverage_class in ("error", "wrong", "fallback", "decomposed", "native"), ev


def test_strided_samples_of_a_partly_sparse_op_are_still_checked(device: str) -> None:
    def half_sparse(x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return x.to_sparse()
        return x * 3 + (1 if _on_device(x) else 0)

    op = _op("half_sparse", half_sparse)
    ev = evaluate(Case("half_sparse", "float32", False), device, 2, SEED, NO_SPARSE, op=op)
    assert ev.unsupported_samples == {"sparse": 1} and ev.samples == 1, ev
    assert ev.coverage_class == "wrong", ev


# Half-precision gradients: an absolute allowance scaled by the tensor's magnitude.

def test_bf16_grad_bound_scales_with_the_largest_reference_value() -> None:
    bound = tolerance("bfloat16", "grad")
    assert bound is not None and bound.of_max > 0, bound
    f32 = tolerance("float32", "grad")
    assert f32 is not None and f32.of_max == 0, "float32 keeps its fixed bound"
    ref = torch.tensor([4.0, -3.0, 0.0, 1.0], dtype=torch.bfloat16)
    near_zero = ref.clone()
    near_zero[2] = 0.03125  # one unit in the last place of |4| at a zero reference
    assert compare([near_zero], [ref], "grad", None)[0] == []
    near_zero[2] = 0.125  # four units: more than a reordered sum explains
    assert compare([near_zero], [ref], "grad", None)[0]
    # The same absolute error on a tensor of small values is a real error.
    small = ref / 16
    off = small.clone()
    off[2] = 0.03125
    assert compare([off], [small], "grad", None)[0]
    # A truly wrong gradient still fails: 25% off, or the sign flipped.
    assert compare([ref * 1.25], [ref], "grad", None)[0]
    assert compare([-ref], [ref], "grad", None)[0]


def test_results_on_a_third_device_are_compared_by_value(device: str) -> None:
    # zeros_like(x, device="cuda") where CUDA is present: the CPU run's result
    # lives on that device too. Here the device stands in for the third one.
    elsewhere = torch.tensor([1.0, 2.0, 3.0], device=device)
    assert compare([torch.tensor([1.0, 2.0, 3.0])], [elsewhere], "output", "zeros_like")[0] == []
    assert compare([torch.tensor([1.0, 2.0, 4.0])], [elsewhere], "output", "zeros_like")[0]
    ints = torch.arange(3, device=device)
    assert compare([torch.arange(3)], [ints], "output", "zeros_like")[0] == []
    assert compare([torch.arange(1, 4)], [ints], "output", "zeros_like")[0]


def test_max_unpool_accepts_any_source_at_a_repeated_index_and_nothing_else() -> None:
    # Two sources (3.0 and 5.0) name place 1 of a plane: either may land there.
    values = torch.tensor([[[3.0, 5.0, 7.0]]])
    indices = torch.tensor([[[1, 1, 3]]])
    sample = SampleInput(values, args=(indices,), kwargs={"kernel_size": 2})
    assert opinfo_sweep.duplicate_write_dims("nn.functional.max_unpool1d") == 1
    assert opinfo_sweep.duplicate_write_dims("nn.functional.max_pool1d") is None
    resolves = opinfo_sweep._resolves_duplicate_writes
    assert resolves(torch.tensor([[[0.0, 5.0, 0.0, 7.0]]]), sample, 1)
    assert resolves(torch.tensor([[[0.0, 3.0, 0.0, 7.0]]]), sample, 1)
    assert not resolves(torch.tensor([[[0.0, 4.0, 0.0, 7.0]]]), sample, 1), "no source wrote 4"
    assert not resolves(torch.tensor([[[0.0, 5.0, 0.0, 6.0]]]), sample, 1), "a single write is exact"
    assert not resolves(torch.tensor([[[9.0, 5.0, 0.0, 7.0]]]), sample, 1), "an unwritten place is 0"
    assert not resolves(torch.tensor([[[0.0, 5.0, 0.0, 0.0]]]), sample, 1), "a write went missing"
    # Planes are separate: a source of plane 0 does not explain a value in plane 1.
    two = SampleInput(torch.tensor([[[3.0], [8.0]]]), args=(torch.tensor([[[0], [0]]]),))
    assert resolves(torch.tensor([[[3.0, 0.0], [8.0, 0.0]]]), two, 1)
    assert not resolves(torch.tensor([[[8.0, 0.0], [3.0, 0.0]]]), two, 1)


def test_bf16_grad_bound_allows_a_multiple_of_the_cpus_own_rounding_error() -> None:
    bound = tolerance("bfloat16", "grad")
    assert bound is not None and bound.of_cpu_error > 0, bound
    # Exact gradient 0 (cancelling terms); the CPU's bfloat16 gives 0.0625 somewhere.
    wide = torch.zeros(8)
    cpu = torch.zeros(8, dtype=torch.bfloat16)
    cpu[3] = 0.0625
    dev = torch.zeros(8, dtype=torch.bfloat16)
    dev[5] = 0.125
    assert compare([dev], [cpu], "grad", None)[0], "without the CPU's error it fails"
    assert compare([dev], [cpu], "grad", None, cpu_error=[wide])[0] == []
    # Noise twice the CPU's own is accepted; ten times is not.
    dev[5] = 0.0625 * 10
    assert compare([dev], [cpu], "grad", None, cpu_error=[wide])[0]


def test_op_db_bf16_grad_rounding_near_zero_passes(device: str) -> None:
    ev = evaluate(Case("nn.functional.normalize", "bfloat16", True), device, 3,
                  SEED, NO_SPARSE)
    assert ev.samples > 0 and ev.backward is not None, ev
    assert not ev.grad_wrong, ev.grad_wrong


class _WrongGrad(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        x, = ctx.saved_tensors
        grad = 2 * x * g
        return grad * 1.25 if _on_device(x) else grad

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(inputs[0])


def test_bf16_wrong_gradient_still_fails(device: str) -> None:
    op = _op("wrong_grad", _WrongGrad.apply)
    ev = evaluate(Case("wrong_grad", "bfloat16", True), device, 2, SEED, NO_SPARSE, op=op)
    assert not ev.wrong, ev.wrong
    assert ev.grad_wrong and "elements outside" in ev.grad_wrong, ev


# The suite's use of the bridge's op statistics: a scope counts its block, scopes
# nest (a test's scope holds the sweep's), and op_stats() stays cumulative.

def test_op_stats_scopes_nest_and_op_stats_stays_cumulative(device: str) -> None:
    def calls(table: Any) -> int:
        return table.get("aten::mul.Tensor", "float32").calls

    x = torch.ones(4, device=device)
    before = calls(torch_fl.op_stats())
    torch.mul(x, x)  # outside any scope
    with torch_fl.op_stats_scope() as outer:
        torch.mul(x, x)
        with torch_fl.op_stats_scope() as inner:
            torch.mul(x, x)
            torch.mul(x, x)
    assert calls(inner.table) == 2, list(inner.table)
    assert calls(outer.table) == 3, list(outer.table)
    torch.mul(x, x)
    assert calls(torch_fl.op_stats()) == before + 5


# Unstable sorts: the order of equal elements is the implementation's.

def _ties(op: Any, device: Any, dtype: Any, requires_grad: bool, **_: Any) -> Any:
    x = torch.tensor([2.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 1.0], dtype=dtype)
    yield SampleInput(x.clone().requires_grad_(requires_grad))
    yield SampleInput(x.reshape(2, 4).clone().requires_grad_(requires_grad), dim=1)


def _sort_op(name: str, fn: Any) -> OpInfo:
    return OpInfo(name, op=fn, sample_inputs_func=_ties, dtypes=(torch.float32,),
                  supports_autograd=True)


def _reverse_ties(x: torch.Tensor, dim: int = -1, stable: bool = False) -> Any:
    """A sort that is right but orders equal elements last-first on the device."""
    if not _on_device(x) or stable:
        return torch.sort(x, dim=dim, stable=stable)
    v, i = torch.sort(x.flip(dim), dim=dim, stable=True)
    return v, x.size(dim) - 1 - i


def test_unstable_sort_may_order_ties_its_own_way(device: str, monkeypatch: Any) -> None:
    from torch_fl_conformance import tolerances

    monkeypatch.setattr(tolerances, "tie_order_indices",
                        lambda op: [1] if op.startswith("tie_sort") else None)
    monkeypatch.setattr(opinfo_sweep, "tie_order_indices", tolerances.tie_order_indices)
    ev = evaluate(Case("tie_sort", "float32", True), device, 2, SEED, NO_SPARSE,
                  op=_sort_op("tie_sort", _reverse_ties))
    assert ev.samples == 2 and not ev.wrong and not ev.grad_wrong, ev

    # Indices that pick other values are wrong.
    def off_by_one(x: torch.Tensor, dim: int = -1) -> Any:
        v, i = torch.sort(x, dim=dim)
        return (v, (i + 1) % x.size(dim)) if _on_device(x) else (v, i)

    ev = evaluate(Case("tie_sort_bad", "float32", False), device, 2, SEED, NO_SPARSE,
                  op=_sort_op("tie_sort_bad", off_by_one))
    assert ev.coverage_class == "wrong" and "exact dtype torch.int64" in ev.wrong, ev
    # Without a tie_order entry the same reordering is a difference.
    ev = evaluate(Case("plain_sort", "float32", False), device, 2, SEED, NO_SPARSE,
                  op=_sort_op("plain_sort", _reverse_ties))
    assert ev.coverage_class == "wrong", ev


def test_stable_sort_must_keep_the_cpus_order(device: str, monkeypatch: Any) -> None:
    from torch_fl_conformance import tolerances

    monkeypatch.setattr(opinfo_sweep, "tie_order_indices",
                        lambda op: [1] if op == "stable_sort" else None)

    def stable_reversed(x: torch.Tensor, dim: int = -1, stable: bool = True) -> Any:
        return _reverse_ties(x, dim) if _on_device(x) else torch.sort(x, dim=dim, stable=True)

    def samples(op: Any, device: Any, dtype: Any, requires_grad: bool, **kw: Any) -> Any:
        for s in _ties(op, device, dtype, requires_grad):
            yield SampleInput(s.input, stable=True, **s.kwargs)

    op = OpInfo("stable_sort", op=stable_reversed, sample_inputs_func=samples,
                dtypes=(torch.float32,))
    ev = evaluate(Case("stable_sort", "float32", False), device, 2, SEED, NO_SPARSE, op=op)
    assert ev.coverage_class == "wrong", ev
    assert tolerances.tie_order_indices("sort") == [1]


@pytest.mark.parametrize("name", ["sort", "argsort", "topk", "msort"])
def test_op_db_sorts_are_declared_tie_order(name: str) -> None:
    from torch_fl_conformance import tolerances

    assert tolerances.tie_order_indices(name) is not None


def test_run_chunks_keep_the_checks_of_one_evaluation_together() -> None:
    from torch_fl_conformance.runner import chunks

    ids = ["L0/test_smoke.py::test_load"]
    for op in ("abs", "add", "sub"):
        ids += [f"L1/test_opinfo.py::test_op[{op}-float32-{c}]" for c in ("runs", "output",
                                                                         "grad")]
    ids += [f"L2/test_models.py::test_model[resnet18-{c}]" for c in ("parity", "amp")]
    ranges = chunks(ids, 2)
    assert [i for a, b in ranges for i in range(a, b)] == list(range(len(ids)))
    for a, b in ranges:
        assert b > a
        if b < len(ids):  # never cut between two checks of one case
            assert ids[b].rsplit("-", 1)[0] != ids[b - 1].rsplit("-", 1)[0], (a, b)
    assert chunks([], 8) == []


# Derived variants: a kernel right on op_db's dense samples and wrong on the layouts
# and call forms real programs use fails the check that names that variant.

def _dense_samples(op: Any, device: Any, dtype: Any, requires_grad: bool, **_: Any) -> Any:
    for shape in ((6, 5), (4, 3, 2)):
        yield SampleInput(make_tensor(shape, device=device, dtype=dtype, low=-2, high=2,
                                      requires_grad=requires_grad))


def _variant_op(name: str, fn: Any, **kw: Any) -> OpInfo:
    return OpInfo(name, op=fn, sample_inputs_func=_dense_samples, dtypes=(torch.float32,),
                  supports_autograd=False, **kw)


def _dense_view(x: torch.Tensor) -> torch.Tensor:
    """x's storage read as dense row-major from its offset (a stride-ignoring kernel)."""
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.insert(0, step)
        step *= size
    return torch.as_strided(x, x.shape, strides, x.storage_offset())


def _checks(ev: Any) -> dict[str, str]:
    return {k: c.wrong for k, c in ev.checks.items() if c.wrong}


def test_stride_ignoring_kernel_fails_the_noncontiguous_check(device: str) -> None:
    op = _variant_op("strided_bug", lambda x: (_dense_view(x) if _on_device(x) else x) * 3)
    ev = evaluate(Case("strided_bug", "float32", False, primary=True), device, None, SEED,
                  NO_SPARSE, op=op)
    wrong = _checks(ev)
    assert set(wrong) >= {"noncontiguous"} and "output" not in wrong, wrong
    assert "noncontiguous" in wrong["noncontiguous"], wrong


def test_offset_ignoring_kernel_fails_the_offset_check(device: str) -> None:
    def bug(x: torch.Tensor) -> torch.Tensor:
        if _on_device(x):
            x = torch.as_strided(x, x.shape, x.stride(), 0)
        return x.exp()

    ev = evaluate(Case("offset_bug", "float32", False, primary=True), device, None, SEED,
                  NO_SPARSE, op=_variant_op("offset_bug", bug))
    wrong = _checks(ev)
    assert "offset" in wrong and "output" not in wrong, wrong


def test_a_write_outside_the_view_is_seen(device: str) -> None:
    def bug(x: torch.Tensor) -> torch.Tensor:
        if _on_device(x) and x.storage_offset() > 0:
            torch.as_strided(x, (1,), (1,), x.storage_offset() - 1).fill_(7.0)
        return x * 2

    ev = evaluate(Case("outside_bug", "float32", False, primary=True), device, None, SEED,
                  NO_SPARSE, op=_variant_op("outside_bug", bug))
    wrong = _checks(ev)
    assert "offset" in wrong and "input" in wrong["offset"], wrong


def test_a_kernel_that_mutates_its_input_fails_the_output_check(device: str) -> None:
    def bug(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if _on_device(x):
            x.zero_()
        return y

    ev = evaluate(Case("mutating_bug", "float32", False, primary=True), device, None, SEED,
                  NO_SPARSE, op=_variant_op("mutating_bug", bug))
    assert "after the call" in ev.check("output").wrong, ev.check("output")


def test_out_and_inplace_variants_check_what_they_write(device: str) -> None:
    def mul(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is None:
            return x * 2
        if not _on_device(x):
            return torch.mul(x, 2, out=out)
        return out  # "success" without writing

    def mul_(x: torch.Tensor) -> torch.Tensor:
        return x.mul_(2) if not _on_device(x) else x.mul_(2).add_(1)

    op = _variant_op("out_bug", mul, supports_out=True, inplace_variant=mul_)
    case = Case("out_bug", "float32", False, primary=True)
    assert {"inplace", "out"} <= set(opinfo_sweep.checks_of(case, op))
    ev = evaluate(case, device, None, SEED, NO_SPARSE, op=op)
    wrong = _checks(ev)
    assert set(wrong) == {"out", "inplace"}, wrong
    assert wrong["out"].startswith("out= (contiguous out)"), wrong["out"]


def _wide_out_op(name: str, error: float) -> OpInfo:
    """(x + 1) - 1 in bfloat16: the CPU rounds x + 1, the device computes in
    float32 and rounds once (exactly x), plus `error`; out= and in-place too."""

    def f(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        if _on_device(x):
            y = ((x.float() + 1) - 1 + error).to(x.dtype)
            return y if out is None else out.copy_(y)
        return torch.sub(x + 1, 1, out=out) if out is not None else (x + 1) - 1

    def f_(x: torch.Tensor) -> torch.Tensor:
        return x.copy_(f(x))

    return OpInfo(name, op=f, sample_inputs_func=_dense_samples, dtypes=(torch.bfloat16,),
                  supports_autograd=False, supports_out=True, inplace_variant=f_)


def test_out_and_inplace_results_computed_wider_pass_like_outputs(device: str) -> None:
    # Near 0 the CPU's (x + 1) - 1 is off by up to 2**-8 while the device is exact:
    # the tensors written by out= and in-place forms are results, judged as outputs.
    case = Case("wide_out", "bfloat16", False, primary=True)
    ev = evaluate(case, device, None, SEED, NO_SPARSE, op=_wide_out_op("wide_out", 0.0))
    ran = {k: c.samples for k, c in ev.checks.items()}
    assert not _checks(ev), ev.checks
    assert ran.get("out", 0) > 0 and ran.get("inplace", 0) > 0, ran
    ev = evaluate(Case("wide_out_bad", "bfloat16", False, primary=True), device, None, SEED,
                  NO_SPARSE, op=_wide_out_op("wide_out_bad", 0.05))
    assert {"output", "out", "inplace"} <= set(_checks(ev)), ev.checks


def test_a_broadcast_operand_is_compared_on_its_own_values(device: str) -> None:
    def bug(x: torch.Tensor) -> torch.Tensor:
        if _on_device(x) and 0 in x.stride():
            return _dense_view(x.contiguous()) + 1
        return x + 0

    ev = evaluate(Case("broadcast_bug", "float32", False, primary=True), device, None, SEED,
                  NO_SPARSE, op=_variant_op("broadcast_bug", bug))
    wrong = _checks(ev)
    assert set(wrong) == {"broadcast"}, wrong


def test_variants_pass_for_a_correct_kernel(device: str) -> None:
    ev = evaluate(Case("mul", "float32", True, primary=True), device, None, SEED, NO_SPARSE)
    ran = {k: c.samples for k, c in ev.checks.items()}
    assert not _checks(ev) and not [c.error for c in ev.checks.values() if c.error], ev.checks
    for name in ("noncontiguous", "noncontiguous_grad", "offset", "broadcast", "inplace",
                 "out"):
        assert ran.get(name, 0) > 0, (name, ran)
    assert ev.samples == opinfo_sweep.SAMPLES, ev.samples
