"""The report says what to fix next, in the order a vendor acts in: the verdict, the
blockers (MUST failures of the lowest level not met, with op, dtype, the plugin
kernels they ran and a bisection command), the kernels to write (per functional
operator and dtype, never one that already runs natively for that dtype, most
costly in the model zoo first), the SHOULD findings collapsed to one line per
requirement, the requirements by level with the untested ones counted. Checked on
synthetic results and on a real run of a plugin with a planted wrong result
(flemu's minimal profile, a new vendor's twelve kernels, with add ignoring alpha),
in the console, the Markdown and the HTML."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_env, load_report, outcomes_of, run_cli
from torch_fl_conformance.report.build import build_report, functional_name
from torch_fl_conformance.report.schema import validate
from torch_fl_conformance.report.write import (
    STEPS_SHOWN,
    render_console,
    render_html,
    render_markdown,
)
from torch_fl_conformance.requirements import load_requirements
from torch_fl_conformance.runner import Progress

# A new vendor's first plugin (FLEMU_PROFILE=minimal: add/sub/mul/div/... for float32,
# float64 and int64 only) whose add.Tensor ignores alpha: one MUST failure at L0
# (test_api[add_alpha-matches_cpu]) among two dozen SHOULD ones (TFL-SMOKE-007, "runs
# natively"), an L1 MUST failure above it (an SGD step: add with alpha), and the op_db
# sweep of mul, which falls back for float16 and bfloat16 only.
PLANTED_ENV = {"FLEMU_PROFILE": "minimal", "FLEMU_FAULT": "add_ignores_alpha"}
PLANTED_ARGS = ("--level", "L1", "--ops", "mul", "-j", "2", "--",
                "-k", "test_smoke or test_op[ or test_optimizer_built_before_to")
BLOCKER = "L0/test_smoke.py::test_api[add_alpha-matches_cpu]"
L1_MUST = "L1/test_modules.py::test_optimizer_built_before_to"


def planted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The planted run's report directory and console output, made once per session
    (test_report_html.py reads the same run)."""
    out = tmp_path_factory.getbasetemp() / "planted-run"
    console = out / "console.txt"
    if not console.exists():
        r = run_cli("run", "--plugin", "flemu", "--report", str(out), *PLANTED_ARGS,
                    env=cli_env(**PLANTED_ENV))
        assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-4000:]
        console.write_text(r.stdout, encoding="utf-8")
    return out, console.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def planted(tmp_path_factory: pytest.TempPathFactory, flemu_library: str) -> tuple[Path, str]:
    return planted_run(tmp_path_factory)


def _in_order(text: str, *needles: str) -> None:
    """Each needle occurs in `text`, each after the one before it."""
    at = -1
    for n in needles:
        i = text.find(n, at + 1)
        assert i > at, f"{n!r} not found after {needles[max(0, needles.index(n) - 1)]!r} " \
            f"(at {at}); text starts: {text[:1500]}"
        at = i


# -- synthetic results ----------------------------------------------------------
TARGET = {
    "device_type": "fake", "plugin_name": "fake", "vendor": "v", "version": "1", "abi": "1.0",
    "host_abi": "1.0", "library": "/opt/fake/libfake.so", "library_sha256": "0" * 64,
    "device_count": 1, "devices": [], "groups": {}, "capabilities": ["fp16", "bf16"],
    "native_kernels": 3,
}
HOST = {"hostname": "h", "platform": "p", "machine": "m", "python": "3", "cpu_count": 2,
        "torch": "2.13", "torch_fl": "0.1", "suite": "0.1"}
OPTIONS = {"level": "L1", "seed": 20240601, "timeout_s": 300.0, "samples": None, "ops": None,
           "models": None, "certify": False, "expectations": None}


def _test(rid: str, outcome: str = "PASS", tid: str = "", data: dict[str, Any] | None = None,
          message: str = "") -> dict[str, Any]:
    r = load_requirements()[rid]
    return {"id": tid or f"{r.level}/test_x.py::test_{rid}", "requirement": rid,
            "strength": r.strength, "level": r.level, "area": r.area.lower(),
            "capability": r.capability, "outcome": outcome, "duration_s": 0.1,
            "message": message, "detail": "", "data": data or {}, "expectation": None}


