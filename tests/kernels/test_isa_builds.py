"""flemu's elementwise loops, softmax rows, attention heads, dense dropout,
fused optimizer steps and fused-region executor are built for baseline
x86-64, AVX2 and AVX-512 (kernels/support/isa.h) and take the widest build
the CPU runs; FLEMU_ISA caps it. No build contracts or reassociates, so every
kernel here and every compiled region must give the same bits under each
build this CPU runs, on dense, strided and broadcast operands, in every
dtype, on the single-thread and the split-over-threads paths; compiled
regions must also match eager execution (for bfloat16: eager in float32,
which is how a region computes it before rounding its outputs once)."""

from __future__ import annotations

import json

import pytest
from support import assert_ok, run_python

_OPS = r"""
import hashlib, json, torch, torch_fl
import torch.nn.functional as F
torch_fl.set_fallback_mode("error")
g = torch.Generator().manual_seed(0)

def digest_of(*ts):
    d = hashlib.sha256()
    for t in ts:
        d.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return d.hexdigest()

unary = {
    "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "relu": torch.relu,
    "neg": torch.neg, "abs": torch.abs, "sqrt_abs": lambda t: torch.sqrt(t.abs()),
    "log_softmax": lambda t: torch.log_softmax(t, -1), "softmax": lambda t: torch.softmax(t, -1),
    "mul_scalar": lambda t: t * 0.37, "clamp": lambda t: t.clamp(-0.5, 0.7),
    "dropout": lambda t: (torch.manual_seed(5), torch.native_dropout(t, 0.4, True)[0])[1],
    "expm1": torch.expm1, "atan": torch.atan, "tan": torch.tan, "mish": F.mish, "elu": F.elu,
    "softplus": F.softplus, "log2_abs": lambda t: torch.log2(t.abs()),
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
                out[f"{name}-{dtype}-{size[0]}-{layout}"] = digest_of(fn(dev[layout]))
        for name, fn in binary.items():
            for a, b in (("dense", "strided"), ("strided", "row")):
                out[f"{name}-{dtype}-{size[0]}-{a}-{b}"] = digest_of(fn(dev[a], dev[b]))
    # Fused attention, forward and backward (heads split over the pool).
    q, k, v = (torch.randn(2, 3, 37, 16, generator=g).to(dtype).to("flemu").requires_grad_() for _ in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grads = torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
    for name, t in zip(("sdpa", "sdpa_dq", "sdpa_dk", "sdpa_dv"), (o, *grads)):
        out[f"{name}-{dtype}"] = digest_of(t)
    # Normalization, forward and backward, one thread and split over the
    # pool: batch norm over short runs (4x4 maps), long ones and channels-last
    # (strided runs), layer norm and group norm.
    for name, shape, cl in (("bn_4x4", (8, 16, 4, 4), False), ("bn_big", (4, 32, 40, 40), False),
                            ("bn_cl", (2, 8, 9, 9), True)):
        x = torch.randn(shape, generator=g).to(dtype).to("flemu")
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_()
        c = shape[1]
        w, b = (torch.randn(c, generator=g).to(dtype).to("flemu").requires_grad_() for _ in range(2))
        rm, rv = torch.zeros(c, dtype=dtype, device="flemu"), torch.ones(c, dtype=dtype, device="flemu")
        y = F.batch_norm(x, rm, rv, w, b, training=True)
        grads = torch.autograd.grad(y, (x, w, b), torch.randn(shape, generator=g).to(dtype).to("flemu"))
        out[f"{name}-{dtype}"] = digest_of(y, *grads, rm, rv)
    for name, fn, shape, pshape in (
            ("ln", lambda x, w, b: F.layer_norm(x, (300,), w, b), (37, 300), (300,)),
            ("ln_long", lambda x, w, b: F.layer_norm(x, (5000,), w, b), (6, 5000), (5000,)),
            ("gn", lambda x, w, b: F.group_norm(x, 4, w, b), (3, 8, 13, 17), (8,))):
        x = torch.randn(shape, generator=g).to(dtype).to("flemu").requires_grad_()
        w, b = (torch.randn(pshape, generator=g).to(dtype).to("flemu").requires_grad_() for _ in range(2))
        y = fn(x, w, b)
        grads = torch.autograd.grad(y, (x, w, b), torch.randn(shape, generator=g).to(dtype).to("flemu"))
        out[f"{name}-{dtype}"] = digest_of(y, *grads)
    # Fused optimizer steps: parameters and state after three steps, one
    # tensor on one thread and one split over the pool.
    shapes = ((37, 53), (300, 700))
    params = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    grads = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    optimizers = {
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01, fused=True),
        "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, maximize=True,
                                                    fused=True),
        "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True,
                                                   weight_decay=1e-3, fused=True),
    }
    for name, make in optimizers.items():
        ps = [p.to("flemu").requires_grad_() for p in params]
        for p, grad in zip(ps, grads):
            p.grad = grad.to("flemu")
        opt = make(ps)
        for _ in range(3):
            opt.step()
        out[f"{name}-{dtype}"] = digest_of(*ps, *(v for st in opt.state.values() for v in st.values()))
print(json.dumps(out))
"""


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


