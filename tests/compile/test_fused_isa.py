"""flemu builds its fused-region executor twice, for baseline x86-64 and for
AVX2, and picks one by the CPU at run time (FLEMU_ISA=baseline forces
the first). Neither build contracts multiplies and adds, so the two must give
the same bits for every op of the region table, every compute type, strided
and broadcast operands and regions large enough to split over threads; both
must also match eager execution (for bfloat16: eager in float32, which is
how a region computes it before rounding its outputs once)."""

from __future__ import annotations

import json

import pytest
from support import assert_ok, run_python

_REGIONS = r"""
import hashlib, json, torch, torch_fl
torch_fl.set_fallback_mode("error")
g = torch.Generator().manual_seed(0)

def f(x, y, row):
    a = torch.sigmoid(x) * y + row
    b = torch.tanh(a) - torch.exp(-x.abs()) / (1.0 + y * y)
    c = torch.where(a > b, torch.nn.functional.silu(a), torch.erf(b) * 0.5)
    d = torch.clamp(c, -1.5, 2.0) + torch.relu(-b) + torch.pow(x, 2) * 0.25
    return d, torch.sqrt(d.abs() + 1.0) * torch.log1p(a.abs()), torch.maximum(a, c)

out = {}
for dtype in (torch.float32, torch.bfloat16, torch.float64):
    for name, shape in (("small", (3, 70)), ("threads", (600, 700))):
        x = torch.randn(shape[1], shape[0], generator=g).t().to(dtype)  # transposed
        y = torch.randn(shape, generator=g).to(dtype)
        row = torch.randn(shape[1], generator=g).to(dtype)  # broadcast
        args = [t.to("flemu") if t.is_contiguous() else t.t().contiguous().to("flemu").t() for t in (x, y, row)]
        with torch.no_grad():
            got = torch.compile(f, backend="torchfl", dynamic=False)(*args)
            # A region computes bfloat16 in float32 and rounds once at its end.
            eager = f(*[a.float() for a in args]) if dtype == torch.bfloat16 else f(*args)
        digest = hashlib.sha256()
        err = 0.0
        for t, e in zip(got, eager):
            t, e = t.cpu(), e.cpu()
            digest.update(t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16
                          else t.contiguous().view(torch.int16).numpy().tobytes())
            err = max(err, float(((t.double() - e.double()).abs() / (e.double().abs() + 1)).max()))
        out[f"{dtype}-{name}"] = {"sha256": digest.hexdigest(), "err": err}
print(json.dumps(out))
"""


def _run(isa: str | None) -> dict[str, dict]:
    env = {"FLEMU_ISA": isa} if isa else {}
    proc = run_python(_REGIONS, env=env, timeout=300)
    return json.loads(assert_ok(proc).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def both() -> tuple[dict[str, dict], dict[str, dict]]:
    return _run("baseline"), _run(None)


def test_both_builds_give_the_same_bits(both) -> None:  # noqa: ANN001
    baseline, chosen = both
    assert baseline.keys() == chosen.keys()
    differ = [k for k in baseline if baseline[k]["sha256"] != chosen[k]["sha256"]]
    assert not differ, f"the fused executor's builds disagree on {differ}"


@pytest.mark.parametrize("which", [0, 1], ids=["baseline", "cpu_chosen"])
def test_each_build_matches_eager(both, which: int) -> None:  # noqa: ANN001
    for case, r in both[which].items():
        limit = 8e-3 if "bfloat16" in case else 1e-5
        assert r["err"] <= limit, f"{case}: relative error {r['err']:.3g} against eager"
