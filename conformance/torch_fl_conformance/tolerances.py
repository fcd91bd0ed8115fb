"""Tolerances of device results against the CPU (tolerances.toml) and the comparison.

A bound comes from a per-operator override, else the operator's class
(transcendental, accumulation), else the dtype's default; every bound is checked
against the dtype's ceiling when the file is loaded, and every comparison caps what
it composes from them (atol + rtol * |e| + of_max * max|e|) at the ceiling. The one
allowance above it is a multiple of the CPU's own measured rounding error
(of_cpu_error): no bound can ask a device to be more accurate than the reference.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import tomllib

__all__ = ["Bound", "Mismatch", "TolerancesError", "ceiling", "compare", "flatten", "op_class",
           "tolerance"]

KINDS = ("output", "grad")
MAX_OF_CPU_ERROR = 4.0  # a device at most this many times the CPU's own error


class TolerancesError(ValueError):
    """tolerances.toml is malformed or a bound exceeds its ceiling."""


@dataclass(frozen=True)
class Bound:
    atol: float
    rtol: float
    reason: str = ""
    # absolute allowance as a fraction of the largest |CPU value| of the same tensor
    of_max: float = 0.0
    # absolute allowance as a multiple of the CPU's own rounding error in this dtype
    # (largest |CPU result - CPU result computed in the next wider dtype| of the tensor)
    of_cpu_error: float = 0.0
    source: str = ""  # "override", "class <name>" or "dtype"


def _bound(b: dict[str, Any], reason: str, source: str) -> Bound:
    return Bound(float(b["atol"]), float(b["rtol"]), reason, float(b.get("of_max", 0.0)),
                 float(b.get("of_cpu_error", 0.0)), source)


def _check(bound: Bound, ceil: Bound, where: str) -> None:
    if bound.atol > ceil.atol or bound.rtol > ceil.rtol or bound.of_max > ceil.rtol:
        raise TolerancesError(
            f"tolerances.toml: {where}: atol={bound.atol:g} rtol={bound.rtol:g} "
            f"of_max={bound.of_max:g} exceeds the ceiling atol={ceil.atol:g} "
            f"rtol={ceil.rtol:g}")
    if not 0.0 <= bound.of_cpu_error <= MAX_OF_CPU_ERROR:
        raise TolerancesError(f"tolerances.toml: {where}: of_cpu_error={bound.of_cpu_error:g} "
                              f"is not within [0, {MAX_OF_CPU_ERROR:g}]")


def validate(data: dict[str, Any]) -> None:
    """Every entry has a reason; every bound is within its dtype's ceiling."""
    ceilings = data.get("ceiling", {})
    for dtype, entry in data.get("dtype", {}).items():
        if dtype not in ceilings:  # integer dtypes have a ceiling (for overrides) only
            raise TolerancesError(f"tolerances.toml: dtype {dtype} has no ceiling")
        for kind in KINDS:
            _check(_bound(entry[kind], "", "dtype"),
                   _bound(ceilings[dtype][kind], "", "ceiling"), f"dtype.{dtype}.{kind}")
    for c in data.get("class", []):
        if not c.get("reason", "").strip() or not c.get("ops"):
            raise TolerancesError(f"tolerances.toml: class {c.get('name')} needs ops and a reason")
        for dtype in set(c) & set(ceilings):
            for kind, b in c[dtype].items():
                _check(_bound(b, "", ""), _bound(ceilings[dtype][kind], "", ""),
                       f"class {c['name']} {dtype}.{kind}")
    for o in data.get("override", []):
        if o["dtype"] != "*" and o["dtype"] not in ceilings:
            raise TolerancesError(f"tolerances.toml: override {o['op']}: dtype {o['dtype']} "
                                  "has no ceiling")
        for dtype in ceilings if o["dtype"] == "*" else [o["dtype"]]:
            for kind in KINDS:
                if kind in o:
                    _check(_bound(o[kind], "", ""), _bound(ceilings[dtype][kind], "", ""),
                           f"override {o['op']} {dtype}.{kind}")
    for o in (data.get("override", []) + data.get("compare_only", []) + data.get("tie_order", [])
              + data.get("duplicate_writes", [])):
        if not o.get("reason", "").strip():
            raise TolerancesError(f"tolerances.toml: entry for {o.get('op')} has no reason")


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    text = resources.files("torch_fl_conformance").joinpath("tolerances.toml").read_text("utf-8")
    data = tomllib.loads(text)
    validate(data)
    return data


@lru_cache(maxsize=4096)
def op_class(op: str | None) -> str:
    """The tolerance class of an op_db operator name ("elementwise" if none)."""
    if op:
        for c in _table().get("class", []):
            if any(fnmatch.fnmatchcase(op, pat) for pat in c["ops"]):
                return str(c["name"])
    return "elementwise"


