"""flemu's vectorizable float32 exp, exp2, erf, atan, asin, acos, log, log2,
log1p, sin and cos (support/fast_math.h, used by their kernels, gelu,
softmax and fused regions; trig_array and log_array, the forms over many
values, give the one-value forms' bits), and the functions it evaluates in
double (support/double_math.h: tan, expm1, log10, sinh, cosh, atanh, asinh,
acosh, logit, softplus, mish and its gradient, elu), against libm in double
over their whole ranges (built from the headers alone)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path


def test_fast_math_against_libm(build_program: Callable[..., Path]) -> None:
    # Optimized as flemu builds its users (CMakeLists.txt): the loops vectorize, the values must not change.
    binary = build_program("fast_math_check", ("-O3", "-fno-trapping-math"))
    # About 70 s of CPU on an AVX-512 Xeon, 140 s on an AVX2 EPYC (the baseline build's
    # fused multiply-adds are libm calls): the timeout only guards against a hang.
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.strip().endswith("checks, 0 failures"), proc.stdout
