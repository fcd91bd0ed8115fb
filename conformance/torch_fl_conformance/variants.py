"""Layouts and call forms the sweep derives from an op_db sample.

A kernel can be right on op_db's samples, which are mostly contiguous, and wrong
on the inputs real programs pass it: slices, transposes, views into a larger
buffer, broadcast (stride-0) operands; or wrong only in its in-place or out= form.
Each variant below is derived from a sample on the CPU and runs on both sides on
the same derived input (the CPU reference computed on the variant, never assumed
equal to the plain result):

- noncontiguous: every tensor interleaved with NaN (or 12, or True) padding
  (PyTorch's noncontiguous_like, as its test_noncontiguous_samples does);
- offset: every tensor a contiguous view at storage offset 5 into a buffer whose
  other elements hold that padding;
- broadcast: one tensor input replaced by x.narrow(d, 0, 1).expand_as(x), stride 0
  along d (which input rotates with the sample);
- inplace: OpInfo.inplace_variant (or the call with inplace=True for a function
  that takes it) on a copy of the input, in the plain, non-contiguous and offset
  layouts in turn, and once with the input also passed as its second operand
  (self-aliasing);
- out: out= tensors preallocated with the CPU result's shapes and dtypes, filled with
  the padding value, contiguous, non-contiguous or offset in turn.

`replicate` puts a CPU tensor on a device with the same sizes, strides and storage
offset and a copy of its whole storage, so the padding a kernel must not read (or
write) is there on both sides; `storage` reads a replica's whole storage back, so a
write outside the view is seen.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

__all__ = ["OFFSET", "VARIANTS", "Form", "Replica", "derive", "inplace_form", "mutated",
           "padding_value", "replicate"]

VARIANTS = ("noncontiguous", "offset", "broadcast", "inplace", "out")
OFFSET = 5  # elements before an offset view (odd: no vector alignment by luck)


def padding_value(dtype: Any) -> Any:
    """What fills memory a kernel must not read: NaN, True, or 12 (as PyTorch's
    noncontiguous_like)."""
    import math

    import torch

    if dtype.is_floating_point or dtype.is_complex:
        return math.nan
    return True if dtype == torch.bool else 12


def _replicable(t: Any) -> bool:
    import torch

    return (type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided
            and not t.is_conj() and not t.is_neg() and t.device.type == "cpu")


@dataclass
class Form:
    """A derived form of a sample: `call(op, input, *args, **kwargs)` runs it;
    `same_result`: its result must equal the plain sample's on the CPU (in-place and
    out= forms of the same computation), else the CPU's own form is unreliable."""

    label: str
    sample: Any
    call: Any
    same_result: bool = False


@dataclass
class Replica:
    """A tensor placed for one run: `view` (what the op gets) and `flat`, its whole
    storage (None when the tensor could not be placed with its layout)."""

    view: Any
    flat: Any


def replicate(t: Any, device: Any, requires_grad: bool | None = None) -> Replica:
    """`t` (a CPU tensor) on `device` (or again on the CPU, in fresh memory) with its
    sizes, strides and storage offset; the storage is copied whole."""
    import torch

    rg = t.requires_grad if requires_grad is None else requires_grad
    if not _replicable(t):
        x = t.detach().to(device) if torch.device(device).type != "cpu" else t.detach().clone()
        return Replica(x.requires_grad_(True) if rg else x, None)
    src = t.detach()
    flat = _storage_of(src).to(device, copy=True)
    view = flat.as_strided(src.shape, src.stride(), src.storage_offset())
    if rg:
        view = view.detach().requires_grad_(True)
    return Replica(view, flat)


def widen(t: Any, dtype: Any) -> Any:
    """`t` (a CPU tensor) converted exactly to `dtype` with its sizes, strides and
    storage offset: every element of its storage converted, so a run on it writes
    where a run on `t` would."""
    src = t.detach()
    if not _replicable(src):
        return src.to(dtype)
    return _storage_of(src).to(dtype).as_strided(src.shape, src.stride(), src.storage_offset())


def _storage_of(src: Any) -> Any:
    """The whole storage of `src`, as a 1-d tensor of its dtype (no copy)."""
    import torch

    n = src.untyped_storage().nbytes() // max(1, src.element_size())
    return torch.empty(0, dtype=src.dtype).set_(src.untyped_storage(), 0, (n,), (1,))


# -- derivations (CPU side) ----------------------------------------------------
def _tensors(sample: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
            if isinstance(t, torch.Tensor)]


def _noncontiguous(t: Any) -> Any:
    from torch.testing._internal.common_utils import noncontiguous_like

    return noncontiguous_like(t) if _replicable(t) else t


def _offset(t: Any) -> Any:
    import torch

    if not _replicable(t) or t.numel() == 0:
        return t
    buf = torch.full((OFFSET + t.numel() + 3,), padding_value(t.dtype), dtype=t.dtype)
    view = buf[OFFSET:OFFSET + t.numel()].view(t.shape)
    view.copy_(t.detach())
    return view.requires_grad_(t.requires_grad)


def _broadcast(t: Any) -> Any:
    if not _replicable(t) or t.dim() == 0:
        return t
    for d in range(t.dim()):
        if t.size(d) > 1:
            return t.detach().narrow(d, 0, 1).expand_as(t)
    return t


