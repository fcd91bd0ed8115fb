"""The schema guard (TFL_KernelDesc.schema, ABI 1.1).

A plugin states the schema each kernel was written for; the bridge compares
it with the running PyTorch's. These tests restate some of flemu's schemas
through a wrapper plugin (fixtures/schema_plugin.c) and check each outcome:
equal schemas register, a schema PyTorch only extended with defaulted
arguments registers with those arguments hidden from the kernel (non-default
calls fall back), anything else is refused with a warning naming the op and
both schemas, and a 1.0 descriptor registers by name as before. flemu's own
stated schemas must all match the running PyTorch.
"""
from __future__ import annotations

import json
from pathlib import Path

import flemu
import pytest
from support import compile_c, run_python

FIXTURE = Path(__file__).parent / "fixtures" / "schema_plugin.c"

# Restated schemas: op -> (schema, expected outcome).
RESTATED = {
    # As if written before `alpha` existed: PyTorch only appended a defaulted argument.
    "aten::add.Tensor": ("aten::add.Tensor(Tensor self, Tensor other) -> Tensor", "adapted"),
    # Arguments renamed (as aten::_cdist_backward's `grad` became `grad_output` in torch 2.14).
    "aten::mul.Tensor": ("aten::mul.Tensor(Tensor other, Tensor self) -> Tensor", "refused"),
    # An argument's type changed.
    "aten::sub.Tensor": ("aten::sub.Tensor(Tensor self, Tensor other, *, float alpha=1.) -> Tensor",
                         "refused"),
    # Not a schema at all.
    "aten::div.Tensor": ("aten::div.Tensor(Tensor self", "refused"),
    # The schema of another operator.
    "aten::neg": ("aten::abs(Tensor self) -> Tensor", "refused"),
    # An argument PyTorch does not have.
    "aten::sin": ("aten::sin(Tensor self, *, int terms) -> Tensor", "refused"),
    # A 1.0 descriptor: no schema field, registered by name.
    "aten::exp": ("-", "registered"),
}