def _stat(op: str, dtype: str, native: int = 0, fallback: int = 0,
          time_ns: int = 1000) -> dict[str, Any]:
    return {"op": op, "dtype": dtype, "native": native, "decomposed": 0,
            "cpu_fallback": fallback, "failed": 0, "time_ns": time_ns, "bytes_copied": 0}


def _synthetic(tests: list[dict[str, Any]], op_stats: list[dict[str, Any]] | None = None,
               zoo: dict[str, Any] | None = None) -> dict[str, Any]:
    return build_report(target=TARGET, host=HOST, options=OPTIONS, tests=tests,
                        op_stats=op_stats or [], stale=[], started=0.0, finished=1.0,
                        deselected=0, workers=1, restarts=0,
                        zoo=zoo or {"models": [], "rows": {}, "error": ""})


def _all_pass_but(*failing: dict[str, Any]) -> list[dict[str, Any]]:
    """One passing test per L0/L1 requirement (capability skips applied), plus `failing`."""
    tests = [_test(rid, "SKIP" if r.capability and r.capability not in TARGET["capabilities"]
                   else "PASS")
             for rid, r in load_requirements().items() if r.level in ("L0", "L1")]
    return tests + list(failing)


def test_blockers_are_the_must_failures_of_the_lowest_failing_level() -> None:
    kernels = {"native": ["aten::_copy_from", "aten::mul.Tensor", "aten::add.Tensor"]}
    r = _synthetic(_all_pass_but(
        _test("TFL-SMOKE-006", "FAIL", "L0/test_smoke.py::test_api[mul-matches_cpu]",
              {"kernels": kernels}, "AssertionError: mul: out: 20 of 20 elements outside"),
        _test("TFL-SMOKE-007", "FAIL", "L0/test_smoke.py::test_api[log-native]",
              {"kernels": {"native": ["aten::abs"], "fallback": ["aten::log.out"]}}),
        _test("TFL-OPS-002", "FAIL", "L1/test_opinfo.py::test_op[mul-float16-output]",
              {"kernels": {"native": ["aten::mul.Tensor"]}})))
    b = r["blockers"]
    assert b["level"] == "L0", b
    assert [x["test"] for x in b["items"]] == ["L0/test_smoke.py::test_api[mul-matches_cpu]"], \
        b["items"]  # the L1 MUST failure is not a blocker of L0; SHOULD ones never are
    x = b["items"][0]
    assert (x["op"], x["requirement"], x["outcome"]) == ("mul", "TFL-SMOKE-006", "FAIL"), x
    # the copy is served by the bridge: TORCH_FL_DISABLE_KERNELS cannot turn it off
    assert set(x["kernels"]) == {"aten::mul.Tensor", "aten::add.Tensor"}, x["kernels"]
    env, _, cmd = x["bisect"].partition(" ")
    assert env.startswith("TORCH_FL_DISABLE_KERNELS=") and \
        set(env.split("=", 1)[1].split(",")) == set(x["kernels"]), x["bisect"]
    args = shlex.split(cmd)
    assert args[:2] == ["torchfl-conformance", "run"], args
    assert args[args.index("--plugin") + 1] == "fake=/opt/fake/libfake.so", args
    assert args[args.index("--level") + 1] == "L0", args
    assert args[-2:] == ["-k", "test_api[mul-matches_cpu]"], args
    # the suspects rank the kernels of the wrong result, not those beside a fallback
    assert "aten::abs" not in [s["kernel"] for s in r["suspects"]], r["suspects"]
    finding = [(f["requirement"], f["count"]) for f in r["should_findings"]]
    assert finding == [("TFL-SMOKE-007", 1)], finding


def test_requirements_that_block_without_a_failing_test_are_blockers_too() -> None:
    waived = _test("TFL-SMOKE-005", "SKIP")
    waived["expectation"] = {"kind": "skip", "reason": "copies are slow"}
    r = _synthetic([t for t in _all_pass_but()
                    if t["requirement"] not in ("TFL-SMOKE-005", "TFL-SMOKE-002")] + [waived])
    kinds = [(x["kind"], x.get("requirement") or x.get("requirements"))
             for x in r["blockers"]["items"]]
    assert kinds == [("requirement", "TFL-SMOKE-005"), ("not_tested", ["TFL-SMOKE-002"])], kinds
    clean = _synthetic(_all_pass_but())
    assert clean["blockers"] == {"level": None, "items": [], "more_tests": 0}, clean["blockers"]
    text = render_console(clean)
    assert text.split("\n")[1].startswith("level achieved: L1") and "Blockers" not in text, text