def _transform(sample: Any, fn: Any, only: int | None = None) -> Any:
    """The sample with fn applied to its tensors (or to its `only`-th tensor)."""
    import torch

    count = [0]

    def apply(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        i = count[0]
        count[0] += 1
        return fn(t) if only is None or i == only else t

    return sample.transform(apply)


def mutated(sample: Any, after: list[Any]) -> frozenset[int]:
    """Positions of the sample's tensors whose storage differs from `after` (the
    same tensors' storages after a call)."""
    out = set()
    for i, (t, a) in enumerate(zip(_tensors(sample), after)):
        if not _replicable(t):
            continue
        before = _storage_of(t.detach())
        if before.shape != a.shape:
            out.add(i)
            continue
        same = before == a
        if before.is_floating_point():
            same |= before.isnan() & a.isnan()
        if not bool(same.all()):
            out.add(i)
    return frozenset(out)


def _same(a: Any, b: Any) -> bool:
    """Whether two samples put tensors of the same layouts everywhere."""
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(
        x.shape == y.shape and x.stride() == y.stride()
        and x.storage_offset() == y.storage_offset() for x, y in zip(ta, tb))


def _layout(sample: Any, k: int) -> Any:
    """The plain, non-contiguous or offset layout of `sample`, by k."""
    kind = k % 3
    if kind == 1:
        return _transform(sample, _noncontiguous)
    if kind == 2:
        return _transform(sample, _offset)
    return sample


def inplace_form(op: Any) -> Any:
    """The operator's in-place form: OpInfo.inplace_variant, else, for a function
    with an `inplace` parameter (nn.functional.relu, elu, dropout, ...), the call
    with inplace=True; None when it has neither."""
    if op.inplace_variant is not None:
        return op.inplace_variant
    fn = getattr(op, "op", None)
    try:
        params = inspect.signature(fn).parameters if fn is not None else {}
    except (TypeError, ValueError):
        return None
    if "inplace" not in params:
        return None

    def inplace(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **{**kwargs, "inplace": True})

    return inplace


def derive(variant: str, sample: Any, k: int, op: Any, ref: Any = None,
           mutated: frozenset[int] = frozenset()) -> list[Form]:
    """The derived forms of `sample` for `variant`.
    `k`: the sample's index among those the variant ran (rotates the layouts);
    `ref`: the CPU result of the plain sample (the out= shapes); `mutated`: the
    positions of the tensors the operator writes (never expanded: several elements
    would share one memory location). Empty when the variant does not apply."""
    import torch
    from torch.utils._pytree import tree_flatten

    def plain(fn: Any, inp: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(inp, *args, **kwargs)

    tensors = _tensors(sample)
    if not tensors or all(t.numel() == 0 for t in tensors):
        return []
    if variant == "noncontiguous":
        nc = _transform(sample, _noncontiguous)
        return [] if _same(nc, sample) else [Form("noncontiguous", nc, plain)]
    if variant == "offset":
        off = _transform(sample, _offset)
        return [] if _same(off, sample) else [Form("offset", off, plain)]
    if variant == "broadcast":
        eligible = [i for i, t in enumerate(tensors)
                    if i not in mutated and _broadcast(t) is not t]
        if not eligible:
            return []
        i = eligible[k % len(eligible)]
        return [Form(f"broadcast (tensor {i})", _transform(sample, _broadcast, only=i), plain)]
    if variant == "inplace":
        fn = inplace_form(op)
        if fn is None or not isinstance(sample.input, torch.Tensor):
            return []

        def inplace(_: Any, inp: Any, *args: Any, **kwargs: Any) -> Any:
            return fn(inp, *args, **kwargs)

        layout = ("plain", "noncontiguous", "offset")[k % 3]
        out = [Form(f"inplace ({layout} self)", _layout(sample, k), inplace, True)]
        x = sample.input
        if k == 0 and sample.args and isinstance(sample.args[0], torch.Tensor) \
                and sample.args[0].shape == x.shape and sample.args[0].dtype == x.dtype:

            def aliased(_: Any, inp: Any, other: Any, *args: Any, **kwargs: Any) -> Any:
                return fn(inp, inp, *args, **kwargs)

            out.append(Form("inplace (self as its own operand)", sample, aliased))
        return out
    if variant == "out":
        if not op.supports_out:
            return []
        outs = tree_flatten(ref)[0] if isinstance(ref, (tuple, list)) else [ref]
        if not outs or not all(isinstance(o, torch.Tensor) and o.layout == torch.strided
                               for o in outs):
            return []
        layout = ("contiguous", "noncontiguous", "offset")[k % 3]

        def make(o: Any) -> Any:
            t = torch.full(o.shape, padding_value(o.dtype), dtype=o.dtype)
            return (t, _noncontiguous(t), _offset(t))[k % 3]

        preallocated = [make(o) for o in outs]
        packed = preallocated[0] if isinstance(ref, torch.Tensor) else tuple(preallocated)
        with_out = sample.transform(lambda t: t)
        with_out.kwargs = {**with_out.kwargs, "out": packed}
        return [Form(f"out= ({layout} out)", with_out, plain, True)]
    raise ValueError(f"unknown variant {variant!r}")
