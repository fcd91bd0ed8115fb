"""Builds the report dictionary from per-test results: requirement status, level
achieved and why, op coverage, error statistics, and what to do next.

What to do next, in the order every rendering shows it:

1. **blockers**: the failures of MUST requirements at the lowest level not met,
   each with its test, op and dtype, the plugin kernels it ran and a command that
   re-runs it with those kernels left to the fallback chain;
2. **next steps**: the kernels to write, per functional operator and dtype, where
   the run fell back to the CPU and no kernel of that operator ran for that dtype,
   ranked by what they cost in the model zoo's training steps (calls and time per
   operator and dtype, traced on the CPU), then by the fallback calls and time of
   the run;
3. **SHOULD findings**, one per requirement with the count of its failing tests;
4. requirements not tested, counted per level and reason.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import time
import warnings
from collections import Counter, defaultdict
from typing import Any

from torch_fl_conformance import outcomes
from torch_fl_conformance.report import integrity
from torch_fl_conformance.report.suspects import bisect_command, bisect_kernels, rank_suspects
from torch_fl_conformance.requirements import LEVEL_NAMES, LEVELS, load_requirements
from torch_fl_conformance.session import op_of, opinfo_case_of

SCHEMA = "torchfl-conformance-report"
# 1.1: the BLOCKED outcome, "suspects", per-test "kernels", the sweep's variant checks
# 1.2: "blockers", "next_steps", "should_findings", "not_tested"
SCHEMA_VERSION = "1.2"
COVERAGE_CLASSES = ("native", "decomposed", "fallback", "error", "wrong", "crash", "timeout",
                    "blocked", "unsupported")
_EXC = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Failure))\b")


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def merge_op_stats(tables: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Sums the cumulative op_stats snapshots of several worker processes."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in tables:
        for r in rows:
            k = (r["op"], r["dtype"])
            if k not in acc:
                acc[k] = dict(r)
            else:
                for f in ("native", "decomposed", "cpu_fallback", "failed", "time_ns",
                          "bytes_copied"):
                    acc[k][f] += r[f]
    return sorted(acc.values(), key=lambda r: (r["op"], r["dtype"]))


def _requirement_status(reqs: dict[str, Any], tests: list[dict[str, Any]],
                        capabilities: set[str]) -> list[dict[str, Any]]:
    by_req: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in tests:
        by_req[t["requirement"]].append(t)
    out = []
    for rid, r in sorted(reqs.items()):
        if r.retired:
            continue
        ts = by_req.get(rid, [])
        counts = Counter(t["outcome"] for t in ts)
        bad = [t for t in ts if t["outcome"] in outcomes.BAD]
        waived = [t for t in ts if t["outcome"] == outcomes.SKIP
                  and (t.get("expectation") or {}).get("kind") == "skip"]
        cap_missing = bool(r.capability) and r.capability not in capabilities
        if not ts:
            status, why = "not_tested", "no test of it was selected in this run"
        elif bad:
            status = "not_met"
            worst = Counter(t["outcome"] for t in bad).most_common()
            why = ", ".join(f"{n} {o}" for o, n in worst)
        elif waived:
            status, why = "waived", f"{len(waived)} test(s) skipped by the expectation file"
        elif counts.get(outcomes.SKIP, 0) == len(ts):
            if cap_missing:
                status, why = "skipped", f"{r.capability} not advertised"
            else:
                caps = {t.get("capability") for t in ts} - {""}
                if caps and not caps & capabilities:
                    status, why = "skipped", f"{', '.join(sorted(caps))} not advertised"
                else:
                    status, why = "unverified", "every test of it was skipped"
        else:
            status, why = "met", (f"{counts.get(outcomes.PASS, 0) + counts.get(outcomes.XPASS, 0)}" \
                                 " test(s) passed")
        out.append({
            "id": rid, "strength": r.strength, "level": r.level, "capability": r.capability,
            "text": r.text, "status": status, "why": why, "tests": len(ts),
            "outcomes": dict(sorted(counts.items())),
            "failing": [t["id"] for t in bad][:25],
        })
    return out


def _levels(reqs: list[dict[str, Any]], requested: str, partial: bool) -> dict[str, Any]:
    levels: dict[str, Any] = {}
    achieved = "none"
    chain = True
    for level in LEVELS:
        must = [r for r in reqs if r["level"] == level and r["strength"] == "MUST"]
        if LEVELS.index(level) > LEVELS.index(requested):
            levels[level] = {"met": False, "tested": False,
                             "why": [f"not tested (the run stopped at {requested})"]}
            chain = False
            continue
        blocking = [r for r in must if r["status"] not in ("met", "skipped")]
        why = [f"{r['id']} {r['status'].replace('_', ' ')}: {r['why']}" for r in blocking
               if r["status"] != "not_tested"]
        untested = [r["id"] for r in blocking if r["status"] == "not_tested"]
        if untested:
            why.append(f"{len(untested)} MUST requirement(s) not tested in this run: "
                       + ", ".join(untested[:6])
                       + (f" and {len(untested) - 6} more" if len(untested) > 6 else ""))
        met = not blocking
        if met:
            n_met = sum(r["status"] == "met" for r in must)
            n_skip = sum(r["status"] == "skipped" for r in must)
            why = [(f"all {len(must)} MUST requirements hold ({n_met} met, {n_skip} skipped "
                   "for capabilities the plugin does not advertise)")]
        levels[level] = {"met": met, "tested": True, "why": why,
                         "should_not_met": [r["id"] for r in reqs if r["level"] == level
                                            and r["strength"] == "SHOULD"
                                            and r["status"] in ("not_met", "waived")]}
        if met and chain:
            achieved = level
        else:
            chain = False
    if achieved == "none":
        summary = "no level: " + "; ".join(levels["L0"]["why"][:3])
    else:
        nxt = LEVELS.index(achieved) + 1
        summary = f"{achieved} ({LEVEL_NAMES[achieved]})"
        if nxt < len(LEVELS):
            blocker = levels[LEVELS[nxt]]["why"]
            summary += f"; {LEVELS[nxt]} not reached: " + "; ".join(blocker[:3])
    if partial:
        summary += " [partial run: filters applied, not a certification]"
    return {"requested": requested, "achieved": achieved, "summary": summary,
            "levels": levels}


def _coverage(tests: list[dict[str, Any]]) -> dict[str, Any]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for t in tests:
        parsed = opinfo_case_of(t["id"])
        if parsed is None:
            continue
        key = (parsed[0], parsed[1])
        data = (t.get("data") or {}).get("opinfo")
        row = rows.setdefault(key, {"op": key[0], "dtype": key[1], "class": None,
                                    "checks": {}})
        row["checks"][parsed[2]] = t["outcome"]
        if data and "class" in data:
            for f in ("forward", "backward", "samples", "fallback_ops", "decomposed_ops",
                      "max_abs", "max_rel", "grad_max_abs", "grad_max_rel", "forward_error",
                      "backward_error", "wrong", "grad_wrong", "shape_only", "random",
                      "unsupported_samples", "variants"):
                if f in data:
                    row[f] = data[f]
            row["class"] = data["class"]
        if t["outcome"] == outcomes.CRASH:
            row["class"], row["message"] = "crash", t.get("message", "")
        elif t["outcome"] == outcomes.TIMEOUT and row["class"] != "crash":
            row["class"], row["message"] = "timeout", t.get("message", "")
        elif t["outcome"] == outcomes.BLOCKED and row["class"] in (None, "unsupported"):
            row["class"], row["message"] = "blocked", t.get("message", "")
    for row in rows.values():
        if row["class"] is None:
            row["class"] = "unsupported"
    table = sorted(rows.values(), key=lambda r: (r["op"], r["dtype"]))
    totals = Counter(r["class"] for r in table)
    by_dtype: dict[str, Counter[str]] = defaultdict(Counter)
    for r in table:
        by_dtype[r["dtype"]][r["class"]] += 1
    ops = sorted({r["op"] for r in table})
    fallback_ops = Counter(o for r in table for o in r.get("fallback_ops", []))
    # capability -> cases with samples set aside because the plugin lacks it
    set_aside: dict[str, list[str]] = defaultdict(list)
    for r in table:
        for cap in sorted(r.get("unsupported_samples") or {}):
            set_aside[cap].append(f"{r['op']}-{r['dtype']}")
    return {
        "capability_unsupported": {c: v for c, v in sorted(set_aside.items())},
        "random_ops": sorted({r["op"] for r in table if r.get("random")}),
        "classes": list(COVERAGE_CLASSES),
        "ops": table,
        "totals": {c: totals.get(c, 0) for c in COVERAGE_CLASSES},
        "by_dtype": {d: {c: v.get(c, 0) for c in COVERAGE_CLASSES}
                     for d, v in sorted(by_dtype.items())},
        "op_count": len(ops),
        "top_fallback_aten_ops": [{"op": o, "cases": n} for o, n in fallback_ops.most_common(40)],
    }


def _errors(tests: list[dict[str, Any]]) -> dict[str, Any]:
    by_outcome = Counter(t["outcome"] for t in tests)
    by_area: dict[str, Counter[str]] = defaultdict(Counter)
    for t in tests:
        by_area[t["area"]][t["outcome"]] += 1
    exc: Counter[str] = Counter()
    example: dict[str, str] = {}
    for t in tests:
        if t["outcome"] not in (outcomes.FAIL, outcomes.ERROR, outcomes.XFAIL):
            continue
        m = _EXC.search(t.get("message", "")) or _EXC.search(t.get("detail", "")[-600:])
        name = m.group(1) if m else ("mismatch" if "differs" in t.get("message", "")
                                     else "other")
        exc[name] += 1
        example.setdefault(name, t["id"])
    for o in (outcomes.CRASH, outcomes.TIMEOUT, outcomes.BLOCKED):
        if by_outcome.get(o):
            exc[o.lower()] = by_outcome[o]
            example.setdefault(o.lower(), next(t["id"] for t in tests if t["outcome"] == o))
    return {
        "by_outcome": {o: by_outcome.get(o, 0) for o in outcomes.OUTCOMES},
        "by_area": {a: {o: c.get(o, 0) for o in outcomes.OUTCOMES}
                    for a, c in sorted(by_area.items())},
        "by_kind": [{"kind": k, "count": n, "example": example[k]} for k, n in exc.most_common()],
    }


# -- What to do next ------------------------------------------------------------
_DTYPE = re.compile(r"(?:b?float|u?int|complex)\d+|bool")
_BLOCKERS_KEPT = 50  # blocker tests in the JSON; the rest are counted
_STEPS_KEPT = 200  # kernels to write in the JSON; the rest are counted
_FINDING_TESTS_KEPT = 100


def _import_torch() -> Any:
    """torch, for operator schemas and the zoo trace. Imported here with the device
    backend autoload off: the runner certifies the plugin in its workers, and a
    plugin that crashes while loading must not take the report down with it."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    keys = ("TORCH_DEVICE_BACKEND_AUTOLOAD", "TORCH_FL_AUTOLOAD")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(dict.fromkeys(keys, "0"))
    try:
        import torch
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return torch