def ceiling(dtype: str, kind: str) -> Bound | None:
    entry = _table().get("ceiling", {}).get(dtype)
    return None if entry is None else _bound(entry[kind], "", "ceiling")


@lru_cache(maxsize=16384)
def tolerance(dtype: str, kind: str, op: str | None = None) -> Bound | None:
    """The bound for `kind` ("output" or "grad") results of `dtype`; None means exact."""
    data = _table()
    if op is not None:
        for o in data.get("override", []):
            if o["op"] == op and o["dtype"] in (dtype, "*") and kind in o:
                return _bound(o[kind], o["reason"], "override")
        name = op_class(op)
        for c in data.get("class", []):
            if c["name"] == name and kind in c.get(dtype, {}):
                return _bound(c[dtype][kind], c["reason"], f"class {name}")
    entry = data["dtype"].get(dtype)
    if entry is None:
        return None
    return _bound(entry[kind], "", "dtype")


def compared_outputs(op: str) -> list[int] | None:
    """Positions of an operator's outputs to compare; None = all."""
    for entry in _table().get("compare_only", []):
        if entry["op"] == op:
            return [int(i) for i in entry["outputs"]]
    return None


def tie_order_indices(op: str) -> list[int] | None:
    """Positions of an operator's index outputs whose order among equal input values
    is unspecified (unstable sorts, top-k); None for other operators."""
    for entry in _table().get("tie_order", []):
        if entry["op"] == op:
            return [int(i) for i in entry["indices"]]
    return None


def duplicate_write_dims(op: str) -> int | None:
    """For a scatter whose repeated targets may hold any of their sources
    (max_unpool), the number of trailing dimensions it scatters within; None for
    other operators."""
    for entry in _table().get("duplicate_writes", []):
        if entry["op"] == op:
            return int(entry["spatial_dims"])
    return None


@dataclass
class Mismatch:
    where: str
    message: str
    max_abs: float = 0.0
    max_rel: float = 0.0


