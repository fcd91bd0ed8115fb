"""flemu states the schema of every kernel it registers (TFL_KernelDesc.schema).

kernel_schemas.h is generated from kernel_table.h under the torch release the
project builds against; a kernel added to the table without regenerating it,
or a table edit that changes an op's name, fails here with the command to run.
"""
from __future__ import annotations

from pathlib import Path

from support import load_module

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "reference_backend" / "tools" / "kernel_schemas.py"


def _tool():
    return load_module(TOOL)


def test_kernel_schemas_header_is_current() -> None:
    tool = _tool()
    ops = tool.table_ops()
    assert len(ops) > 150 and "aten::add.Tensor" in ops and not any(
        op.startswith("flemu::") for op in ops), ops[:5]
    assert tool.HEADER.read_text() == tool.render(ops), (
        "reference_backend/src/kernels/kernel_schemas.h is stale; run "
        "`python reference_backend/tools/kernel_schemas.py` and rebuild flemu")


def test_every_schema_parses_back_to_the_running_schema() -> None:
    import torch

    tool = _tool()
    for op in tool.table_ops():
        stated = tool.running_schema(op)
        parsed = torch._C.parse_schema(stated)
        assert str(parsed) == stated, op
