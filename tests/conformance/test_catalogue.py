"""The requirement catalogue, the generated docs table, tolerances and expectation files."""

from __future__ import annotations

import pytest
from conftest import ROOT
from torch_fl_conformance.expectations import ExpectationError, Expectations
from torch_fl_conformance.requirements import (
    RequirementsError,
    load_requirements,
    parse_requirements,
    render_markdown,
)
from torch_fl_conformance.tolerances import tolerance


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


def test_tolerances() -> None:
    f32 = tolerance("float32", "output")
    assert f32 is not None and (f32.atol, f32.rtol) == (1e-3, 1e-3), f32
    g32 = tolerance("float32", "grad")
    assert g32 is not None and (g32.atol, g32.rtol) == (1e-2, 1e-2), g32
    assert tolerance("int64", "output") is None  # exact
    override = tolerance("float32", "grad", "cumsum")
    assert override is not None and override.reason, override


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
