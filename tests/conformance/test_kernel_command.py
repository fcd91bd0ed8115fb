"""`torchfl-conformance kernel OP`: one operator's every dtype, sample and variant,
with a verdict per dtype and variant, on flemu and on flemu with a planted bug
(FLEMU_FAULT) in exactly one variant of one kernel."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import cli_env, run_cli
from torch_fl_conformance import kernel_check
from torch_fl_conformance.tolerances import tolerance

pytestmark = pytest.mark.slow

FLOATS = ("float32", "float64", "float16", "bfloat16")
GRADS = ("grad", "noncontiguous_grad")


def kernel(*args: str, fault: str = "") -> tuple[int, dict[str, Any], str]:
    env = cli_env(**({"FLEMU_FAULT": fault} if fault else {}))
    r = run_cli("kernel", *args, "--plugin", "flemu", "--json", env=env, timeout=300)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        pytest.fail(f"no JSON from kernel {args} (status {r.returncode}):\n{r.stdout}\n"
                    f"{r.stderr}")
    return r.returncode, out, r.stdout + r.stderr


def verdicts(out: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["dtype"], row["variant"]): row for row in out["rows"]}


@pytest.fixture(scope="module")
def clean_add(flemu_library: str) -> tuple[int, dict[str, Any], str]:
    return kernel("add")


def test_every_dtype_and_variant_of_add_passes_on_flemu(
        clean_add: tuple[int, dict[str, Any], str]) -> None:
    code, out, text = clean_add
    assert code == 0, text
    rows = verdicts(out)
    dtypes = ("float32", "float64", "float16", "bfloat16", "int64", "bool")
    expected = {(d, v) for d in dtypes for v in kernel_check.CHECKS}
    assert set(rows) == expected, sorted(set(rows) ^ expected)
    for (dtype, variant), row in rows.items():
        if variant in GRADS and dtype not in FLOATS:
            assert row["verdict"] == "SKIP" and "no gradient" in row["message"], row
            continue
        assert row["verdict"] == "PASS", row
        assert row["samples"] > 0 and row["how"] == "native", row
        if variant not in GRADS:  # the backward of add is mul and sum, not add
            assert any(k.startswith(("aten::add.", "aten::add_.")) for k in row["kernels"]), row
    row = rows[("float32", "output")]
    bound = tolerance("float32", "output", "add")
    assert bound is not None and f"atol={bound.atol:g} rtol={bound.rtol:g}" in row["tolerance"]
    assert 0 <= row["max_abs"] < 1e-3 and row["samples"] >= 8, row  # measured, within the ceiling
    assert rows[("int64", "output")]["tolerance"] == "exact", rows[("int64", "output")]
    assert out["summary"]["failed"] == 0, out["summary"]


# Faults of flemu confined to one call form of one kernel (every sample of every other
# form is right), in every dtype the kernel takes.
@pytest.mark.parametrize(("fault", "op", "variant"), [
    ("add_inplace_aliasing", "add", "inplace"),
    ("mul_out_ignored", "mul", "out"),
])
def test_a_planted_bug_fails_exactly_its_variant(fault: str, op: str, variant: str,
                                                 flemu_library: str) -> None:
    code, out, text = kernel(op, "--dtypes", "float32,int64", fault=fault)
    assert code == 1, text
    rows = verdicts(out)
    failing = {k for k, row in rows.items() if row["verdict"] != "PASS"
               and not (row["verdict"] == "SKIP" and k[1] in GRADS and k[0] == "int64")}
    assert failing == {("float32", variant), ("int64", variant)}, (failing, text)
    row = rows[("float32", variant)]
    assert row["verdict"] == "FAIL" and row["message"].startswith(variant[:5]), row
    assert row["tolerance"].startswith("atol=") and row["samples"] > 0, row
    assert rows[("int64", variant)]["tolerance"] == "exact"


def test_a_fallback_is_not_native_never_a_pass(flemu_library: str) -> None:
    # flemu's mm takes floating dtypes only: int64 runs on the CPU fallback.
    code, out, text = kernel("mm", "--dtypes", "int64")
    assert code == 0, text
    rows = verdicts(out)
    ran = {k: row for k, row in rows.items() if row["verdict"] != "SKIP"}
    assert ran and all(row["verdict"] == kernel_check.NOT_NATIVE for row in ran.values()), rows
    assert all("CPU fallback" in row["message"] and row["how"] == "fallback"
               for row in ran.values()), ran
    code, out, text = kernel("mm", "--dtypes", "int64", "--require-native")
    assert code == 1, text


def test_aten_names_select_the_same_entry(flemu_library: str) -> None:
    assert kernel_check.resolve("add").entries == ["add"]
    assert kernel_check.resolve("aten::add").entries == ["add"]
    assert kernel_check.resolve("aten::add.Tensor").entries == ["add"]
    assert kernel_check.resolve("aten::add_.Tensor").entries == ["add"]
    assert kernel_check.resolve("relu").entries == ["nn.functional.relu"]
    # An overload picks the op_db entries whose samples call it.
    assert kernel_check.resolve("aten::max.dim").entries == ["max.reduction_with_dim"]
    with pytest.raises(kernel_check.KernelUsageError, match="softmax"):
        kernel_check.resolve("aten::_softmax")
    code, out, text = kernel("aten::add.Tensor", "--dtypes", "float32")
    assert code == 0 and out["entries"] == ["add"], text
    assert {row["verdict"] for row in out["rows"]} == {"PASS"}, out["rows"]
    r = run_cli("kernel", "aten::no_such_op", "--plugin", "flemu")
    assert r.returncode == 2 and "no_such_op" in r.stderr and "op_db" in r.stderr, r.stderr


def test_a_crash_costs_its_case_only(flemu_library: str) -> None:
    code, out, text = kernel("mm", "--dtypes", "float32,int64", "--samples", "2",
                             fault="mm_crash")
    assert code == 1, text
    rows = verdicts(out)
    crash = rows[("float32", kernel_check.ALL)]
    assert crash["verdict"] == "CRASH" and "aten::mm" in crash["kernels"], crash
    assert "SIGABRT" in crash["message"], crash
    assert rows[("int64", "output")]["verdict"] == kernel_check.NOT_NATIVE, rows


def test_a_hang_is_a_timeout_and_blocks_the_kernel(flemu_library: str) -> None:
    code, out, text = kernel("mm", "--dtypes", "float32,float64", "--samples", "1",
                             "--timeout", "5", fault="mm_hang")
    assert code == 1, text
    rows = verdicts(out)
    assert rows[("float32", kernel_check.ALL)]["verdict"] == "TIMEOUT", rows
    assert "aten::mm" in rows[("float32", kernel_check.ALL)]["kernels"], rows
    blocked = rows[("float64", kernel_check.ALL)]
    assert blocked["verdict"] == "BLOCKED" and "aten::mm" in blocked["message"], blocked
    assert out["summary"]["wall_s"] < 120, out["summary"]


def test_text_output_names_the_failing_variant(flemu_library: str) -> None:
    r = run_cli("kernel", "mul", "--plugin", "flemu", "--dtypes", "float32", "--samples", "3",
                env=cli_env(FLEMU_FAULT="mul_out_ignored"))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("mul float32")]
    failing = [ln.split()[2] for ln in lines if " FAIL " in ln]
    assert failing == ["out"], r.stdout
    assert "fail 1" in r.stdout and "out= (" in r.stdout, r.stdout
