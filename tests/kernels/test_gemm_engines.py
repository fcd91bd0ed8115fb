"""flemu's float32 GEMMs run on oneDNN's matmul, float64 ones (and float32
with FLEMU_DNNL=0) on OpenBLAS, and flemu keeps its own blocked GEMM for what
neither expresses (FLEMU_BLAS=0 too). Every engine must agree with the CPU on
every operand layout that maps differently onto a library call: row-major,
transposed, row strides wider than a row, size-1 dimensions with arbitrary
strides, no unit stride at all (the blocked GEMM), an empty inner dimension,
addmm's beta (0 must not read NaN in self) and alpha, its self as a bias
broadcast by rows, by columns or not at all, strided outputs,
batched products with transposed, broadcast (zero batch stride) and scaled
operands, and products large enough to split over the thread pool, by rows,
by columns or by batch. oneDNN's trace (ONEDNN_VERBOSE) shows which engine
ran: only flemu computes in the subprocess."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support import assert_ok, flemu_with_run_path, run_python

# Runs in a fresh process per engine: FLEMU_BLAS is read when the plugin initializes.
_CASES = r"""
import json, torch, torch_fl
g = torch.Generator().manual_seed(0)
def r(*s, dtype=torch.float32):
    return torch.randn(*s, generator=g, dtype=dtype)
cases = {
    "nn": (r(7, 5), r(5, 9)),
    "tn": (r(5, 7).t(), r(5, 9)),
    "nt": (r(7, 5), r(9, 5).t()),
    "tt": (r(5, 7).t(), r(9, 5).t()),
    "wide_rows": (r(7, 12)[:, 2:7], r(5, 20)[:, 3:12]),
    "row_vector_odd_stride": (r(1, 40)[:, ::8], r(5, 3)),
    "column_vector": (r(6, 1), r(1, 4)),
    "no_unit_stride": (r(14, 10)[::2, ::2], r(10, 18)[::2, ::2]),
    "empty_inner": (r(4, 0), r(0, 3)),
    "split_over_threads": (r(300, 200), r(200, 160)),
    "split_by_columns": (r(20, 300), r(300, 900)),
    "float64": (r(33, 17, dtype=torch.float64), r(17, 21, dtype=torch.float64).t().contiguous().t()),
}
errs = {}
for name, (a, b) in cases.items():
    got = (a.to("flemu") @ b.to("flemu")).cpu()
    errs[name] = float((got - a @ b).abs().max()) if got.numel() else 0.0
self_nan = torch.full((7, 9), float("nan"))
a, b = cases["nn"]
errs["addmm_beta0_nan"] = float((torch.addmm(self_nan.to("flemu"), a.to("flemu"), b.to("flemu"), beta=0).cpu()
                                 - a @ b).abs().max())
bias = r(9)
errs["addmm_beta_alpha"] = float((torch.addmm(bias.to("flemu"), a.to("flemu"), b.to("flemu"), beta=0.5, alpha=2)
                                  .cpu() - torch.addmm(bias, a, b, beta=0.5, alpha=2)).abs().max())
# addmm with beta and alpha 1 adds self as a bias: broadcast as one row (nn.Linear's),
# one column, one element, or a full matrix (strided too), in one call and split over the pool.
a_big, b_big = r(300, 200), r(200, 160)
for name, (s_, x, y) in {
    "addmm_row_bias": (r(9), a, b), "addmm_column_bias": (r(7, 1), a, b), "addmm_scalar_bias": (r(1), a, b),
    "addmm_full_self": (r(7, 9), a, b), "addmm_strided_self": (r(9, 7).t(), a, b),
    "addmm_row_bias_split": (r(160), a_big, b_big), "addmm_column_bias_split": (r(300, 1), a_big, b_big),
    "addmm_row_bias_split_by_columns": (r(900), *cases["split_by_columns"]),
}.items():
    errs[name] = float((torch.addmm(s_.to("flemu"), x.to("flemu"), y.to("flemu")).cpu()
                        - torch.addmm(s_, x, y)).abs().max())
out = torch.zeros(9, 7).to("flemu").t()  # a transposed output
torch.mm(a.to("flemu"), b.to("flemu"), out=out)
errs["strided_out"] = float((out.cpu() - a @ b).abs().max())
x, y = r(6, 8, 5).transpose(1, 2), r(6, 8, 4)
errs["bmm_transposed"] = float((torch.bmm(x.to("flemu"), y.to("flemu")).cpu() - torch.bmm(x, y)).abs().max())
x, y = r(1, 7, 5), r(4, 5, 3)  # x broadcast on the device: batch stride 0
errs["bmm_broadcast_batch"] = float((torch.bmm(x.to("flemu").expand(4, 7, 5), y.to("flemu")).cpu()
                                     - torch.bmm(x.expand(4, 7, 5), y)).abs().max())