def _builds() -> list[str]:
    """The FLEMU_ISA builds this CPU runs, baseline first."""
    flags: set[str] = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    builds = ["baseline"]
    if "avx2" in flags:
        builds.append("avx2")
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        builds.append("avx512")
    return builds


def _under_each(script: str) -> dict[str, dict]:
    """The script's JSON under each build the CPU runs, and under auto."""
    runs = {}
    for build in [*_builds(), "auto"]:
        proc = run_python(script, env={"FLEMU_ISA": build}, timeout=300)
        runs[build] = json.loads(assert_ok(proc).strip().splitlines()[-1])
    return runs


def test_the_builds_this_cpu_runs_are_all_compared() -> None:
    # The tests below compare every build /proc/cpuinfo says this CPU runs
    # (the project's hosts: AVX-512 Xeons and AVX2 EPYCs). flemu's own
    # detection must agree: the widest of them runs, and the next wider one
    # is refused with the widest named.
    builds = _builds()
    assert builds[0] == "baseline"
    widest = builds[-1]
    ran = run_python("import torch, torch_fl; print(torch.ones(3, device='flemu').add(1).sum().item())",
                     env={"FLEMU_ISA": widest})
    assert assert_ok(ran).strip().splitlines()[-1] == "6.0"
    wider = {"baseline": "avx2", "avx2": "avx512"}.get(widest)
    if wider is not None:
        refused = run_python("import torch_fl, torch", env={"FLEMU_ISA": wider})
        assert f"FLEMU_ISA={wider} asks for a build this CPU cannot run (its widest is {widest})" in refused.stderr, (
            refused.stderr[-2000:])


def test_an_unknown_build_is_refused_with_the_choices() -> None:
    proc = run_python("import torch_fl, torch", env={"FLEMU_ISA": "sse9"})
    assert "invalid FLEMU_ISA='sse9': expected auto, baseline, avx2 or avx512" in proc.stderr, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def hashes() -> dict[str, dict[str, str]]:
    return _under_each(_OPS)


@pytest.fixture(scope="module")
def regions() -> dict[str, dict[str, dict]]:
    return _under_each(_REGIONS)


def test_every_case_ran(hashes) -> None:  # noqa: ANN001
    baseline = hashes["baseline"]
    assert len(baseline) == 3 * (2 * (22 * 2 + 8 * 2) + 4 + 6 + 3)
    assert all(run.keys() == baseline.keys() for run in hashes.values())


def test_every_build_gives_the_same_bits(hashes) -> None:  # noqa: ANN001
    baseline = hashes["baseline"]
    for build, run in hashes.items():
        differ = sorted(k for k in baseline if baseline[k] != run[k])
        assert not differ, f"{len(differ)} cases differ between the baseline and {build} builds: {differ[:12]}"


def test_every_build_runs_compiled_regions_alike(regions) -> None:  # noqa: ANN001
    baseline = regions["baseline"]
    assert len(baseline) == 6
    for build, run in regions.items():
        differ = [c for c in baseline if baseline[c]["sha256"] != run[c]["sha256"]]
        assert not differ, f"the fused executor's baseline and {build} builds disagree on {differ}"


def test_compiled_regions_match_eager(regions) -> None:  # noqa: ANN001
    for build, run in regions.items():
        for case, r in run.items():
            limit = 8e-3 if "bfloat16" in case else 1e-5
            assert r["err"] <= limit, f"{build}: {case}: relative error {r['err']:.3g} against eager"