def test_a_wrong_result_without_plugin_kernels_names_its_fallback_ops() -> None:
    r = _synthetic(_all_pass_but(
        _test("TFL-SMOKE-006", "FAIL", "L0/test_smoke.py::test_api[log-matches_cpu]",
              {"kernels": {"native": ["aten::_copy_from"], "fallback": ["aten::log.out"]}})))
    x = r["blockers"]["items"][0]
    assert (x["kernels"], x["bisect"], x["fallback_ops"]) == ([], "", ["aten::log.out"]), x
    text = render_console(r)
    assert "no plugin kernel ran in it" in text and "aten::log.out" in text, text


def test_next_steps_per_functional_op_and_dtype_never_one_already_native() -> None:
    ops = [
        _stat("aten::mul.Tensor", "float32", native=500),
        _stat("aten::mul.Tensor", "bfloat16", fallback=300, time_ns=9_000_000),
        _stat("aten::add.Tensor", "float32", native=400),
        _stat("aten::add_.Tensor", "float32", fallback=2),  # add is native for float32
        _stat("aten::log.out", "float32", fallback=40, time_ns=50_000_000),
        _stat("aten::convolution", "float32", fallback=3, time_ns=1_000_000),
    ]
    zoo = {"models": ["resnet18"], "error": "",
           "rows": {("aten::convolution", "float32"): {"calls": 20, "time_ns": 80_000_000,
                                                       "models": {"resnet18"}},
                    ("aten::mul.Tensor", "bfloat16"): {"calls": 1, "time_ns": 10_000,
                                                       "models": {"resnet18"}}}}
    r = _synthetic(_all_pass_but(), ops, zoo)
    steps = [(x["kernel"], x["dtype"], x["action"]) for x in r["next_steps"]["items"]]
    # ranked by the zoo's time first (convolution, then mul's one call), then the run's
    assert steps == [("aten::convolution", "float32", "register"),
                     ("aten::mul.Tensor", "bfloat16", "extend"),
                     ("aten::log", "float32", "register")], steps
    log = r["next_steps"]["items"][2]
    assert log["called_as"] == ["aten::log.out"] and log["fallback_calls"] == 40, log
    text = render_console(r)
    assert "add bfloat16 to the dtypes of the plugin's aten::mul.Tensor kernel" in text, text
    assert "register aten::log for float32 in the plugin's kernel table" in text, text


def test_a_fallback_in_the_zoo_training_on_the_device_ranks_first() -> None:
    ops = [_stat("aten::convolution", "float32", fallback=3),
           _stat("aten::log.out", "float32", fallback=40)]
    zoo = {"models": ["resnet18"], "error": "",
           "rows": {("aten::convolution", "float32"): {"calls": 20, "time_ns": 80_000_000,
                                                       "models": {"resnet18"}}}}
    trained = _test("TFL-TRAIN-002", "FAIL", "L2/test_models.py::test_model[lm-no_fallback]",
                    {"training": {"model": "lm", "fallback_ops": ["aten::log.out (float32)"]}})
    r = _synthetic(_all_pass_but(trained), ops, zoo)
    first = r["next_steps"]["items"][0]
    assert (first["kernel"], first["zoo_fell_back_in"]) == ("aten::log", ["lm"]), first


def test_functional_names_are_the_ones_to_register() -> None:
    got = {op: functional_name(op) for op in (
        "aten::log.out", "aten::add_.Tensor", "aten::max.dim_max", "aten::mean.out",
        "aten::sum.IntList_out", "aten::sort.values_stable", "aten::masked_fill_.Scalar",
        "aten::tanh_backward.grad_input", "aten::mm",
        # in place by name: the functional form exists only for functionalization
        "aten::zero_", "aten::_fused_adam_",
        # the functional form is CompositeImplicitAutograd: no device ever receives it
        "aten::linear.out")}
    assert got == {
        "aten::log.out": "aten::log", "aten::add_.Tensor": "aten::add.Tensor",
        "aten::max.dim_max": "aten::max.dim", "aten::mean.out": "aten::mean.dim",
        "aten::sum.IntList_out": "aten::sum.dim_IntList",
        "aten::sort.values_stable": "aten::sort.stable",
        "aten::masked_fill_.Scalar": "aten::masked_fill.Scalar",
        "aten::tanh_backward.grad_input": "aten::tanh_backward", "aten::mm": "aten::mm",
        "aten::zero_": "aten::zero_", "aten::_fused_adam_": "aten::_fused_adam_",
        "aten::linear.out": "aten::linear.out"}, got


