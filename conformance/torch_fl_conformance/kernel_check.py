"""torchfl-conformance kernel: one operator, every sample and variant, in seconds.

The loop of a vendor writing a kernel: change it, rebuild, see at once which
dtype and which call form is wrong. `run --ops` certifies (L0, every non-op test,
a report); this command checks one operator and nothing else. It is the OpInfo
sweep of the suite (opinfo_sweep.evaluate, with variants.py's derived forms,
tolerances.py's bounds and comparison) run with every dtype as a primary one, so
every dtype gets every variant, on every sample op_db gives up to the sweep's
pool, and with a verdict per (op_db entry, dtype, check):

    PASS        every sample of the check matched the CPU within the tolerance
    FAIL        a result outside the tolerance, or the device raised where the
                CPU runs it (the first finding, the max abs/rel error seen and
                the tolerance the comparison used)
    NOT NATIVE  it ran, in part, on the CPU fallback: that is no pass of the
                plugin's kernel, whatever the values
    SKIP        with the reason (dtype not advertised, no such form, ...)
    CRASH / TIMEOUT / BLOCKED
                the process died or hung in the case (kernel_watch's trace names
                the kernel), or a later case needs the kernel that hung

OP names an op_db entry (`add`, `div.trunc_rounding`, `nn.functional.relu`) or an
ATen operator, with or without its overload (`aten::add`, `aten::add.Tensor`): the
op_db entries by that name or ATen name; with an overload, those whose CPU samples
call it.

The evaluation runs in a child process (this module run as a program), so a
kernel that kills the process or hangs costs its own case, not the answer: the
parent reads the child's results through protocol.py's messages (Collected, then
Started and Finished per case), charges a crash or a time limit to the case that
had started, and starts a fresh child for the rest (with the hung kernels blocked).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from torch_fl_conformance import outcomes, protocol
from torch_fl_conformance.session import DEFAULT_SEED, per_test_seed

__all__ = ["ALL", "CHECKS", "NOT_NATIVE", "KernelRequest", "KernelRun", "KernelUsageError",
           "VariantResult", "resolve", "run_kernel"]

NOT_NATIVE = "NOT NATIVE"
# The checks of one (op, dtype), in the order they are shown: the sweep's, less
# "runs" (each check reports its own device errors here).
CHECKS = ("output", "grad", "noncontiguous", "noncontiguous_grad", "offset", "broadcast",
          "inplace", "out")
ALL = "*"  # the variant of a row that stands for the whole case
# Verdicts that make the command fail; NOT NATIVE too under --require-native.
FAILING = frozenset({outcomes.FAIL, outcomes.CRASH, outcomes.TIMEOUT, outcomes.BLOCKED,
                     outcomes.NOT_RUN})
DEFAULT_TIMEOUT = 120.0  # seconds one (op, dtype) case may take
STARTUP_TIMEOUT = 300.0  # loading torch, the plugin and op_db in the child


class KernelUsageError(Exception):
    """OP names nothing the sweep can run; the message says what would."""


@dataclass
class VariantResult:
    """The verdict of one check of one (op_db entry, dtype)."""

    op: str
    dtype: str
    variant: str  # a name of CHECKS, or ALL for a verdict on the whole case
    verdict: str
    message: str = ""  # the finding, the skip reason, what fell back, or a note
    samples: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    tolerance: str = ""  # the bound the comparison used ("exact" for integers)
    how: str = ""  # native, decomposed or fallback (op statistics of its device runs)
    kernels: list[str] = field(default_factory=list)  # the plugin's kernels it ran


@dataclass
class KernelRequest:
    op: str
    plugin: str
    dtypes: list[str] | None = None  # None: every sweep dtype the CPU supports
    samples: int | None = None  # None: every sample of the sweep's pool
    seed: int = DEFAULT_SEED
    timeout: float = DEFAULT_TIMEOUT
    require_native: bool = False


# -- naming the operator ---------------------------------------------------------
@dataclass
class Selection:
    entries: list[str]  # op_db names
    schema: str = ""  # the ATen operator asked for ("" for an op_db name)
    note: str = ""


def _schema_calls(op: Any, schema: str) -> bool:
    """Whether one of the first CPU samples of an op_db entry calls `schema`."""
    import itertools

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Probe(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            seen.add(func.name())
            return func(*args, **(kwargs or {}))

    supported = sorted(op.supported_dtypes("cpu"), key=str)
    if not supported:
        return False
    dtype = torch.float32 if torch.float32 in supported else supported[0]
    try:
        for sample in itertools.islice(op.sample_inputs_func(op, "cpu", dtype,
                                                           requires_grad=False), 3):
            with contextlib.suppress(Exception), Probe():
                op(sample.input, *sample.args, **sample.kwargs)
            if any(_same_kernel(name, schema) for name in seen):
                return True
    except Exception:  # noqa: BLE001 - an entry whose samples fail calls nothing
        return False
    return False


def resolve(name: str) -> Selection:
    """The op_db entries OP names (see the module docstring)."""
    from torch_fl_conformance.opinfo_sweep import op_infos

    infos = op_infos()
    name = name.strip()
    if not name.startswith("aten::") and name in infos:
        return Selection([name])
    schema = name if name.startswith("aten::") else ""
    base = name.removeprefix("aten::")
    if schema:
        base = base.split(".", 1)[0]
        base = base[:-1] if base.endswith("_") and not base.endswith("__") else base
    found = [n for n, op in infos.items() if base in (op.name, op.aten_name)]
    if not found:
        names = sorted(set(infos) | {op.aten_name for op in infos.values()})
        close = difflib.get_close_matches(base, names, n=6, cutoff=0.6)
        hint = f" Close: {', '.join(close)}." if close else ""
        raise KernelUsageError(
            f"no op_db entry is named '{base}' or has the ATen name '{base}': name an op_db entry "
            f"(add, div.trunc_rounding, nn.functional.relu) or an ATen operator that has one "
            f"(aten::add, aten::add.Tensor).{hint}")
    if schema and "." in schema.removeprefix("aten::"):
        calling = [n for n in found if _schema_calls(infos[n], schema)]
        if calling:
            return Selection(calling, schema)
        return Selection(found, schema, f"no CPU sample of {', '.join(found)} calls {schema}; "
                                        "checking every op_db entry of that operator")
    return Selection(found, schema)


# -- verdicts --------------------------------------------------------------------
def tolerance_text(op: str, dtype: str, kind: str) -> str:
    """The bound tolerances.py compares `kind` results of `dtype` with."""
    from torch_fl_conformance.tolerances import tolerance

    b = tolerance(dtype, kind, op)
    if b is None:
        return "exact"
    text = f"atol={b.atol:g} rtol={b.rtol:g}"
    if b.of_max:
        text += f" of_max={b.of_max:g}"
    if b.of_cpu_error:
        text += f" of_cpu_error={b.of_cpu_error:g}"
    return f"{text} ({b.source or 'dtype'})"


def _not_applicable(check: str, op: Any, dtype: str, grad: bool) -> str:
    if check.endswith("grad") and not grad:
        return (f"no gradient: the CPU has no {dtype} backward of {op.name}"
                if op.supports_autograd else f"{op.name} is not differentiable in op_db")
    if check == "inplace":
        return f"op_db gives {op.name} no in-place form"
    if check == "out":
        return f"op_db says {op.name} takes no out="
    return "not applicable"


def _unrun(check: str, ev: Any) -> str:
    """Why a check that applies compared nothing."""
    if check == "grad" or check == "noncontiguous_grad":
        if ev.check("output").error or ev.forward == "error":
            return "nothing to compare: the forward raised on the device (see output)"
        if check == "grad":
            return "no sample with a differentiable, comparable output"
    if check != "output" and check != "grad":
        if ev.random:
            return ("random operator: its samples derive no variants (compared by "
                    "structure, finiteness and same-seed reproducibility)")
        if ev.shape_only:
            return "results compared by shape only (the CPU does not reproduce its own), " \
                   "so no variants"
    return f"no sample has a {check} form the CPU accepts"


def verdicts(ev: Any, op: Any, plugin: str, kernels: frozenset[str]) -> list[VariantResult]:
    """One VariantResult per check of an evaluated case (opinfo_sweep.Evaluation)."""
    from torch_fl_conformance.opinfo_sweep import capability_reason, checks_of

    case = ev.case
    rows = []
    applies = set(checks_of(case, op))
    if ev.samples == 0:
        why = (capability_reason(ev, plugin) if ev.unsupported_samples
               else f"no sample of {case.op} for {case.dtype} runs on the CPU")
        return [VariantResult(case.op, case.dtype, ALL, outcomes.SKIP, why)]
    for name in CHECKS:
        row = VariantResult(case.op, case.dtype, name, outcomes.SKIP)
        rows.append(row)
        if name not in applies:
            row.message = _not_applicable(name, op, case.dtype, case.grad)
            continue
        c = ev.checks.get(name)
        if c is None:
            row.message = _unrun(name, ev)
            continue
        row.samples, row.max_abs, row.max_rel, row.how = c.samples, c.max_abs, c.max_rel, c.how
        row.tolerance = tolerance_text(case.op, case.dtype,
                                       "grad" if name.endswith("grad") else "output")
        row.kernels = [k for k in c.ran_ops.get("native", ()) if k in kernels]
        fallback = c.ran_ops.get("fallback", [])
        if c.wrong or c.error:
            row.verdict = outcomes.FAIL
            row.message = c.wrong or f"raises on the device (the CPU runs it): {c.error}"
            if c.kernels:
                row.kernels = sorted({k for ks in c.kernels.values() for k in ks} & kernels)
            if fallback:
                row.message += f" (ran on the CPU fallback for {', '.join(fallback)})"
        elif c.samples == 0:
            row.message = _unrun(name, ev)
        elif c.how == "fallback":
            row.verdict = NOT_NATIVE
            row.message = f"ran on the CPU fallback for {', '.join(fallback)}"
        else:
            row.verdict = outcomes.PASS
            notes = []
            if c.how == "decomposed":
                notes.append(f"decomposed ({', '.join(c.ran_ops.get('decomposed', []))}) "
                             "into native kernels")
            if name == "output" and ev.random:
                notes.append("random: compared by structure, finiteness and reproducibility")
            elif name == "output" and ev.shape_only:
                notes.append("compared by shape only (the CPU does not reproduce its own "
                             "values, or op_db does not compare them)")
            row.message = "; ".join(notes)
    return rows


# -- the child: evaluates cases, reports through the protocol ---------------------
def _child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="torch_fl_conformance.kernel_check")
    p.add_argument("--op", required=True)
    p.add_argument("--plugin", required=True)
    p.add_argument("--events-fd", type=int, required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--dtypes", default="")
    p.add_argument("--samples", type=int, default=None)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--cases", default="", help="only these case ids (a restart)")
    p.add_argument("--block", action="append", default=[], metavar="KERNEL=REASON")
    args = p.parse_args(argv)

    from torch_fl_conformance import kernel_watch, opinfo_sweep
    from torch_fl_conformance.target import NoPluginChosen, host_info, load_target

    try:
        selection = resolve(args.op)
        target = load_target(args.plugin)
    except (KernelUsageError, NoPluginChosen) as exc:
        print(f"torchfl-conformance: {exc}", file=sys.stderr)
        return 2
    wanted = [d for d in args.dtypes.split(",") if d]
    cases = [opinfo_sweep.Case(c.op, c.dtype, c.grad, primary=True)
             for c in opinfo_sweep.cases(selection.entries)
             if c.op in selection.entries and (not wanted or c.dtype in wanted)]
    if args.cases:
        keep = set(args.cases.split(","))
        cases = [c for c in cases if c.id in keep]
    plugin_kernels = kernel_watch.plugin_kernels(target.handle)
    watch = kernel_watch.Watch(target.device_type, kernel_watch.Trace(args.trace),
                               plugin_kernels)
    for item in args.block:
        kernel, _, reason = item.partition("=")
        watch.block(kernel, reason)
    kernel_watch.install(watch)
    family = sorted(k for k in plugin_kernels if selection.schema and _family(k) ==
                    _family(selection.schema))
    fd = args.events_fd
    protocol.write(fd, protocol.Collected(
        ids=[c.id for c in cases], sha="", meta={c.id: {"op": c.op, "dtype": c.dtype}
                                                   for c in cases},
        deselected=0, stale=[], target=target.header(), host=host_info(),
        options={"entries": selection.entries, "schema": selection.schema,
                 "note": selection.note, "schema_kernels": family,
                 "dtypes": wanted, "samples": args.samples, "seed": args.seed},
        pid=os.getpid()))
    missing = target.sweep_dtypes()
    caps = frozenset(target.capabilities)
    budget = args.samples if args.samples is not None else opinfo_sweep.SAMPLE_POOL
    for case in cases:
        protocol.write(fd, protocol.Started(case.id, time.time()))
        t0 = time.perf_counter()
        op = opinfo_sweep.op_infos()[case.op]
        if missing[case.dtype]:
            rows = [VariantResult(case.op, case.dtype, ALL, outcomes.SKIP,
                                  f"{missing[case.dtype]} not advertised by "
                                  f"{target.plugin_name}")]
        else:
            try:
                ev = opinfo_sweep.evaluate(case, target.device(), budget,
                                           per_test_seed(args.seed, case.id), caps,
                                           variant_samples=budget)
                rows = verdicts(ev, op, target.plugin_name, plugin_kernels)
            except kernel_watch.KernelBlocked as exc:
                rows = [VariantResult(case.op, case.dtype, ALL, outcomes.BLOCKED,
                                      f"not run: it enters {exc.kernel}, which {exc.reason}",
                                      kernels=[exc.kernel])]
        worst = outcomes.FAIL if any(r.verdict in FAILING for r in rows) else outcomes.PASS
        protocol.write(fd, protocol.Finished(case.id, worst, time.perf_counter() - t0,
                                             data={"rows": [asdict(r) for r in rows]}))
    return 0


def _family(schema: str) -> str:
    """aten::add.Tensor, aten::add_.Tensor and aten::add.out -> "add"."""
    base = schema.removeprefix("aten::").split(".", 1)[0]
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def _same_kernel(name: str, schema: str) -> bool:
    """Whether ATen op `name` is `schema` or its functional, in-place or out= form
    (the bridge serves the three with one kernel): aten::add.Tensor for
    aten::add_.Tensor, any aten::add overload for aten::add.out."""
    overload = schema.partition(".")[2] or "default"
    return _family(name) == _family(schema) and (
        (name.partition(".")[2] or "default") == overload or overload.endswith("out"))


# -- the parent: runs children, charges crashes and hangs, prints ----------------
class _Child:
    def __init__(self, req: KernelRequest, work: Path, number: int, cases: list[str],
                 blocked: dict[str, str]) -> None:
        ev_r, ev_w = os.pipe()
        self.trace = str(work / f"child-{number}.trace")
        self.log_path = work / f"child-{number}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the child
        env = dict(os.environ)
        env["TORCH_FL_AUTOLOAD"] = "0"  # the child registers the plugin it was asked for
        env["PYTHONFAULTHANDLER"] = "1"  # a crash leaves the Python stack in the log
        env.setdefault("TORCH_FL_FALLBACK", "silent")  # the verdicts say what fell back
        cmd = [sys.executable, "-m", "torch_fl_conformance.kernel_check",
               "--op", req.op, "--plugin", req.plugin, "--events-fd", str(ev_w),
               "--trace", self.trace, "--seed", str(req.seed)]
        if req.dtypes:
            cmd += ["--dtypes", ",".join(req.dtypes)]
        if req.samples is not None:
            cmd += ["--samples", str(req.samples)]
        if cases:
            cmd += ["--cases", ",".join(cases)]
        for kernel, reason in blocked.items():
            cmd += ["--block", f"{kernel}={reason}"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, pass_fds=(ev_w,), env=env,
                                     start_new_session=True)
        os.close(ev_w)
        self.reader = protocol.LineReader(ev_r)
        self.fd = ev_r

    def running_kernels(self) -> list[str]:
        from torch_fl_conformance import kernel_watch

        return kernel_watch.running(kernel_watch.Trace.read(self.trace))

    def log_tail(self, lines: int = 8) -> str:
        """The end of the child's output; after a fatal signal, what came before
        Python's report of it (the plugin's own last words)."""
        self.log.flush()
        text = self.log_path.read_bytes()[-16000:].decode("utf-8", "replace").splitlines()
        fatal = next((i for i, line in enumerate(text)
                      if line.startswith("Fatal Python error")), None)
        if fatal is not None:
            return "\n".join(text[max(0, fatal - lines + 1):fatal + 1])
        return "\n".join(text[-lines:])

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.log.close()


@dataclass
class KernelRun:
    collected: protocol.Collected | None = None
    rows: list[VariantResult] = field(default_factory=list)
    done: set[str] = field(default_factory=set)  # case ids with their rows
    restarts: int = 0
    wall_s: float = 0.0
    error: str = ""  # the command could not start (usage)


def run_kernel(req: KernelRequest, progress: IO[str] | None = None) -> KernelRun:
    """Evaluates every case of req.op in child processes; `progress` gets the table
    as each case finishes."""
    t0 = time.perf_counter()
    result = KernelRun()
    work = Path(tempfile.mkdtemp(prefix="torchfl-kernel-"))
    pending: list[str] | None = None  # case ids not finished (None: before Collected)
    blocked: dict[str, str] = {}  # kernel -> why (it hung)
    try:
        while pending is None or pending:
            child = _Child(req, work, result.restarts, pending or [], blocked)
            try:
                gone = _follow(child, req, result, progress)
            finally:
                child.close()
            if result.collected is None:
                result.error = gone.log or f"the check {gone.why}"
                if child.proc.returncode != 2:  # 2: a usage error, the log says which
                    result.error = f"the check could not start ({gone.why}):\n{result.error}"
                break
            if pending is None:
                pending = list(result.collected.ids)
            pending = [i for i in pending if i not in result.done]
            if gone.case is not None:
                meta = result.collected.meta.get(gone.case, {})
                message = gone.why + (f" in the plugin's kernel(s) {', '.join(gone.kernels)}"
                                      if gone.kernels else "")
                if gone.log and gone.outcome == outcomes.CRASH:
                    message += "; its output ends:\n" + gone.log
                row = VariantResult(meta.get("op", gone.case), meta.get("dtype", ""), ALL,
                                    gone.outcome, message, kernels=gone.kernels)
                result.rows.append(row)
                result.done.add(gone.case)
                pending.remove(gone.case)
                if progress is not None:
                    progress.write(render_rows([row]) + "\n")
                if gone.outcome == outcomes.TIMEOUT:
                    for k in gone.kernels:
                        blocked.setdefault(k, f"did not return in {meta.get('op')} "
                                              f"{meta.get('dtype')} (one hang costs one "
                                              "time limit)")
            if pending:
                if result.restarts >= len(result.collected.ids):
                    # A child that dies between cases every time: say so, case by case.
                    for case_id in pending:
                        meta = result.collected.meta.get(case_id, {})
                        result.rows.append(VariantResult(
                            meta.get("op", case_id), meta.get("dtype", ""), ALL,
                            outcomes.NOT_RUN, f"not run: the check process {gone.why} "
                                              f"before it started; its output ends:\n"
                                              f"{gone.log}"))
                    break
                result.restarts += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.wall_s = time.perf_counter() - t0
    return result


@dataclass
class _Gone:
    """How a child ended: `case` is the one it had started and not finished."""

    why: str
    outcome: str = outcomes.CRASH
    case: str | None = None
    kernels: list[str] = field(default_factory=list)
    log: str = ""


def _follow(child: _Child, req: KernelRequest, result: KernelRun,
            progress: IO[str] | None) -> _Gone:
    """Reads a child's messages until it exits or overruns its time limit."""
    from torch_fl_conformance.runner import _describe_exit

    current: str | None = None
    collected = False
    since = time.monotonic()
    sel = selectors.DefaultSelector()
    sel.register(child.fd, selectors.EVENT_READ)
    try:
        while True:
            limit = req.timeout if collected else STARTUP_TIMEOUT
            left = limit - (time.monotonic() - since)
            if left <= 0:
                kernels = child.running_kernels()
                child.kill()
                return _Gone(f"did not finish within {limit:g} s (--timeout)",
                             outcomes.TIMEOUT, current, kernels, child.log_tail())
            if not sel.select(timeout=min(left, 1.0)):
                continue
            for msg in child.reader.read():
                since = time.monotonic()
                if isinstance(msg, protocol.Collected):
                    collected = True
                    if result.collected is None:
                        result.collected = msg
                        if progress is not None:
                            progress.write(render_header(msg) + "\n")
                elif isinstance(msg, protocol.Started):
                    current = msg.id
                elif isinstance(msg, protocol.Finished):
                    rows = [VariantResult(**r) for r in msg.data.get("rows", [])]
                    result.rows += rows
                    result.done.add(msg.id)
                    current = None
                    if progress is not None:
                        progress.write(render_rows(rows) + "\n")
                        progress.flush()
            if child.reader.closed:
                kernels = child.running_kernels() if current is not None else []
                child.proc.wait()
                return _Gone(f"the process {_describe_exit(child.proc.returncode)}",
                             outcomes.CRASH, current, kernels, child.log_tail())
    finally:
        sel.close()


