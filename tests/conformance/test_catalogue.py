"""The requirement catalogue, the generated docs table, tolerances and expectation files."""

from __future__ import annotations

import copy

import pytest
import tomllib
from conftest import ROOT
from torch_fl_conformance.expectations import ExpectationError, Expectations
from torch_fl_conformance.requirements import (
    RequirementsError,
    load_requirements,
    parse_requirements,
    render_markdown,
)
from torch_fl_conformance.tolerances import (
    TolerancesError,
    ceiling,
    compare,
    op_class,
    tolerance,
    validate,
)


def test_catalogue_ids_and_levels() -> None:
    reqs = load_requirements()
    assert len(reqs) >= 30, len(reqs)
    levels = {r.level for r in reqs.values()}
    assert levels == {"L0", "L1", "L2", "L3"}, levels
    assert all(r.id.startswith(f"TFL-{r.area}-") for r in reqs.values())


def test_docs_table_is_generated_from_the_catalogue() -> None:
    doc = (ROOT / "docs" / "requirements.md").read_text(encoding="utf-8")
    assert doc == render_markdown() + "\n", (
        "docs/requirements.md is out of date: run "
        "`torchfl-conformance requirements --format md > docs/requirements.md`"
    )


@pytest.mark.parametrize(("entry", "message"), [
    ('id = "TFL-X-1"\nstrength = "MUST"\nlevel = "L0"\ncapability = ""\ntext = "t."',
     "TFL-<AREA>-<NNN>"),
    ('id = "TFL-X-001"\nstrength = "MAY"\nlevel = "L0"\ncapability = ""\ntext = "t."',
     "strength"),
    ('id = "TFL-X-001"\nstrength = "MUST"\nlevel = "L9"\ncapability = ""\ntext = "t."',
     "level"),
    ('id = "TFL-X-001"\nstrength = "MUST"\nlevel = "L0"\ncapability = "warp"\ntext = "t."',
     "capability"),
])
def test_malformed_requirement_is_named(entry: str, message: str) -> None:
    with pytest.raises(RequirementsError, match=message):
        parse_requirements("[[requirement]]\n" + entry)


def test_tolerances_default_to_pytorchs_own() -> None:
    f32 = tolerance("float32", "output")
    assert f32 is not None and (f32.atol, f32.rtol) == (1e-5, 1.3e-6), f32
    f64 = tolerance("float64", "output")
    assert f64 is not None and (f64.atol, f64.rtol) == (1e-7, 1e-7), f64
    assert tolerance("int64", "output") is None  # exact
    assert op_class("add") == "elementwise"
    assert op_class("exp") == "transcendental"
    assert op_class("nn.functional.conv2d") == op_class("sum") == "accumulation"
    cls = tolerance("float32", "output", "mm")
    assert cls is not None and cls.source == "class accumulation" and cls.reason, cls


def test_no_bound_exceeds_the_ceiling() -> None:
    data = tomllib.loads((ROOT / "conformance" / "torch_fl_conformance"
                          / "tolerances.toml").read_text(encoding="utf-8"))
    validate(data)  # the shipped file
    for dtype in data["dtype"]:
        for kind in ("output", "grad"):
            c = ceiling(dtype, kind)
            assert c is not None, (dtype, kind)
            for op in (None, "exp", "sum", "mm"):
                b = tolerance(dtype, kind, op)
                assert b is not None and b.atol <= c.atol and b.rtol <= c.rtol, (dtype, op, b)
    loose = copy.deepcopy(data)
    loose["dtype"]["float32"]["output"] = {"atol": 1e-5, "rtol": 2e-3}
    with pytest.raises(TolerancesError, match="exceeds the ceiling"):
        validate(loose)
    loose = copy.deepcopy(data)
    loose["override"] = [{"op": "cumsum", "dtype": "*", "grad": {"atol": 2e-2, "rtol": 2e-2},
                          "reason": "too loose"}]
    with pytest.raises(TolerancesError, match="override cumsum float32.grad"):
        validate(loose)


def test_a_composed_allowance_is_capped_at_the_ceiling() -> None:
    import torch

    # bfloat16 gradients allow 8e-3 x the largest |value| of the tensor: next to an
    # element of 1000 that would let an element near 0 be off by 8; the ceiling
    # (atol 6e-2 at a value of 0) still refuses 0.5.
    expected = torch.tensor([1000.0, 0.0, 1.0, 2.0], dtype=torch.bfloat16)
    device = expected.clone()
    device[1] = 0.5
    bad, _, _ = compare([device], [expected], "grad", None)
    assert bad, "a composed allowance beyond the ceiling let a 0.5 error through"
    device[1] = 0.05
    assert compare([device], [expected], "grad", None)[0] == []


def test_every_reduction_of_op_db_is_an_accumulation() -> None:
    pytest.importorskip("torch.testing._internal.common_methods_invocations")
    from torch.testing._internal.opinfo.core import ReductionOpInfo
    from torch_fl_conformance.opinfo_sweep import op_infos

    exact = {"all", "any", "amax", "amin", "argmax", "argmin", "count_nonzero", "hash_tensor",
             "masked.amax", "masked.amin", "masked.argmax", "masked.argmin"}
    missing = [name for name, op in op_infos().items() if isinstance(op, ReductionOpInfo)
               and name not in exact and op_class(name) != "accumulation"]
    assert not missing, f"reductions without the accumulation class: {missing}"


def test_expectations_prefix_longest_wins_and_stale() -> None:
    exp = Expectations.parse({
        "xfail": [{"id": "L0/test_smoke.py::test_api[", "reason": "broad"},
                  {"id": "L0/test_smoke.py::test_api[abs-", "reason": "narrow"}],
        "skip": [{"id": "L1/test_nothing.py", "reason": "gone"}],
    })
    m = exp.match("L0/test_smoke.py::test_api[abs-native]")
    assert m is not None and m.reason == "narrow", m
    assert exp.match("L0/test_smoke.py::test_load") is None
    assert [e.id for e in exp.stale()] == ["L0/test_smoke.py::test_api[", "L1/test_nothing.py"]


@pytest.mark.parametrize(("data", "message"), [
    ({"xfail": [{"id": "x"}]}, "needs a reason"),
    ({"xfail": [{"id": "", "reason": "r"}]}, "non-empty"),
    ({"xpass": []}, "unknown tables"),
    ({"xfail": [{"id": "a", "reason": "r"}], "skip": [{"id": "a", "reason": "r"}]}, "twice"),
])
def test_bad_expectations_are_refused(data: dict, message: str) -> None:
    with pytest.raises(ExpectationError, match=message):
        Expectations.parse(data, "exp.toml")
