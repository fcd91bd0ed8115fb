"""Custom operators a plugin declares (TFL_CustomOpDesc): defined with
torch.library in the plugin's namespace, served by its kernels, and wired into
autograd through its backward kernel."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["register_custom_ops"]

_libraries: list[torch.library.Library] = []


def _declaration(arg: Any) -> str:
    return f"{arg.type} {arg.name}"


def _register_one(index: int, desc: dict[str, Any]) -> str:
    from torch_fl import _C

    schema = torch._C.parse_schema(desc["schema"])
    ns, opname = schema.name.split("::", 1)
    lib = torch.library.Library(ns, "FRAGMENT")
    _libraries.append(lib)
    lib.define(desc["schema"].split("::", 1)[1])
    qualname = f"{ns}::{opname}"
    like = list(desc["output_like"])
    _C.register_custom_kernel(qualname, index, False, like)

    def fake(*args: Any, **kwargs: Any) -> Any:
        outs = [torch.empty_like(args[i], memory_format=torch.contiguous_format) for i in like]
        return outs[0] if len(outs) == 1 else tuple(outs)

    # A Meta kernel serves FakeTensor and torch.compile as register_fake would,
    # without register_fake's source lookup (milliseconds inside `import torch`).
    lib.impl(opname, fake, "Meta")
    if not desc["has_backward"]:
        return qualname

    n_out = len(like)
    tensor_args = [i for i, a in enumerate(schema.arguments) if str(a.type) == "Tensor"]
    params = (
        [f"Tensor? grad_{j}" for j in range(n_out)]
        + [_declaration(a) for a in schema.arguments]
        + [f"Tensor out_{j}" for j in range(n_out)]
    )
    rets = "Tensor" if len(tensor_args) == 1 else "(" + ", ".join(["Tensor"] * len(tensor_args)) + ")"
    lib.define(f"{opname}_backward({', '.join(params)}) -> {rets}")
    bwd_name = f"{ns}::{opname}_backward"
    bwd_like = [n_out + i for i in tensor_args]
    _C.register_custom_kernel(bwd_name, index, True, bwd_like)

    def fake_backward(*args: Any, **kwargs: Any) -> Any:
        outs = [torch.empty_like(args[i], memory_format=torch.contiguous_format) for i in bwd_like]
        return outs[0] if len(outs) == 1 else tuple(outs)

    lib.impl(f"{opname}_backward", fake_backward, "Meta")
    backward_op = getattr(getattr(torch.ops, ns), f"{opname}_backward")

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.inputs = inputs
        ctx.outputs = output if isinstance(output, tuple) else (output,)

    def backward(ctx: Any, *grads: Any) -> tuple:
        result = backward_op(*grads, *ctx.inputs, *ctx.outputs)
        result = result if isinstance(result, tuple) else (result,)
        out: list[Any] = [None] * len(ctx.inputs)
        for position, grad in zip(tensor_args, result):
            out[position] = grad
        return tuple(out)

    torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)
    return qualname


def register_custom_ops(info: dict[str, Any]) -> list[str]:
    """Registers every custom op of the loaded plugin; returns their names."""
    return [_register_one(i, desc) for i, desc in enumerate(info["custom_ops"])]