@functools.lru_cache(maxsize=1)
def _schemas() -> dict[str, list[Any]]:
    """Operator schemas by name ('aten::add'), every overload."""
    try:
        torch = _import_torch()
    except ImportError:
        return {}
    out: dict[str, list[Any]] = defaultdict(list)
    for schema in torch._C._jit_get_all_schemas():
        out[schema.name].append(schema)
    return dict(out)


def _args(schema: Any, drop_out: bool) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in schema.arguments if not (drop_out and a.is_out)]


def _mutates(schema: Any) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


@functools.cache
def functional_name(op: str) -> str:
    """The functional overload whose kernel serves `op`, the name to register:
    'aten::log.out' -> 'aten::log', 'aten::add_.Tensor' -> 'aten::add.Tensor',
    'aten::max.dim_max' -> 'aten::max.dim'; the bridge derives the in-place and out=
    forms from a functional kernel. `op` itself when it is functional, has no
    functional form, or that form is CompositeImplicitAutograd (never reaches a
    device) or generated for functionalization ('aten::zero_', 'aten::_fused_adam_':
    in place by name)."""
    name, _, overload = op.partition(".")
    schemas = _schemas()
    this = next((s for s in schemas.get(name, []) if s.overload_name == overload), None)
    if this is None or not _mutates(this):
        return op
    has_out = any(a.is_out for a in this.arguments)
    if has_out:
        candidates = [s for s in schemas.get(name, []) if not _mutates(s)
                      and _args(s, False) == _args(this, True)
                      and len(s.returns) == len(this.returns)]
    elif name.endswith("_"):
        candidates = [s for s in schemas.get(name[:-1], []) if not _mutates(s)
                      and s.overload_name == overload and _args(s, False) == _args(this, False)]
    else:
        candidates = []
    if not candidates:
        return op
    best = candidates[0]
    found = best.name + (f".{best.overload_name}" if best.overload_name else "")
    torch = sys.modules["torch"]
    if torch._C._dispatch_has_kernel_for_dispatch_key(found, "CompositeImplicitAutograd"):
        return op
    ns, _, base = best.name.partition("::")
    overload_packet = getattr(getattr(torch.ops, ns), base)
    if torch.Tag.generated in getattr(overload_packet, best.overload_name or "default").tags:
        return op  # a functional form made for functionalization: the op is in place by name
    return found