def test_untested_requirements_are_counted_per_level_and_reason() -> None:
    opts = {**OPTIONS, "level": "L0"}
    tests = [_test(rid) for rid, r in load_requirements().items() if r.level == "L0"]
    r = build_report(target=TARGET, host=HOST, options=opts, tests=tests, op_stats=[],
                     stale=[], started=0.0, finished=1.0, deselected=0, workers=1,
                     restarts=0)
    groups = [(g["level"], g["count"]) for g in r["not_tested"]]
    reqs = load_requirements().values()
    assert groups == [(lv, sum(q.level == lv and not q.retired for q in reqs))
                      for lv in ("L1", "L2", "L3")], groups
    assert all("the run stopped at L0" in g["reason"] for g in r["not_tested"]), r["not_tested"]
    md, html = render_markdown(r), render_html(r)
    for g in r["not_tested"]:
        for rid in g["requirements"]:
            assert f"| {rid} |" not in md and f"<td>{rid}</td>" not in html, rid
        assert f"{g['count']} requirement(s) ({g['must']} MUST)" in md, md


def test_progress_prints_must_failures_as_they_happen_and_counts_should_ones() -> None:
    out = io.StringIO()
    p = Progress(out, 3, {"a": "SHOULD", "b": "MUST", "c": "SHOULD"})
    p.result({"id": "a", "outcome": "FAIL", "message": "ran on the CPU fallback"})
    p.result({"id": "b", "outcome": "FAIL", "message": "differs from the CPU"})
    p.result({"id": "c", "outcome": "CRASH", "message": "died of signal SIGSEGV"})
    p.finish()
    lines = out.getvalue().splitlines()
    failing = [ln for ln in lines if not ln.startswith("[")]
    assert [ln.split()[:3] for ln in failing] == [["FAIL", "MUST", "b"],
                                                  ["CRASH", "SHOULD", "c"]], lines
    assert "fail 2" in lines[-1], lines  # the SHOULD failure still counts


# -- a real run -------------------------------------------------------------------
@pytest.mark.slow
def test_console_says_verdict_blockers_next_steps_then_findings(planted: tuple[Path, str]) -> None:
    out, console = planted
    report = load_report(out)
    should = [t["id"] for t in report["tests"]
              if t["strength"] == "SHOULD" and t["outcome"] not in ("PASS", "SKIP")]
    assert len(should) > 10, should
    for tid in should:
        assert tid not in console, f"SHOULD test {tid} printed one by one"
    live, _, summary = console.partition("\nlevel achieved: ")
    assert BLOCKER in live, live  # printed the moment it failed
    first_failure = next(ln for ln in live.splitlines() if ln.startswith(("FAIL", "ERROR")))
    assert "MUST" in first_failure.split()[:2], first_failure
    b = report["blockers"]
    assert [x["test"] for x in b["items"] if x["kind"] == "test"] == [BLOCKER], b
    findings = report["should_findings"]
    assert [(f["requirement"], f["count"]) for f in findings] == [("TFL-SMOKE-007", len(should))]
    _in_order(summary, "none —", "Blockers of L0 smoke", BLOCKER, "aten::add.Tensor",
              f"bisect: {b['items'][0]['bisect']}", "Next steps:", "SHOULD findings",
              f"TFL-SMOKE-007 (L0): {len(should)} test(s) not passing", "Levels:",
              "L0 smoke: NOT met", "L1 eager: NOT met", "L2 training: not tested",
              "L3 scale: not tested")
    blockers_part = summary[:summary.index("Next steps:")]
    assert L1_MUST not in blockers_part, "an L1 MUST failure is no blocker while L0 fails"
    assert outcomes_of(report)[L1_MUST] == "FAIL"


