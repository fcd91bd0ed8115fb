"""Step 1 of the fallback chain: PyTorch's own decomposition of an operator the
plugin lacks, used only when every operator it decomposes into runs natively on
the device (decided once per operator and dtype by tracing on meta tensors)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

__all__ = ["decompose", "has_decomposition", "install"]

_device_type = ""
_table: dict[str, Callable[..., Any]] | None = None
_decisions: dict[tuple[str, str], bool] = {}
# Operators the bridge serves for every plugin (views, copies, allocation).
_BRIDGE_OPS = {
    "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view",
    "aten::_reshape_alias", "aten::unfold", "aten::view_as_real", "aten::view_as_complex",
    "aten::resize_", "aten::_copy_from", "aten::_copy_from_and_resize",
    "aten::_local_scalar_dense", "aten::copy_", "aten::_to_copy",
}


def _schema_name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _decompositions() -> dict[str, Callable[..., Any]]:
    global _table
    if _table is None:
        from torch._decomp import decomposition_table

        # torch._refs decompositions lower to prims, which a plugin never
        # serves, so only ATen-level decompositions can run natively.
        _table = {
            _schema_name(op): fn
            for op, fn in decomposition_table.items()
            if isinstance(op, torch._ops.OpOverload)
            and not getattr(fn, "__module__", "").startswith("torch._refs")
            and not any(a.is_out for a in op._schema.arguments)
        }
    return _table


def has_decomposition(op_name: str) -> bool:
    return op_name in _decompositions()


def _runs_natively(name: str, dtype: torch.dtype | None) -> bool:
    from torch_fl import _C

    if not name.startswith("aten::"):
        return False  # prims and friends may route back to the op being decomposed
    if name in _BRIDGE_OPS:
        return True
    if dtype is not None and _C.has_native_kernel(name, dtype):
        return True
    # Composite ops run as the ops they are made of (to.dtype, expand, ...).
    return any(
        torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
        for key in ("CompositeExplicitAutograd", "CompositeImplicitAutograd")
    )


def _parts(fn: Callable[..., Any], args: tuple, kwargs: dict) -> list[tuple[str, torch.dtype | None]]:
    """The operators `fn` runs, traced on meta tensors."""
    calls: list[tuple[str, torch.dtype | None]] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), kw=None):  # noqa: ANN001
            kw = kw or {}
            dtype = next(
                (t.dtype for t in torch.utils._pytree.tree_leaves((a, kw))
                 if isinstance(t, torch.Tensor)),
                None,
            )
            calls.append((_schema_name(func), dtype))
            return func(*a, **kw)

    def to_meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type == _device_type:
            return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
        if isinstance(x, torch.device) and x.type == _device_type:
            return torch.device("meta")
        return x

    meta_args, meta_kwargs = tree_map(to_meta, (args, kwargs))
    with Recorder():
        fn(*meta_args, **meta_kwargs)
    return calls


def decompose(op_name: str, args: tuple, kwargs: dict, dtype: str) -> tuple[bool, Any]:
    """Runs the decomposition of `op_name` if it is fully native; (handled, result)."""
    fn = _decompositions().get(op_name)
    if fn is None:
        return False, None
    key = (op_name, dtype)
    ok = _decisions.get(key)
    if ok is None:
        try:
            parts = _parts(fn, args, kwargs)
            ok = bool(parts) and all(
                name != op_name and _runs_natively(name, part_dtype)
                for name, part_dtype in parts
            )
        except Exception:  # a decomposition that cannot be traced is not used
            ok = False
        _decisions[key] = ok
    if not ok:
        return False, None
    return True, fn(*args, **kwargs)


def install(device_type: str) -> None:
    """Hands the decomposition step to the bridge's fallback chain."""
    from torch_fl import _C

    global _device_type
    _device_type = device_type
    _decisions.clear()
    _C.set_decomposer(decompose, has_decomposition)