def flatten(value: Any, where: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            flatten(v, f"{where}[{i}]", out)
    elif isinstance(value, dict):
        for k in sorted(value, key=str):
            flatten(value[k], f"{where}[{k!r}]", out)
    else:
        out.append((where, value))


def compare(actual: Any, expected: Any, kind: str, op: str | None,
            shape_only: bool = False, cpu_error: Any = None) -> tuple[list[Mismatch], float,
                                                                       float]:
    """Compares a device result (already on the CPU) with the CPU result.

    Returns the mismatches and the largest absolute and relative errors seen.
    shape_only compares structure, dtypes and shapes (random operators).
    cpu_error: the CPU result computed in float32, same structure as `expected`; its
    distance from `expected` is the CPU's own rounding error (used by of_cpu_error).
    """
    import torch

    a_items: list[tuple[str, Any]] = []
    e_items: list[tuple[str, Any]] = []
    flatten(actual, "out", a_items)
    flatten(expected, "out", e_items)
    w_items: list[tuple[str, Any]] = []
    if cpu_error is not None:
        flatten(cpu_error, "out", w_items)
    if len(w_items) != len(e_items):
        w_items = [("", None)] * len(e_items)
    if len(a_items) != len(e_items):
        return [Mismatch("out", f"{len(a_items)} values, CPU gives {len(e_items)}")], 0.0, 0.0
    bad: list[Mismatch] = []
    worst_abs = worst_rel = 0.0
    for (where, a), (_, e), (_, w) in zip(a_items, e_items, w_items):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                bad.append(Mismatch(where, f"got {type(a).__name__}, CPU gives a tensor"))
                continue
            # A sample may ask for a third device (zeros_like(x, device="cuda")
            # where CUDA is present): both runs then return tensors there.
            a, e = _host(a), _host(e)
            if a.dtype != e.dtype or a.shape != e.shape:
                bad.append(Mismatch(where, f"dtype/shape {a.dtype}{tuple(a.shape)}, "
                                           f"CPU gives {e.dtype}{tuple(e.shape)}"))
                continue
            if shape_only or e.numel() == 0:
                continue
            m, ab, rel = _compare_tensor(a, e, kind, op, _rounding_error(e, w))
            worst_abs, worst_rel = max(worst_abs, ab), max(worst_rel, rel)
            if m:
                m.where = where
                bad.append(m)
        elif isinstance(e, float) and isinstance(a, (float, int)):
            close = math.isclose(a, e, rel_tol=1e-5, abs_tol=1e-6) or (
                math.isnan(a) and math.isnan(e))
            if not shape_only and not close:
                bad.append(Mismatch(where, f"{a!r}, CPU gives {e!r}"))
        elif isinstance(e, (int, bool, str, type(None), torch.dtype, torch.Size)) and (
                not shape_only and a != e):
            bad.append(Mismatch(where, f"{a!r}, CPU gives {e!r}"))
    return bad, worst_abs, worst_rel


def _host(t: Any) -> Any:
    return t if t.device.type == "cpu" else t.detach().cpu()


def _rounding_error(e: Any, wide: Any) -> float:
    """Largest |e - wide| over finite places: the CPU's own rounding error in e's dtype."""
    import torch

    if (not isinstance(wide, torch.Tensor) or wide.shape != e.shape
            or not e.is_floating_point() or e.layout != torch.strided):
        return 0.0
    d = (e.detach().double() - wide.detach().double()).abs()
    d = d[torch.isfinite(d)]
    return float(d.max()) if d.numel() else 0.0


def _compare_tensor(a: Any, e: Any, kind: str, op: str | None,
                    cpu_error: float = 0.0) -> tuple[Mismatch | None, float, float]:
    import torch

    if e.is_complex():
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    if e.layout != torch.strided:
        a, e = a.to_dense(), e.to_dense()
    if not (e.is_floating_point()):
        a, e = a.detach(), e.detach()
        slack = tolerance(str(e.dtype).removeprefix("torch."), kind, op) if op else None
        if slack is not None and e.dtype != torch.bool:
            # An integer computed from a float threshold (a matrix rank): any correct
            # implementation may land on either side of it (tolerances.toml override).
            off = int((a.long() - e.long()).abs().max()) if e.numel() else 0
            if off <= slack.atol:
                return None, float(off), 0.0
            return Mismatch("", f"off by up to {off} (allowed {slack.atol:g}: "
                                f"{slack.source})"), float(off), 0.0
        equal = torch.equal(a, e)
        return (None if equal else Mismatch("", f"{(a != e).sum().item()} of {e.numel()} "
                                                f"elements differ (exact dtype {e.dtype})"),
                0.0, 0.0)
    bound = tolerance(str(e.dtype).removeprefix("torch."), kind, op)
    a64, e64 = a.detach().double(), e.detach().double()
    a_nan, e_nan = torch.isnan(a64), torch.isnan(e64)
    if not torch.equal(a_nan, e_nan):
        return Mismatch("", f"NaN in {a_nan.sum().item()} places, CPU in "
                            f"{e_nan.sum().item()}"), math.inf, math.inf
    finite = torch.isfinite(e64) & ~e_nan
    inf_e = torch.isinf(e64)
    if not torch.equal(a64[inf_e], e64[inf_e]):
        return Mismatch("", "infinities differ from the CPU"), math.inf, math.inf
    diff = (a64 - e64).abs()[finite]
    if diff.numel() == 0:
        return None, 0.0, 0.0
    if not torch.isfinite(diff).all():
        return Mismatch("", "non-finite value where the CPU is finite"), math.inf, math.inf
    ref = e64.abs()[finite]
    max_abs = float(diff.max())
    max_rel = float((diff / ref.clamp_min(1e-12)).max())
    assert bound is not None
    atol = bound.atol + bound.of_max * float(ref.max()) + bound.of_cpu_error * cpu_error
    allowed = bound.atol + bound.of_max * float(ref.max()) + bound.rtol * ref
    ceil = ceiling(str(e.dtype).removeprefix("torch."), kind)
    if ceil is not None:
        # Every allowance the file chooses stops at the ceiling; the CPU's own measured
        # error is not chosen (no bound can ask a device to beat the reference itself).
        allowed = torch.minimum(allowed, ceil.atol + ceil.rtol * ref)
    allowed = allowed + bound.of_cpu_error * cpu_error
    over = diff > allowed
    if bool(over.any()):
        i = int(torch.argmax(diff - allowed).item())
        scaled = ""
        if bound.of_max:
            scaled += f" + {bound.of_max:g} x max |cpu| {float(ref.max()):.3g}"
        if bound.of_cpu_error and cpu_error:
            scaled += f" + {bound.of_cpu_error:g} x cpu rounding error {cpu_error:.3g}"
        if scaled:
            scaled = f" ({bound.atol:g}{scaled})"
        return Mismatch(
            "", f"{int(over.sum())} of {diff.numel()} elements outside atol={atol:g}{scaled} "
                f"rtol={bound.rtol:g} ({bound.source or 'dtype'}); worst |device - cpu| = "
                f"{float(diff[i]):.3g} at a CPU value of {float(e64[finite][i]):.4g}",
            max_abs, max_rel,
        ), max_abs, max_rel
    return None, max_abs, max_rel