RUNNER = r'''
import json, os, warnings
import torch, torch_fl
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    h = torch_fl.register_device_plugin("schemas", plugin_path=os.environ["SCHEMA_PLUGIN"])
torch_fl.set_fallback_mode("silent")

def native_and_fallback(fn):
    with torch_fl.op_stats_scope() as scope:
        value = fn()
        torch.schemas.synchronize()
    counts = {}
    for row in scope.table.rows:
        c = counts.setdefault(row.op, [0, 0])
        c[0] += row.native
        c[1] += row.cpu_fallback + row.decomposed
    return value.cpu(), counts

a = torch.arange(6.).reshape(2, 3)
b = torch.full((2, 3), 0.5)
da, db = a.to("schemas"), b.to("schemas")
calls = {
    "add": lambda: torch.add(da, db),
    "add_alpha": lambda: torch.add(da, db, alpha=3),
    "add_": lambda: da.clone().add_(db),
    "add_out": lambda: torch.add(da, db, out=torch.empty(2, 3, device="schemas")),
    "mul": lambda: da * db,
    "sub": lambda: da - db,
    "div": lambda: da / db,
    "neg": lambda: -da,
    "sin": lambda: da.sin(),
    "exp": lambda: da.exp(),
    "cos": lambda: da.cos(),
}
expected = {
    "add": a + b, "add_alpha": torch.add(a, b, alpha=3), "add_": a + b, "add_out": a + b,
    "mul": a * b, "sub": a - b, "div": a / b, "neg": -a, "sin": a.sin(), "exp": a.exp(),
    "cos": a.cos(),
}
results = {}
for name, fn in calls.items():
    value, counts = native_and_fallback(fn)
    results[name] = {"ok": bool(torch.allclose(value, expected[name])), "counts": counts}
print("RESULT " + json.dumps({
    "warnings": [str(w.message) for w in caught],
    "rejected": dict(h.rejected_kernels),
    "adapted": dict(h.adapted_kernels),
    "kernels": list(h.kernels),
    "summary": h.summary(),
    "calls": results,
}))
'''


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict:
    lib = compile_c(FIXTURE, tmp_path_factory.mktemp("schemas") / "libschemas.so")
    proc = run_python(RUNNER, env={
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        "SCHEMA_PLUGIN": str(lib),
        "SCHEMA_INNER_LIBRARY": str(flemu.library_path()),
        "SCHEMA_PLUGIN_NO_ALPHA": "1",
        "SCHEMA_PLUGIN_SCHEMAS": "\n".join(f"{op}\t{s}" for op, (s, _) in RESTATED.items()),
    })
    # The alpha-less add kernel aborts when handed three arguments.
    assert proc.returncode == 0 and "RESULT " in proc.stdout, (
        f"exit {proc.returncode}\n--- stderr\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


@pytest.mark.parametrize("op", [op for op, (_, o) in RESTATED.items() if o == "refused"])
def test_a_changed_schema_refuses_the_kernel_with_a_warning_naming_both(outcome: dict, op: str) -> None:
    stated = RESTATED[op][0]
    assert op in outcome["rejected"], sorted(outcome["rejected"])
    assert op not in outcome["kernels"]
    why = outcome["rejected"][op]
    assert stated in why and "this PyTorch has" in why, why
    warned = [w for w in outcome["warnings"] if op in w and stated in w]
    assert warned, outcome["warnings"]
    # The running PyTorch's schema is named too.
    import torch
    name, _, overload = op.partition(".")
    running = str(getattr(getattr(torch.ops.aten, name.split("::")[1]), overload or "default")._schema)
    assert running in warned[0], warned[0]


def test_refusal_reasons_say_what_differs(outcome: dict) -> None:
    rejected = outcome["rejected"]
    assert "argument 'alpha' is 'float alpha=1.' in the kernel's schema" in rejected["aten::sub.Tensor"]
    assert "does not parse" in rejected["aten::div.Tensor"]
    assert "its schema is that of aten::abs" in rejected["aten::neg"]
    assert "'int terms'" in rejected["aten::sin"]
    assert "'Tensor self' where the kernel's has 'Tensor other'" in rejected["aten::mul.Tensor"]


@pytest.mark.parametrize("call,op", [("mul", "aten::mul.Tensor"), ("sub", "aten::sub.Tensor"),
                                     ("div", "aten::div.Tensor"), ("neg", "aten::neg"),
                                     ("sin", "aten::sin")])
def test_a_refused_kernel_falls_back_with_correct_results(outcome: dict, call: str, op: str) -> None:
    r = outcome["calls"][call]
    assert r["ok"], r
    # The fallback chain may run the op through another overload (sin.out).
    base = op.split(".")[0]
    rows = [c for name, c in r["counts"].items() if name.split(".")[0] == base]
    assert rows and sum(n for n, _ in rows) == 0 and sum(f for _, f in rows) >= 1, r["counts"]


def test_only_appended_defaulted_arguments_adapt_the_kernel(outcome: dict) -> None:
    assert "aten::add.Tensor" in outcome["kernels"]
    assert "aten::add.Tensor" not in outcome["rejected"]
    assert "'alpha'" in outcome["adapted"]["aten::add.Tensor"], outcome["adapted"]
    # The derived in-place and out= overloads hide alpha too.
    assert {"aten::add_.Tensor", "aten::add.out"} <= set(outcome["adapted"]), outcome["adapted"]
    assert "older schema" in outcome["summary"]
    # No warning for an adapted kernel: nothing is lost while alpha holds its default.
    assert not [w for w in outcome["warnings"] if "aten::add" in w], outcome["warnings"]


@pytest.mark.parametrize("call,op", [("add", "aten::add.Tensor"), ("add_", "aten::add_.Tensor"),
                                     ("add_out", "aten::add.out")])
def test_the_adapted_kernel_runs_natively_while_the_new_argument_holds_its_default(
        outcome: dict, call: str, op: str) -> None:
    r = outcome["calls"][call]
    assert r["ok"], r
    native, fallback = r["counts"].get(op, [0, 0])
    assert native == 1 and fallback == 0, r["counts"]


def test_a_non_default_value_for_a_hidden_argument_falls_back(outcome: dict) -> None:
    r = outcome["calls"]["add_alpha"]
    assert r["ok"], r
    native, fallback = r["counts"].get("aten::add.Tensor", [0, 0])
    assert native == 0 and fallback == 1, r["counts"]


def test_equal_and_unstated_schemas_register_as_before(outcome: dict) -> None:
    for call, op in (("exp", "aten::exp"), ("cos", "aten::cos")):
        assert op in outcome["kernels"] and op not in outcome["rejected"]
        r = outcome["calls"][call]
        assert r["ok"] and r["counts"][op] == [1, 0], r


def test_flemu_states_a_schema_for_every_kernel_and_all_match_this_pytorch() -> None:
    # flemu fills TFL_KernelDesc.schema from kernel_schemas.h: under any
    # supported PyTorch none of its kernels may be refused or adapted.
    proc = run_python(r'''
import json, torch_fl
h = torch_fl.register_device_plugin("flemu")
print("RESULT " + json.dumps({"rejected": dict(h.rejected_kernels), "adapted": dict(h.adapted_kernels),
                              "n": len(h.kernels)}))
''', env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.split("RESULT ", 1)[1])
    schema_refusals = {op: why for op, why in got["rejected"].items() if "written for" in why}
    assert not schema_refusals and not got["adapted"], (schema_refusals, got["adapted"])
    assert got["n"] > 150