x, y, s = r(40, 64, 32), r(40, 32, 48), r(40, 64, 48)
errs["bmm_split_over_threads"] = float((torch.bmm(x.to("flemu"), y.to("flemu")).cpu() - torch.bmm(x, y)).abs().max())
errs["baddbmm_alpha"] = float((torch.baddbmm(s.to("flemu"), x.to("flemu"), y.to("flemu"), beta=0, alpha=3).cpu()
                              - 3 * torch.bmm(x, y)).abs().max())
print(json.dumps(errs))
"""


ENGINES = {"onednn": {"FLEMU_DNNL": "1", "FLEMU_BLAS": "1"}, "openblas": {"FLEMU_DNNL": "0", "FLEMU_BLAS": "1"},
           "blocked": {"FLEMU_DNNL": "0", "FLEMU_BLAS": "0"}}


@pytest.fixture(scope="module", params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> tuple[str, str]:
    env = {**ENGINES[request.param], "ONEDNN_VERBOSE": "1", "TORCH_FL_FALLBACK": "error"}
    return request.param, assert_ok(run_python(_CASES, env=env))


@pytest.fixture(scope="module")
def errors(engine: tuple[str, str]) -> dict[str, float]:
    return json.loads(engine[1].strip().splitlines()[-1])


def test_the_engine_that_ran_is_the_one_asked_for(engine: tuple[str, str]) -> None:
    name, stdout = engine
    traced = [line for line in stdout.splitlines() if ",exec," in line and ",matmul," in line]
    if name != "onednn":
        assert not traced, traced[:3]
        return
    # Every float32 case but the empty product and the broadcast batch (a
    # zero batch stride) reaches oneDNN; large ones in one call per part.
    assert len(traced) >= 13, traced
    # addmm with beta and alpha 1 hands self to oneDNN as the matmul's bias:
    # the eight bias cases, the three large ones in two parts each.
    assert sum(" bia_f32:" in line for line in traced) >= 11, traced


@pytest.mark.parametrize("case", [
    "nn", "tn", "nt", "tt", "wide_rows", "row_vector_odd_stride", "column_vector", "no_unit_stride",
    "empty_inner", "split_over_threads", "split_by_columns", "float64", "addmm_beta0_nan",
    "addmm_beta_alpha", "addmm_row_bias", "addmm_column_bias", "addmm_scalar_bias", "addmm_full_self",
    "addmm_strided_self", "addmm_row_bias_split", "addmm_column_bias_split", "addmm_row_bias_split_by_columns",
    "strided_out", "bmm_transposed", "bmm_broadcast_batch", "bmm_split_over_threads",
    "baddbmm_alpha",
])
def test_engine_matches_the_cpu(errors: dict[str, float], case: str) -> None:
    assert errors[case] <= 1e-4, f"{case}: max |flemu - cpu| = {errors[case]}"


def test_a_malformed_switch_names_the_variable() -> None:
    proc = run_python("import torch; torch.ones(1, device='flemu')", env={"FLEMU_BLAS": "maybe"})
    assert proc.returncode != 0
    assert "FLEMU_BLAS" in proc.stderr and "maybe" in proc.stderr, proc.stderr[-2000:]


def test_a_missing_openblas_is_named_and_flemu_survives(tmp_path: Path) -> None:
    # flemu loads OpenBLAS at its first GEMM that needs it (not at import): a copy
    # of the library whose run path finds oneDNN but not OpenBLAS loads,
    # registers and adds; its first float64 product fails with an error that
    # names the wheel and the switch; with FLEMU_BLAS=0 flemu's own GEMM runs it.
    copy = flemu_with_run_path(tmp_path, Path(sys.prefix) / "lib")
    code = """
import torch, torch_fl
print("add", (torch.ones(3, device="flemu") + 1).sum().item())
a = torch.arange(12, dtype=torch.float64).reshape(3, 4)
try:
    got = (a.to("flemu") @ a.t().to("flemu")).cpu()
    print("gemm", torch.equal(got, a @ a.t()))
except Exception as e:
    print("gemm failed:", e)
print("still alive", (torch.ones(2, device="flemu") * 3).sum().item())
"""
    out = assert_ok(run_python(code, env={"FLEMU_LIBRARY": str(copy)}))
    assert "add 6.0" in out and "still alive 6.0" in out, out
    assert "gemm failed" in out and "OpenBLAS" in out and "scipy-openblas32" in out, out
    assert "FLEMU_BLAS=0" in out, out
    out = assert_ok(run_python(code, env={"FLEMU_LIBRARY": str(copy), "FLEMU_BLAS": "0"}))
    assert "gemm True" in out, out
