"""The CUDA plugin's host-side layout logic (strided_plan.h), compiled with the
host C++ compiler and checked on fixed layouts: how elementwise kernels walk
strided and broadcast operands, how a matrix view is handed to cuBLAS, and the
window sizes of convolution and pooling."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cuda_plugin_project import PLUGIN

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("a C++ compiler (g++) is needed for the host-logic check")
    exe = tmp_path_factory.mktemp("strided_plan") / "strided_plan_check"
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{PLUGIN / 'src' / 'kernels'}",
           str(HERE / "strided_plan_check.cpp"), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    out = {}
    for line in run.stdout.splitlines():
        record = json.loads(line)
        out[record.pop("case")] = record
    return out


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dense", {"ok": True, "ndim": 1, "numel": 24, "contiguous": True, "sizes": [24],
                   "strides": [[4], [4]]}),
        ("broadcast_bias", {"ok": True, "ndim": 2, "numel": 24, "contiguous": False, "sizes": [6, 4],
                            "strides": [[16, 4], [0, 4]]}),
        ("transposed", {"ok": True, "ndim": 2, "numel": 6, "contiguous": False, "sizes": [3, 2],
                        "strides": [[8, 4], [4, 12]]}),
        ("channels_last", {"ok": True, "ndim": 1, "numel": 120, "contiguous": True, "sizes": [120],
                           "strides": [[2], [2]]}),
        ("mixed_dtypes", {"ok": True, "ndim": 1, "numel": 6, "contiguous": True, "sizes": [6],
                          "strides": [[4], [2]]}),
        ("scalar_operand", {"ok": True, "ndim": 1, "numel": 5, "contiguous": False, "sizes": [5],
                            "strides": [[8], [0]]}),
        ("mismatch", {"ok": False}),
        ("empty", {"ok": True, "ndim": 0, "numel": 0, "contiguous": True}),
        ("sliced", {"ok": True, "ndim": 2, "numel": 6, "contiguous": False, "sizes": [2, 3],
                    "strides": [[12, 4], [20, 4]]}),
    ],
)
def test_layout_plan(cases: dict[str, dict[str, object]], name: str, expected: dict[str, object]) -> None:
    got = {key: cases[name][key] for key in expected}
    assert got == expected, f"{name}: got {got}, expected {expected}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("row_major", {"ok": True, "transposed": True, "ld": 4}),
        ("col_major", {"ok": True, "transposed": False, "ld": 3}),
        ("padded_rows", {"ok": True, "transposed": True, "ld": 8}),
        ("vector_column", {"ok": True, "transposed": True, "ld": 1}),
        ("strided_both", {"ok": False}),
    ],
)
def test_blas_operand(cases: dict[str, dict[str, object]], name: str, expected: dict[str, object]) -> None:
    got = {key: cases[name][key] for key in expected}
    assert got == expected, f"{name}: got {got}, expected {expected}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [("dense_rows", True), ("size1_any_stride", True), ("transposed_rows", False),
     ("empty_odd_strides", True), ("padded_matrix", False)],
)
def test_row_major_follows_pytorchs_contiguity(
    cases: dict[str, dict[str, object]], name: str, expected: bool
) -> None:
    # The GEMM kernels check their outputs with it: a tensor PyTorch calls
    # contiguous (which the bridge hands a CONTIGUOUS_OUTPUTS kernel) must pass.
    assert cases[name]["row_major"] is expected, (name, cases[name])


def test_window_sizes_follow_pytorch(cases: dict[str, dict[str, object]]) -> None:
    # ResNet's stem conv (224 -> 112) and max pool (112 -> 56); ceil_mode with
    # the last-window rule (5, k2 s2 -> 3; 6, k3 s3 p1 -> 3); a window larger
    # than its input -> 0.
    assert cases["windows"]["values"] == [112, 56, 3, 3, 0], cases["windows"]


def cublas_header() -> Path | None:
    """cublas_api.h of the CUDA toolkit or of an installed nvidia-cublas wheel."""
    import glob
    import sys

    nvcc = shutil.which("nvcc")
    roots = [Path(nvcc).resolve().parents[1] / "include"] if nvcc else []
    roots += [Path("/usr/local/cuda/include")]
    for entry in sys.path:
        roots += [Path(p) for p in glob.glob(f"{entry}/nvidia/*/include")]
    roots += [Path(p) for p in glob.glob(str(PLUGIN.parents[1] / ".venv*/lib/python*/site-packages/nvidia/*/include"))]
    return next((r / "cublas_api.h" for r in roots if (r / "cublas_api.h").is_file()), None)


def test_cublas_constants_match_the_header() -> None:
    import re

    header = cublas_header()
    if header is None:
        pytest.skip("no cublas_api.h on this machine (neither the CUDA toolkit's nor a cuBLAS wheel's)")
    text = header.read_text(encoding="utf-8", errors="replace")
    ours = re.findall(r"constexpr int (\w+) = (-?\d+);\s*//\s*(CUBLAS_\w+)",
                      (PLUGIN / "src" / "cublas_loader.h").read_text(encoding="utf-8"))
    assert len(ours) >= 5, ours
    for name, value, cublas_name in ours:
        m = re.search(rf"\b{cublas_name}\s*=\s*(-?\d+)", text)
        assert m is not None, f"{cublas_name} not in {header}"
        assert int(m.group(1)) == int(value), f"{name} = {value} but {header} has {cublas_name} = {m.group(1)}"