@functools.lru_cache(maxsize=1)
def _bridge_ops() -> frozenset[str]:
    """The operators the bridge serves for every plugin (no plugin kernel to disable)."""
    try:
        _import_torch()
        from torch_fl import _C
    except ImportError:
        return frozenset()
    return frozenset(_C.bridge_ops())


def _call_dtype(torch: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The dtype the bridge's op statistics file a call under: the promoted dtype of
    its tensor inputs (out= tensors left out), 'none' without any."""
    schema = func._schema
    outs = {a.name for a in schema.arguments if a.is_out}
    names = [a.name for a in schema.arguments]
    values = [v for i, v in enumerate(args) if i >= len(names) or names[i] not in outs]
    values += [v for k, v in kwargs.items() if k not in outs]
    tensors = [t for t in torch.utils._pytree.tree_leaves(values) if isinstance(t, torch.Tensor)]
    dims = [t.dtype for t in tensors if t.dim() > 0] or [t.dtype for t in tensors]
    if not dims:
        return "none"
    return str(functools.reduce(torch.promote_types, dims)).removeprefix("torch.")


def _train_twice(torch: Any, spec: Any, trace: Any) -> None:
    """Two training steps of a zoo model on the CPU, the second under `trace` (the
    first warms up), leaving the global random state as it was. oneDNN is off:
    with it the CPU turns recurrent layers into operators of its own."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # oneDNN's flags warn about TF32 on Intel GPUs
        with torch.random.fork_rng(devices=[]), torch.backends.mkldnn.flags(enabled=False):
            torch.manual_seed(0)
            model = spec.build()
            opt = spec.make_optimizer(model.parameters(), "cpu")
            for step in range(2):
                inputs, target = spec.make_batch(step)
                with trace if step else contextlib.nullcontext():
                    opt.zero_grad(set_to_none=True)
                    spec.loss_fn(model, inputs, target).backward()
                    opt.step()


@functools.lru_cache(maxsize=1)
def zoo_profile() -> dict[str, Any]:
    """Calls and CPU time per (functional operator, dtype) of one training step
    (forward, backward, optimizer step) of each model of the zoo, after a warm-up
    step, traced on the CPU on one thread with oneDNN off. The operators a device receives are
    those the CPU then receives: the trace weighs what a missing kernel costs a real
    training loop."""
    try:
        torch = _import_torch()
        from torch.utils._python_dispatch import TorchDispatchMode

        from torch_fl_conformance.zoo import all_models
    except ImportError as exc:
        return {"models": [], "rows": {}, "error": f"no zoo trace: {exc}"}

    rows: dict[tuple[str, str], dict[str, Any]] = {}

    class _Trace(TorchDispatchMode):
        def __init__(self, model: str) -> None:
            super().__init__()
            self.model = model

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            t0 = time.perf_counter_ns()
            out = func(*args, **kwargs)
            spent = time.perf_counter_ns() - t0
            key = (functional_name(func.name()), _call_dtype(torch, func, args, kwargs))
            row = rows.setdefault(key, {"calls": 0, "time_ns": 0, "models": set()})
            row["calls"] += 1
            row["time_ns"] += spent
            row["models"].add(self.model)
            return out

    models, errors = [], []
    threads = torch.get_num_threads()
    # One thread: the time of an operator is the work it does, not how the intra-op
    # threads of a busy machine happen to be scheduled (and the trace takes about a
    # second instead of tens where other processes share the cores).
    torch.set_num_threads(1)
    try:
        for spec in all_models():
            try:
                _train_twice(torch, spec, _Trace(spec.name))
                models.append(spec.name)
            except Exception as exc:  # noqa: BLE001 - a model that does not trace is reported
                errors.append(f"{spec.name}: {type(exc).__name__}: {exc}")
    finally:
        torch.set_num_threads(threads)
    return {"models": models, "rows": rows, "error": "; ".join(errors)}


def _subject(tid: str) -> tuple[str, str]:
    """(op, dtype) a test id names: the op_db case of a sweep or gradcheck test, else
    the first parameter that is no dtype and the first that is one ('' if none)."""
    parsed = opinfo_case_of(tid)
    if parsed is not None:
        return parsed[0], parsed[1]
    m = re.search(r"\[(.+)\]$", tid)
    parts = m.group(1).split("-") if m else []
    dtypes = [p for p in parts if _DTYPE.fullmatch(p)]
    rest = [p for p in parts if not _DTYPE.fullmatch(p)]
    return op_of(tid) or (rest[0] if rest else ""), dtypes[0] if dtypes else ""


def _first_line(text: str, limit: int = 300) -> str:
    return (text.strip().splitlines() or [""])[0][:limit]


def _failing_level(level: dict[str, Any]) -> str | None:
    """The lowest level that was tested and is not met."""
    return next((lv for lv in LEVELS if level["levels"][lv]["tested"]
                 and not level["levels"][lv]["met"]), None)


def _blockers(reqs: list[dict[str, Any]], level: dict[str, Any], tests: list[dict[str, Any]],
              suspects: list[dict[str, Any]], plugin: dict[str, Any],
              options: dict[str, Any]) -> dict[str, Any]:
    """What keeps the lowest failing level from being met: each failing test of its
    MUST requirements (worst outcome first), the requirements that fail without a
    failing test (skipped, waived), and the ones this run did not test."""
    lowest = _failing_level(level)
    items: list[dict[str, Any]] = []
    untested: list[str] = []
    if lowest is not None:
        bridge = _bridge_ops()
        by_req: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for t in tests:
            if t["outcome"] in outcomes.BAD:
                by_req[t["requirement"]].append(t)
        found = []
        for r in reqs:
            if r["level"] != lowest or r["strength"] != "MUST" or \
                    r["status"] in ("met", "skipped"):
                continue
            if r["status"] == "not_tested":
                untested.append(r["id"])
            elif by_req.get(r["id"]):
                found += by_req[r["id"]]
            else:
                items.append({"kind": "requirement", "requirement": r["id"], "level": lowest,
                              "status": r["status"], "why": r["why"], "text": r["text"]})
        found.sort(key=lambda t: (-outcomes.RANK[t["outcome"]], t["requirement"], t["id"]))
        tested_items = []
        for t in found[:_BLOCKERS_KEPT]:
            op, dtype = _subject(t["id"])
            dtype = dtype or str((t.get("data") or {}).get("dtype") or "")  # recorded by the test
            k = (t.get("data") or {}).get("kernels") or {}
            kernels = bisect_kernels(t, suspects, bridge)
            tested_items.append({
                "kind": "test", "test": t["id"], "requirement": t["requirement"],
                "level": lowest, "outcome": t["outcome"], "op": op, "dtype": dtype,
                "message": _first_line(t.get("message", "")), "kernels": kernels,
                "fallback_ops": sorted(set(k.get("fallback", []))
                                       | set((t.get("data") or {}).get("fallback_ops", []))),
                "bisect": bisect_command(kernels, t["id"], plugin, options) if kernels else "",
            })
        items = tested_items + items
        more = max(0, len(found) - _BLOCKERS_KEPT)
    else:
        more = 0
    if untested:
        items.append({"kind": "not_tested", "level": lowest, "requirements": untested,
                      "why": (f"{len(untested)} MUST requirement(s) of {lowest} not tested in "
                              "this run (a filter such as -k, --ops or --models left them "
                              "out); a certification runs them all")})
    return {"level": lowest, "items": items, "more_tests": more}


def _next_steps(op_stats: list[dict[str, Any]], coverage: dict[str, Any],
                tests: list[dict[str, Any]], zoo: dict[str, Any] | None) -> dict[str, Any]:
    """The kernels to write: per functional operator and dtype that fell back to the
    CPU in this run while no kernel of that operator ran natively for that dtype.
    An operator the plugin runs natively for other dtypes needs the dtype added to
    its kernel's dtypes; any other needs a kernel registered under its functional name."""
    native: dict[str, set[str]] = defaultdict(set)  # functional op -> dtypes it ran natively
    registered: dict[str, set[str]] = defaultdict(set)  # functional op -> kernels that ran
    fell: dict[tuple[str, str], dict[str, Any]] = {}
    for r in op_stats:
        fn = functional_name(r["op"])
        if r["native"]:
            native[fn].add(r["dtype"])
            registered[fn].add(r["op"])
        if r["cpu_fallback"]:
            acc = fell.setdefault((fn, r["dtype"]), {"calls": 0, "time_ns": 0, "as": set()})
            acc["calls"] += r["cpu_fallback"]
            acc["time_ns"] += r["time_ns"]
            acc["as"].add(r["op"])
    todo = {k: v for k, v in fell.items() if k[1] not in native[k[0]]}
    if todo and zoo is None:
        zoo = zoo_profile()
    zoo = zoo or {"models": [], "rows": {}, "error": ""}
    cases: Counter[tuple[str, str]] = Counter()
    for row in coverage["ops"]:
        for op in set(row.get("fallback_ops", [])):
            cases[(functional_name(op), row["dtype"])] += 1
    # "aten::op (dtype)" the zoo's training loops sent to the CPU on the device (L2)
    zoo_fell: dict[tuple[str, str], set[str]] = defaultdict(set)
    for t in tests:
        training = (t.get("data") or {}).get("training") or {}
        for entry in training.get("fallback_ops") or []:
            m = re.fullmatch(r"(\S+) \((\w+)\)", entry)
            if m and training.get("model"):
                zoo_fell[(functional_name(m.group(1)), m.group(2))].add(training["model"])
    items = []
    for (fn, dtype), acc in todo.items():
        z = zoo["rows"].get((fn, dtype), {})
        have = sorted(registered[fn])
        extend = bool(have)
        items.append({
            "op": fn, "dtype": dtype, "action": "extend" if extend else "register",
            "kernel": (fn if fn in have else have[0]) if extend else fn,
            "native_dtypes": sorted(native[fn]),
            "called_as": sorted(acc["as"]),
            "zoo_calls": z.get("calls", 0), "zoo_time_ms": round(z.get("time_ns", 0) / 1e6, 3),
            "zoo_models": sorted(z.get("models", ())),
            "zoo_fell_back_in": sorted(zoo_fell.get((fn, dtype), ())),
            "fallback_calls": acc["calls"], "fallback_time_ms": round(acc["time_ns"] / 1e6, 3),
            "cases": cases.get((fn, dtype), 0),
        })
    items.sort(key=lambda x: (-len(x["zoo_fell_back_in"]), -x["zoo_time_ms"], -x["zoo_calls"],
                              -x["fallback_time_ms"], -x["fallback_calls"], -x["cases"],
                              x["op"], x["dtype"]))
    return {"zoo_models": list(zoo["models"]), "zoo_error": zoo.get("error", ""),
            "count": len(items), "items": items[:_STEPS_KEPT]}


def _should_findings(reqs: list[dict[str, Any]],
                     tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per SHOULD requirement not met (or waived, or unverified), lowest
    level first, with its failing tests."""
    by_req: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in tests:
        if t["outcome"] in outcomes.BAD:
            by_req[t["requirement"]].append(t)
    out = []
    for r in sorted(reqs, key=lambda r: (LEVELS.index(r["level"]), r["id"])):
        if r["strength"] != "SHOULD" or r["status"] not in ("not_met", "waived", "unverified"):
            continue
        bad = by_req.get(r["id"], [])
        out.append({"requirement": r["id"], "level": r["level"], "status": r["status"],
                    "text": r["text"], "why": r["why"], "count": len(bad),
                    "tests": [{"id": t["id"], "outcome": t["outcome"],
                               "message": _first_line(t.get("message", ""), 200)}
                              for t in bad[:_FINDING_TESTS_KEPT]]})
    return out


def _not_tested(reqs: list[dict[str, Any]], requested: str) -> list[dict[str, Any]]:
    """The requirements this run did not test, counted per level and reason."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in reqs:
        if r["status"] != "not_tested":
            continue
        if LEVELS.index(r["level"]) > LEVELS.index(requested):
            reason = f"the run stopped at {requested} (--level {requested})"
        else:
            reason = "no test of it was selected in this run (a -k, --ops or --models filter)"
        groups[(r["level"], reason)].append(r)
    return [{"level": lv, "reason": reason, "count": len(rs),
             "must": sum(r["strength"] == "MUST" for r in rs),
             "requirements": [r["id"] for r in rs]}
            for (lv, reason), rs in sorted(groups.items(), key=lambda g: LEVELS.index(g[0][0]))]


def build_report(*, target: dict[str, Any], host: dict[str, Any], options: dict[str, Any],
                 tests: list[dict[str, Any]], op_stats: list[dict[str, Any]],
                 stale: list[dict[str, str]], started: float, finished: float,
                 deselected: int, workers: int, restarts: int,
                 zoo: dict[str, Any] | None = None) -> dict[str, Any]:
    """`zoo`: the zoo's operator profile the next steps are ranked by (`zoo_profile()`,
    traced when needed if None)."""
    reqs = load_requirements()
    caps = set(target["capabilities"])
    req_status = _requirement_status(reqs, tests, caps)
    partial = bool(options.get("ops") or options.get("models"))
    level = _levels(req_status, options["level"], partial)
    level["certify_mode"] = bool(options.get("certify"))
    level["partial"] = partial
    for t in tests:
        t.setdefault("detail", "")
        if t["outcome"] == outcomes.PASS:
            t["detail"] = ""
    totals = {k: sum(r[k] for r in op_stats) for k in
              ("native", "decomposed", "cpu_fallback", "failed", "time_ns", "bytes_copied")}
    xpassed = [t["id"] for t in tests if t["outcome"] == outcomes.XPASS]
    report = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run": {
            "started": _iso(started), "finished": _iso(finished),
            "duration_s": round(finished - started, 2), "suite_version": host["suite"],
            "command": " ".join(sys.argv), "options": options, "workers": workers,
            "worker_restarts": restarts, "deselected_by_level": deselected,
        },
        "host": host,
        "plugin": target,
        "level": level,
        "summary": {
            "tests": len(tests),
            "outcomes": {o: sum(t["outcome"] == o for t in tests) for o in outcomes.OUTCOMES},
            "requirements": dict(Counter(r["status"] for r in req_status)),
        },
        "requirements": req_status,
        "tests": tests,
    }
    coverage = _coverage(tests)
    suspects = rank_suspects(tests)
    report.update({
        "blockers": _blockers(req_status, level, tests, suspects, target, options),
        "next_steps": _next_steps(op_stats, coverage, tests, zoo),
        "should_findings": _should_findings(req_status, tests),
        "not_tested": _not_tested(req_status, options["level"]),
        "coverage": coverage,
        "suspects": suspects,
        "op_stats": {"rows": op_stats, "totals": totals},
        "errors": _errors(tests),
        "expectations": {
            "file": options.get("expectations"),
            "applied": sum(1 for t in tests if t.get("expectation")),
            "stale": stale,
            "xpassed": xpassed,
        },
    })
    report["integrity"] = integrity.seal(report)
    return report