@pytest.mark.slow
def test_next_steps_of_the_run_skip_native_dtypes(planted: tuple[Path, str]) -> None:
    out, console = planted
    report = load_report(out)
    assert validate(report) == [], validate(report)[:5]
    items = report["next_steps"]["items"]
    native = {(row["op"], row["dtype"]) for row in report["op_stats"]["rows"] if row["native"]}
    for x in items:
        for op in [x["kernel"], *x["called_as"]]:
            assert (op, x["dtype"]) not in native, f"{op} runs natively for {x['dtype']}: {x}"
    steps = {(x["kernel"], x["dtype"]): x for x in items}
    assert ("aten::mul.Tensor", "float32") not in steps, sorted(steps)
    mul16 = steps[("aten::mul.Tensor", "bfloat16")]
    assert mul16["action"] == "extend" and "float32" in mul16["native_dtypes"], mul16
    log = steps[("aten::log", "float32")]  # the smoke API fell back through aten::log.out
    assert log["action"] == "register" and "aten::log.out" in log["called_as"], log
    zoo = [bool(x["zoo_calls"]) for x in items]
    assert zoo[:2] == [True, True] and zoo == sorted(zoo, reverse=True), \
        [(x["kernel"], x["zoo_calls"]) for x in items]
    # the console lists the first of them in the report's order, each with its dtype
    shown = [f"{i}. " + (f"add {x['dtype']} to the dtypes of the plugin's {x['kernel']} kernel"
                         if x["action"] == "extend" else f"register {x['kernel']} for {x['dtype']}")
             for i, x in enumerate(items[:STEPS_SHOWN], 1)]
    _in_order(console, "Next steps:", *shown, "SHOULD findings")


@pytest.mark.slow
def test_markdown_follows_the_same_order(planted: tuple[Path, str]) -> None:
    out, _ = planted
    report = load_report(out)
    md = (out / "summary.md").read_text(encoding="utf-8")
    first_should = report["should_findings"][0]["tests"][0]["id"]
    first_step = report["next_steps"]["items"][0]
    _in_order(md, "**Level achieved: none**", "## Blockers of L0 smoke", BLOCKER,
              "TORCH_FL_DISABLE_KERNELS=aten::add.Tensor", "## Next steps",
              f"| 1 | `{first_step['kernel']}` | {first_step['dtype']} |",
              "## SHOULD findings", "**TFL-SMOKE-007** (L0)", "<details>", first_should,
              "## Requirements by level", "### L0 smoke: NOT met", "### L1 eager: NOT met",
              "### L2 training: not tested", "### L3 scale: not tested", "## Run")
    assert md.index(first_should) > md.index("## SHOULD findings"), "SHOULD row before findings"
    for g in report["not_tested"]:
        for rid in g["requirements"]:
            assert f"| {rid} |" not in md, f"untested {rid} has a row of its own"


@pytest.mark.slow
def test_html_follows_the_same_order_with_should_rows_folded(planted: tuple[Path, str]) -> None:
    out, _ = planted
    report = load_report(out)
    html = (out / "report.html").read_text(encoding="utf-8")
    _in_order(html, "id='verdict'", "class='blocker'", BLOCKER, "class='bisect'",
              "id='next-steps'", "id='should-findings'", "<details class='finding'>",
              "id='requirements'", "L0 smoke", "L1 eager", "L2 training", "L3 scale",
              "Results by area")
    for f in report["should_findings"]:
        for t in f["tests"]:
            i = html.index(t["id"])
            assert html.rfind("<details", 0, i) > html.rfind("</details>", 0, i), \
                f"{t['id']} shown outside a <details>"
    # the chart draws requirements: a MUST not met is a red segment of its area's bar
    chart = html[html.index("Requirements per area"):]
    assert re.search(r"<title>SMOKE: 1 MUST not met</title>", chart), chart[:2000]
    assert re.search(r"<title>MOD: 1 MUST not met</title>", chart), chart[:2000]


@pytest.mark.slow
def test_the_bisection_command_clears_the_blocker(planted: tuple[Path, str],
                                                  tmp_path: Path) -> None:
    out, _ = planted
    x = load_report(out)["blockers"]["items"][0]
    env_part, _, cmd = x["bisect"].partition(" ")
    args = shlex.split(cmd)
    assert args[:2] == ["torchfl-conformance", "run"], args
    args[args.index("--report") + 1] = str(tmp_path / "bisect")
    name, value = env_part.split("=", 1)
    r = run_cli(*args[1:], env=cli_env(**PLANTED_ENV, **{name: value}))
    got = outcomes_of(load_report(tmp_path / "bisect"))
    assert got == {x["test"]: "PASS"}, (got, r.stdout[-3000:])
    assert json.loads((tmp_path / "bisect" / "report.json").read_text())["blockers"]["level"] \
        == "L0"  # a one-test run leaves the rest of L0 untested, which the report says
