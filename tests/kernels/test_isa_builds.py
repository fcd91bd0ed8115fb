"""flemu's elementwise loops are built for baseline x86-64 and for AVX2
(kernels/support/isa.h) and take the AVX2 build when the CPU has it;
FLEMU_ISA=baseline forces the other. Neither build contracts or reassociates,
so every elementwise kernel must give the same bits under both, on dense,
strided and broadcast operands, in every dtype, on the single-thread and the
split-over-threads paths."""

from __future__ import annotations

import json

import pytest
from support import assert_ok, run_python

_OPS = r"""
import hashlib, json, torch, torch_fl
import torch.nn.functional as F
torch_fl.set_fallback_mode("error")
g = torch.Generator().manual_seed(0)
unary = {
    "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "relu": torch.relu,
    "neg": torch.neg, "abs": torch.abs, "sqrt_abs": lambda t: torch.sqrt(t.abs()),
    "log_softmax": lambda t: torch.log_softmax(t, -1), "softmax": lambda t: torch.softmax(t, -1),
    "mul_scalar": lambda t: t * 0.37, "clamp": lambda t: t.clamp(-0.5, 0.7),
}
binary = {
    "add": torch.add, "mul": torch.mul, "div": torch.div, "sub_alpha": lambda a, b: torch.sub(a, b, alpha=0.3),
    "maximum": torch.maximum, "gelu_backward": lambda a, b: torch.ops.aten.gelu_backward(a, b),
    "threshold_backward": lambda a, b: torch.ops.aten.threshold_backward(a, b, 0.0),
    "where": lambda a, b: torch.where(a > b, a, b),
}
out = {}
for dtype in (torch.float32, torch.bfloat16, torch.float64):
    for size in ((37, 53), (512, 600)):  # one thread; split over the pool
        base = torch.randn(size[1], size[0], generator=g).to(dtype)
        other = torch.randn(size, generator=g).to(dtype)
        row = torch.randn(size[1], generator=g).to(dtype)
        dev = {"dense": other.to("flemu"), "strided": base.to("flemu").t(), "row": row.to("flemu")}
        for name, fn in unary.items():
            for layout in ("dense", "strided"):
                t = fn(dev[layout]).cpu()
                out[f"{name}-{dtype}-{size[0]}-{layout}"] = hashlib.sha256(
                    t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
        for name, fn in binary.items():
            for a, b in (("dense", "strided"), ("strided", "row")):
                t = fn(dev[a], dev[b]).cpu()
                out[f"{name}-{dtype}-{size[0]}-{a}-{b}"] = hashlib.sha256(
                    t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
print(json.dumps(out))
"""


def _run(isa: str | None) -> dict[str, str]:
    proc = run_python(_OPS, env={"FLEMU_ISA": isa} if isa else {}, timeout=300)
    return json.loads(assert_ok(proc).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hashes() -> tuple[dict[str, str], dict[str, str]]:
    return _run("baseline"), _run(None)


def test_every_case_ran(hashes) -> None:  # noqa: ANN001
    baseline, chosen = hashes
    assert baseline.keys() == chosen.keys() and len(baseline) == 3 * 2 * (14 * 2 + 8 * 2)


def test_both_builds_give_the_same_bits(hashes) -> None:  # noqa: ANN001
    baseline, chosen = hashes
    differ = sorted(k for k in baseline if baseline[k] != chosen[k])
    assert not differ, f"{len(differ)} cases differ between flemu's ISA builds: {differ[:12]}"
