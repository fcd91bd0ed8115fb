"""The kernel table of libflcuda.so, read through Kernels_List without a GPU:
schemas that match the running PyTorch, and flags and dtypes within what the
kernels handle."""

from __future__ import annotations

import pytest
import torch
from cuda_plugin_project import BuiltPlugin, PluginLibrary

# TFL_KernelFlags (sdk/include/torch_fl/kernel.h).
CONTIGUOUS_INPUTS, BROADCAST_INPUTS, PROMOTE_INPUTS = 1, 2, 4
CONTIGUOUS_OUTPUTS, HOST_SCALARS, RANDOM, NO_DERIVED_VARIANTS = 8, 16, 32, 64
KNOWN_FLAGS = 127
# TFL_DType values the kernels load and store (bool .. float64, no complex).
HANDLED_DTYPES = sum(1 << d for d in range(10))
FLOAT32 = 1 << 8


@pytest.fixture(scope="module")
def kernels(flcuda_build: BuiltPlugin) -> list[dict[str, object]]:
    return [
        {"op": k.op.decode(), "schema": k.schema.decode() if k.schema else None, "dtypes": k.dtypes,
         "flags": k.flags, "fn": k.fn}
        for k in PluginLibrary(flcuda_build.library).kernels()
    ]


def aten_schema(op: str) -> str:
    name = op.split("::", 1)[1]
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base)
    return str(getattr(packet, overload or "default")._schema)


def test_the_table_covers_the_training_ops(kernels: list[dict[str, object]]) -> None:
    ops = {k["op"] for k in kernels}
    needed = {"aten::mm", "aten::addmm", "aten::bmm", "aten::convolution", "aten::convolution_backward",
              "aten::native_batch_norm", "aten::native_batch_norm_backward", "aten::native_layer_norm",
              "aten::native_layer_norm_backward", "aten::_log_softmax", "aten::nll_loss_forward",
              "aten::embedding", "aten::embedding_dense_backward", "aten::max_pool2d_with_indices",
              "aten::copy_", "aten::_fused_adamw_", "aten::gelu_backward", "aten::threshold_backward"}
    assert needed <= ops, f"missing: {sorted(needed - ops)}"
    assert len(ops) == len(kernels), "an operator is listed twice"


def test_every_schema_matches_the_running_pytorch(kernels: list[dict[str, object]]) -> None:
    mismatched = {}
    for k in kernels:
        assert k["schema"] is not None, f"{k['op']} states no schema"
        assert str(k["schema"]).startswith(str(k["op"]) + "("), (k["op"], k["schema"])
        running = aten_schema(str(k["op"]))
        if running != k["schema"]:
            mismatched[k["op"]] = (k["schema"], running)
    assert mismatched == {}, f"torch {torch.__version__}: {mismatched}"


def test_flags_and_dtypes_are_within_what_the_kernels_handle(kernels: list[dict[str, object]]) -> None:
    for k in kernels:
        flags, dtypes = int(k["flags"]), int(k["dtypes"])
        assert k["fn"], f"{k['op']} has no entry point"
        assert flags & ~KNOWN_FLAGS == 0, (k["op"], flags)
        assert bool(flags & RANDOM) == (k["op"] == "aten::native_dropout"), (k["op"], flags)
        assert dtypes and dtypes & ~HANDLED_DTYPES == 0, (k["op"], hex(dtypes))
        assert dtypes & FLOAT32, f"{k['op']} does not take float32"


def test_in_place_by_name_ops_register_no_derived_variants(kernels: list[dict[str, object]]) -> None:
    for k in kernels:
        name = str(k["op"]).split("::")[1].split(".")[0]
        by_name = name.endswith("_") and name != "copy_"
        assert bool(int(k["flags"]) & NO_DERIVED_VARIANTS) == by_name, (k["op"], k["flags"])


def test_dense_kernels_declare_dense_outputs_too(kernels: list[dict[str, object]]) -> None:
    # A kernel that indexes its inputs as dense row-major indexes its outputs the
    # same way: strided out= or in-place targets must reach it as temporaries.
    for k in kernels:
        flags = int(k["flags"])
        if flags & CONTIGUOUS_INPUTS:
            assert flags & CONTIGUOUS_OUTPUTS, (k["op"], flags)