# -- rendering -----------------------------------------------------------------------
def render_header(c: protocol.Collected) -> str:
    t, o = c.target, c.options
    lines = [f"{t['plugin_name']} {t['version']} ({t['vendor']}) as '{t['device_type']}', "
             f"ABI {t['abi']}: op_db {', '.join(o['entries'])}"
             + (f" for {o['schema']}" if o.get("schema") else "")
             + f"; {len(c.ids)} dtype case(s), seed {o['seed']}"]
    if o.get("note"):
        lines.append(f"note: {o['note']}")
    if o.get("schema"):
        ks = o.get("schema_kernels") or []
        if o["schema"] not in ks:
            lines.append(f"note: {t['plugin_name']} registers no kernel {o['schema']}"
                         + (f" (it has {', '.join(ks)})" if ks else "")
                         + ": what does not decompose runs on the CPU fallback")
    return "\n".join(lines)


_CASE_W, _VARIANT_W, _VERDICT_W = 22, 19, 11


def _num(x: float, measured: bool) -> str:
    return f"{x:.2g}" if measured else "-"


def _indented(text: str) -> str:
    return text.replace("\n", "\n" + " " * (_CASE_W + 4))


def render_rows(rows: list[VariantResult]) -> str:
    """The verdict lines of some rows: case, variant, verdict, then samples, errors,
    tolerance and the kernels (or the reason), the finding on a line of its own."""
    out = []
    for r in rows:
        case = f"{r.op} {r.dtype}"
        head = f"{case:<{_CASE_W}} {r.variant:<{_VARIANT_W}} {r.verdict:<{_VERDICT_W}}"
        if r.variant == ALL or r.verdict == outcomes.SKIP:
            out.append(_indented(f"{head} {r.message}"))
            continue
        # An exact comparison measures no error: a failing one shows none.
        measured = bool(r.samples) and (r.tolerance != "exact" or r.verdict != outcomes.FAIL)
        via = r.how + (f"; plugin kernels {', '.join(r.kernels)}" if r.kernels else "")
        line = (f"{head} {r.samples:>3}  abs {_num(r.max_abs, measured):<8} "
                f"rel {_num(r.max_rel, measured):<8} tol {r.tolerance}  [{via}]")
        if r.message:
            line += "\n" + " " * (_CASE_W + 4) + _indented(r.message)
        out.append(line)
    return "\n".join(out)


def summary(run: KernelRun, req: KernelRequest) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in run.rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    failing = FAILING | ({NOT_NATIVE} if req.require_native else set())
    return {"verdicts": counts, "failed": sum(counts.get(v, 0) for v in failing),
            "wall_s": round(run.wall_s, 2), "restarts": run.restarts}


def to_json(run: KernelRun, req: KernelRequest) -> dict[str, Any]:
    c = run.collected
    return {"op": req.op, "plugin": c.target if c else None,
            "entries": c.options["entries"] if c else [],
            "schema": c.options["schema"] if c else "",
            "note": c.options["note"] if c else "",
            "rows": [asdict(r) for r in run.rows], "summary": summary(run, req)}


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
