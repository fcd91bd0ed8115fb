"""Turns a schedule of steps and its memory plan into one Python function.

The generated function takes AOTAutograd's boxed argument list (and clears
it, so inputs can die early), runs eager steps as ATen calls — into planned
memory through the op's out= overload where the plan places the value — and
fused regions through their GraphExecutable, and drops every value and
buffer right after its last use. The source is kept on the result for the
debug log.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.fx

from torch_fl.compile.fusion import tensor_val
from torch_fl.compile.memory_plan import MemoryPlan, Step

__all__ = ["CompiledGraph", "generate", "out_overload"]

_PRIMITIVES = (bool, int, str, type(None))


def out_overload(op: torch._ops.OpOverload) -> tuple[torch._ops.OpOverload, str] | None:
    """The out= overload of a functional op with one Tensor return, and the
    name of its out argument; None when it has none."""
    schema = op._schema
    if len(schema.returns) != 1 or str(schema.returns[0].type) != "Tensor":
        return None
    if schema.returns[0].alias_info is not None or schema.is_mutable:
        return None
    want = [(a.name, str(a.type)) for a in schema.arguments]
    packet = op.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        args = cand._schema.arguments
        outs = [a for a in args if a.is_out]
        if len(outs) != 1:
            continue
        if [(a.name, str(a.type)) for a in args if not a.is_out] == want:
            return cand, outs[0].name
    return None


def _callable(target: Any) -> Any:
    """What the generated code calls for a node's target: an OpOverload's
    bound operator itself (its ``__call__`` only forwards to it, a Python
    frame per op), anything else as it is. Subclasses (TorchBind's) keep
    their own ``__call__``."""
    return target._op if type(target) is torch._ops.OpOverload else target


def _view(buf: torch.Tensor, dtype: torch.dtype, size: Sequence[int], stride: Sequence[int],
          offset: int) -> torch.Tensor:
    return buf.view(dtype).as_strided(size, stride, offset)


class CompiledGraph(Protocol):
    """The generated function: boxed (``_boxed_call``, AOTAutograd passes the
    argument list and the function clears it), with its source attached.
    A plain function, so wrappers that copy ``__dict__`` keep both."""

    _boxed_call: bool
    source: str

    def __call__(self, args: list[Any]) -> Any: ...


class _Names:
    def __init__(self) -> None:
        self.globals: dict[str, Any] = {"_view": _view, "_empty": torch.empty,
                                        "_empty_strided": torch.empty_strided}
        self._ids: dict[int, str] = {}
        self.var: dict[torch.fx.Node, str] = {}

    def const(self, obj: Any, hint: str = "c") -> str:
        key = id(obj)
        if key in self._ids:
            return self._ids[key]
        name = f"_{hint}{len(self.globals)}"
        self.globals[name] = obj
        self._ids[key] = name
        return name

    def render(self, a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            return self.var[a]
        if isinstance(a, _PRIMITIVES):
            return repr(a)
        if isinstance(a, float):
            return repr(a) if math.isfinite(a) else self.const(a)
        if isinstance(a, list):
            return "[" + ", ".join(self.render(x) for x in a) + "]"
        if isinstance(a, tuple):
            return "(" + "".join(self.render(x) + ", " for x in a) + ")"
        return self.const(a)


def generate(
    name: str,
    placeholders: Sequence[torch.fx.Node],
    steps: Sequence[Step],
    executables: dict[int, Any],
    plan: MemoryPlan,
    output_args: Any,
    out_overloads: dict[torch.fx.Node, tuple[torch._ops.OpOverload, str]],
) -> CompiledGraph:
    """Python source for the schedule, compiled. `executables` maps the index
    of each region step to its GraphExecutable."""
    names = _Names()
    for i, n in enumerate(placeholders):
        names.var[n] = f"a{i}_{n.name}"
    for step in steps:
        for n in step.nodes:
            names.var[n] = f"v_{n.name}"
    lines = [f"def {name}(args):"]
    body: list[str] = []
    for i, n in enumerate(placeholders):
        body.append(f"{names.var[n]} = args[{i}]")
    body.append("args.clear()")

    def release(i: int) -> None:
        dead = plan.release_after.get(i, ())
        if dead:
            body.append(" = ".join(names.var[v] for v in dead) + " = None")
        bufs = plan.free_after.get(i, ())
        if bufs:
            body.append(" = ".join(f"buf{b}" for b in bufs) + " = None")

    def placed(v: torch.fx.Node) -> str | None:
        pv = plan.values.get(v)
        if pv is None:
            return None
        return (f"_view(buf{pv.buffer}, {names.const(pv.dtype, 'dt')}, {pv.size!r}, "
                f"{pv.stride!r}, {pv.storage_offset})")

    release(-1)
    for i, step in enumerate(steps):
        for b in plan.alloc_before.get(i, ()):
            spec = plan.buffers[b]
            body.append(f"buf{b} = _empty(({spec.nbytes},), dtype={names.const(torch.uint8, 'dt')}, "
                        f"device={names.const(spec.device, 'dev')})")
        if step.kind == "region":
            exe = names.const(executables[i], "exe")
            outs = []
            for v in step.defs:
                where = placed(v)
                if where is None:
                    t = tensor_val(v)
                    assert t is not None
                    where = (f"_empty_strided({tuple(t.shape)!r}, {tuple(t.stride())!r}, "
                             f"dtype={names.const(t.dtype, 'dt')}, "
                             f"device={names.const(t.device, 'dev')})")
                body.append(f"{names.var[v]} = {where}")
                outs.append(names.var[v])
            ins = ", ".join(names.var[v] for v in step.uses)
            body.append(f"{exe}.run([{ins}], [{', '.join(outs)}])")
        else:
            (n,) = step.nodes
            var = names.var[n]
            if n.op == "get_attr":
                body.append(f"{var} = {names.const(n.meta['torch_fl_constant'], 'k')}")
            elif n.target is operator.getitem:
                src, idx = n.args
                body.append(f"{var} = {names.render(src)}[{names.render(idx)}]")
            else:
                args = [names.render(a) for a in n.args]
                kwargs = [f"{k}={names.render(v)}" for k, v in n.kwargs.items()]
                where = placed(n)
                if where is not None:
                    op, out_name = out_overloads[n]
                    body.append(f"{var} = {where}")
                    call = ", ".join([*args, *kwargs, f"{out_name}={var}"])
                    body.append(f"{names.const(_callable(op), 'op')}({call})")
                else:
                    call = ", ".join([*args, *kwargs])
                    body.append(f"{var} = {names.const(_callable(n.target), 'op')}({call})")
        release(i)
    body.append(f"return {names.render(output_args)}")
    source = "\n".join(lines + ["    " + line for line in body]) + "\n"
    code = compile(source, f"<torch_fl.compile {name}>", "exec")
    scope = dict(names.globals)
    exec(code, scope)  # noqa: S102 - our own generated source
    fn = scope[name]
    fn._boxed_call = True
    fn.source = source
    return fn  # type: ignore[no-any-return]
