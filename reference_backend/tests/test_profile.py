"""FLEMU_PROFILE=minimal: flemu's kernel table cut to a new vendor's first
plugin, a dozen kernels with conservative flags and no custom ops or graph
compiler, so the rest of PyTorch runs through the bridge's fallback chain."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from abi_programs import describe, run

SYMBOL_DEFAULT = 0x1 | 0x2 | 0x4 | 0x8  # CONTIGUOUS_INPUTS | BROADCAST | PROMOTE | CONTIGUOUS_OUTPUTS
NO_DERIVED = 0x40
DENSE_PROMOTED = 0x1 | 0x4 | 0x8
F32, F64, I64 = 1 << 8, 1 << 9, 1 << 5
ALL = (1 << 10) - 1  # bool .. float64

MINIMAL = {
    "aten::fill_.Scalar": (F32 | F64 | I64, SYMBOL_DEFAULT | NO_DERIVED),
    "aten::zero_": (F32 | F64 | I64, SYMBOL_DEFAULT | NO_DERIVED),
    "aten::copy_": (ALL, 0),
    "aten::add.Tensor": (F32 | F64 | I64, SYMBOL_DEFAULT),
    "aten::sub.Tensor": (F32 | F64 | I64, SYMBOL_DEFAULT),
    "aten::mul.Tensor": (F32 | F64 | I64, SYMBOL_DEFAULT),
    "aten::div.Tensor": (F32 | F64 | I64, SYMBOL_DEFAULT),
    "aten::neg": (F32 | F64 | I64, SYMBOL_DEFAULT),
    "aten::relu": (F32 | F64 | I64, SYMBOL_DEFAULT),
    "aten::exp": (F32 | F64, SYMBOL_DEFAULT),
    "aten::sum.dim_IntList": (F32 | F64 | I64, DENSE_PROMOTED),
    "aten::mm": (F32 | F64, DENSE_PROMOTED),
}


@pytest.fixture(scope="session")
def runtime_check(build_program: Callable[[str], Path]) -> Path:
    return build_program("runtime_check")


def kernels(runtime_check: Path, library: str, env: dict[str, str]) -> tuple[dict, list[str]]:
    proc = run(runtime_check, library, "kernels", env)
    assert proc.returncode == 0, describe(proc)
    table = {}
    custom = []
    for line in proc.stdout.splitlines():
        kind, *rest = line.split(" ", 1)
        if kind == "kernel":
            op, dtypes, flags = rest[0].split()
            table[op] = (int(dtypes, 16), int(flags, 16))
        elif kind == "custom":
            custom.append(rest[0])
    return table, custom


def test_minimal_profile_registers_a_new_vendors_kernels(runtime_check: Path, library: str) -> None:
    table, custom = kernels(runtime_check, library, {"FLEMU_PROFILE": "minimal"})
    assert table == MINIMAL, f"minimal profile registers {table}, expected {MINIMAL}"
    assert custom == [], custom


def test_minimal_profile_is_a_filter_of_the_full_table(runtime_check: Path, library: str) -> None:
    full, custom = kernels(runtime_check, library, {})
    assert set(MINIMAL) <= set(full) and len(full) > 150, sorted(full)
    assert custom, "the full profile has flemu::scale_add"
    for op, (dtypes, _) in MINIMAL.items():
        assert dtypes & ~full[op][0] == 0, f"{op}: minimal dtypes {dtypes:#x} not within the full ones {full[op][0]:#x}"
    # FLEMU_FP64=0 removes float64 in either profile.
    no_fp64, _ = kernels(runtime_check, library, {"FLEMU_PROFILE": "minimal", "FLEMU_FP64": "0"})
    assert no_fp64["aten::mm"][0] == F32, no_fp64["aten::mm"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FLEMU_PROFILE": "tiny"}, "invalid FLEMU_PROFILE='tiny': expected full or minimal"),
        ({"FLEMU_PROFILE": "minimal", "FLEMU_FAULT": "gelu_backward_scaled"},
         "changes aten::gelu_backward, which FLEMU_PROFILE=minimal does not register"),
        ({"FLEMU_PROFILE": "minimal", "FLEMU_INJECT_CRASH": "aten::addmm"},
         "FLEMU_PROFILE=minimal does not register it"),
    ],
)
def test_minimal_profile_rejects_what_it_cannot_do(runtime_check: Path, library: str, env: dict[str, str],
                                                    expected: str) -> None:
    proc = run(runtime_check, library, "init", env)
    assert proc.returncode == 3 and expected in proc.stdout, describe(proc)


TRAIN = textwrap.dedent(
    """
    import torch, torch_fl
    torch.manual_seed(0)
    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cpu = mlp()
    dev = mlp()
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("flemu")
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    runs = [(cpu, torch.optim.SGD(cpu.parameters(), lr=0.1), x, y),
            (dev, torch.optim.SGD(dev.parameters(), lr=0.1, foreach=False), x.to("flemu"), y.to("flemu"))]
    with torch_fl.op_stats_scope() as scope:
        for _ in range(3):
            for model, opt, xs, ys in runs:
                opt.zero_grad()
                loss = ((model(xs) - ys) ** 2).mean()
                loss.backward()
                opt.step()
        torch.flemu.synchronize()
    for a, b in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
    for row in scope.table:
        print("stat", row.op, row.native, row.decomposed, row.cpu_fallback, row.failed)
    compiled = torch.compile(lambda t: (t * 2 + 1).relu(), backend="torchfl")
    t = torch.randn(64)
    torch.testing.assert_close(compiled(t.to("flemu")).cpu(), (t * 2 + 1).relu())
    print("compiled ok")
    """
)


def test_a_training_step_runs_on_the_minimal_profile(library: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEMU_")}
    env.update({"FLEMU_LIBRARY": library, "FLEMU_PROFILE": "minimal", "FLEMU_CHECK_CONTRACTS": "1",
                "TORCH_FL_FALLBACK": "silent"})
    proc = subprocess.run([sys.executable, "-c", TRAIN], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and "compiled ok" in proc.stdout, describe(proc)
    stats = {}
    for line in proc.stdout.splitlines():
        if line.startswith("stat "):
            _, op, native, decomposed, cpu, failed = line.split()
            stats[op] = (int(native), int(decomposed), int(cpu), int(failed))
    native = {op for op, s in stats.items() if s[0] > 0}
    served = {op.replace("aten::", "") for op in MINIMAL}
    served |= {name.replace(".Tensor", "_.Tensor") for name in served}  # derived in-place variants
    unexpected = {op for op in native if op.replace("aten::", "") not in served | {"_copy_from"}}
    assert not unexpected, f"ran natively outside the minimal profile: {unexpected}\n{stats}"
    assert {"aten::mm", "aten::relu", "aten::sum.dim_IntList"} <= native, stats
    fallen_back = {op for op, s in stats.items() if s[2] > 0}
    assert fallen_back, f"a linear layer's addmm must fall back: {stats}"
    assert not any(s[3] for s in stats.values()), stats
