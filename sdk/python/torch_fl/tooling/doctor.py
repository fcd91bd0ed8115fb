"""`torchfl doctor` / `torch_fl.test_compatibility()`: is this install healthy?

A quick check of the registered plugin (registering one first when none is):
load, ABI, devices, a memory round trip, a few kernels against the CPU,
autograd, streams, the fallback state and probed settings. Every check says
what is wrong and what to do. It takes seconds; the conformance suite is the
thorough certification.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = ["CheckResult", "CompatibilityResult", "test_compatibility"]

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


@dataclass
class CheckResult:
    name: str
    status: str  # PASS, WARN, FAIL or SKIP
    detail: str
    remedy: str = ""
    seconds: float = 0.0


@dataclass
class CompatibilityResult:
    """The outcome of test_compatibility(); `ok` is False when any check failed."""

    plugin: dict[str, Any] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.status != FAIL for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    def check(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "plugin": self.plugin, "seconds": self.seconds,
                "checks": [asdict(c) for c in self.checks]}

    def __str__(self) -> str:
        who = self.plugin.get("summary", "no plugin")
        lines = [f"torch-fl compatibility check: {who}"]
        for c in self.checks:
            lines.append(f"  {c.status:<4}  {c.name:<10} {c.detail}")
            if c.remedy and c.status in (FAIL, WARN):
                lines.append(f"        {'':<10} what to do: {c.remedy}")
        n_fail, n_warn = len(self.failures), sum(c.status == WARN for c in self.checks)
        verdict = "healthy" if self.ok else f"{n_fail} check(s) failed"
        if n_warn:
            verdict += f", {n_warn} warning(s)"
        lines.append(f"result: {verdict} ({self.seconds:.1f} s)")
        return "\n".join(lines)


class _CheckFailed(Exception):
    def __init__(self, detail: str, remedy: str = "") -> None:
        super().__init__(detail)
        self.detail, self.remedy = detail, remedy


class _Warn(Exception):
    def __init__(self, detail: str, remedy: str = "") -> None:
        super().__init__(detail)
        self.detail, self.remedy = detail, remedy


def _run(result: CompatibilityResult, name: str, fn: Callable[[], str],
         unexpected_remedy: str) -> bool:
    start = time.perf_counter()
    try:
        detail = fn()
        status, remedy = PASS, ""
    except _CheckFailed as exc:
        status, detail, remedy = FAIL, exc.detail, exc.remedy
    except _Warn as exc:
        status, detail, remedy = WARN, exc.detail, exc.remedy
    except Exception as exc:  # noqa: BLE001 - a broken plugin may raise anything: report it
        status, detail, remedy = FAIL, f"{type(exc).__name__}: {exc}", unexpected_remedy
    result.checks.append(CheckResult(name, status, detail, remedy, time.perf_counter() - start))
    return status != FAIL


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""


def _close(actual: Any, expected: Any, rtol: float, atol: float) -> tuple[bool, float]:
    import torch

    actual = actual.detach().cpu()
    expected = expected.detach()
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False, float("inf")
    err = (actual.double() - expected.double()).abs()
    ok = bool(torch.all(err <= atol + rtol * expected.double().abs()))
    return ok, float(err.max()) if err.numel() else 0.0


def _load(plugin: str | None, result: CompatibilityResult) -> Any:
    import torch_fl
    from torch_fl._registration import autoload_best_plugin

    handle = torch_fl.get_plugin()
    if handle is not None and plugin not in (None, handle.name, handle.library):
        raise _CheckFailed(
            f"this process already runs plugin '{handle.name}' and PyTorch allows one "
            f"PrivateUse1 backend per process, so '{plugin}' cannot be checked here",
            f"run `torchfl doctor --plugin {plugin}` (a fresh process) or "
            f"TORCH_FL_AUTOLOAD=0 python -c \"import torch_fl; "
            f"torch_fl.test_compatibility('{plugin}')\"")
    if handle is None:
        try:
            if plugin is None:
                handle = autoload_best_plugin()
            elif os.sep in plugin or plugin.endswith(".so"):
                name = os.path.basename(plugin).removeprefix("lib").split(".")[0]
                handle = torch_fl.register_device_plugin(name, plugin)
            else:
                handle = torch_fl.register_device_plugin(plugin)
        except Exception as exc:  # noqa: BLE001 - every load failure is reported
            raise _CheckFailed(
                f"the plugin did not load: {type(exc).__name__}: {exc}",
                "`torchfl list` shows every plugin torch-fl can find and why each fails to load; "
                "reinstall the plugin or fix TORCH_FL_PLUGINS") from None
    if handle is None:
        raise _CheckFailed(
            "no plugin is installed",
            "install a plugin package (e.g. `pip install ./reference_backend` for flemu) or "
            "set TORCH_FL_PLUGINS=name=/path/to/lib.so")
    result.plugin = {
        "name": handle.name, "plugin_name": handle.plugin_name, "version": handle.version,
        "vendor": handle.vendor, "library": handle.library, "abi": list(handle.abi),
        "host_abi": list(handle.host_abi), "devices": len(handle.devices),
        "summary": f"{handle.plugin_name} {handle.version} as device '{handle.name}'",
    }
    return handle


def _own_kernel_cases() -> list[tuple[str, Callable[..., Any], float, float]]:
    """Common float32 ops with their tolerances, used when the conformance suite
    (and so its L0 smoke table) is not installed."""
    import torch

    return [
        ("add", lambda a, b, m: a + b, 1e-6, 1e-6),
        ("mul", lambda a, b, m: a * b, 1e-6, 1e-6),
        ("div", lambda a, b, m: a / (b.abs() + 1), 1e-5, 1e-6),
        ("mm", lambda a, b, m: a @ m, 1e-4, 1e-4),
        ("addmm", lambda a, b, m: torch.addmm(b[:, :32], a, m), 1e-4, 1e-4),
        ("sum", lambda a, b, m: a.sum(dim=1), 1e-4, 1e-4),
        ("mean", lambda a, b, m: a.mean(), 1e-5, 1e-5),
        ("relu", lambda a, b, m: torch.relu(a), 0.0, 0.0),
        ("softmax", lambda a, b, m: torch.softmax(a, dim=-1), 1e-5, 1e-6),
        ("where", lambda a, b, m: torch.where(a > 0, a, b), 0.0, 0.0),
        ("cat", lambda a, b, m: torch.cat([a, b], dim=0), 0.0, 0.0),
        ("index_select", lambda a, b, m: a.index_select(0, torch.arange(3, device=a.device)),
         0.0, 0.0),
    ]


def _smoke_level() -> tuple[dict[str, Callable[..., Any]], Callable[..., Any]] | None:
    """The API table of the conformance suite's L0 smoke level and its CPU
    comparison, or None when the suite is not installed."""
    import importlib.util

    try:
        import torch_fl_conformance
        from torch_fl_conformance.tolerances import compare
    except ImportError:
        return None
    path = Path(torch_fl_conformance.__file__).parent / "suite" / "L0" / "test_smoke.py"
    spec = importlib.util.spec_from_file_location("_torchfl_doctor_smoke", path)
    if spec is None or spec.loader is None or not path.exists():
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - a suite that does not import leaves our own cases
        return None
    apis = getattr(module, "APIS", None)
    return (dict(apis), compare) if isinstance(apis, dict) and apis else None


def test_compatibility(plugin: str | None = None, verbose: bool = True,
                       file: TextIO | None = None, max_devices: int = 4) -> CompatibilityResult:
    """Checks that the plugin works in this process and prints what is wrong
    and what to do. `plugin` (a name or a library path) is registered when no
    plugin is; by default the autoloaded one is checked. Returns the result;
    `result.ok` is False when any check failed."""
    import torch

    import torch_fl

    start = time.perf_counter()
    result = CompatibilityResult()
    state: dict[str, Any] = {}

    def load() -> str:
        h = _load(plugin, result)
        state["handle"] = h
        detail = f"{h.plugin_name} {h.version} by {h.vendor} from {h.library}"
        if h.rejected_kernels:
            shown = "; ".join(f"{op}: {why}" for op, why in h.rejected_kernels[:3])
            raise _Warn(f"{detail}; {len(h.rejected_kernels)} kernel(s) not registered ({shown})",
                        "fix those kernels' schema names or flags in the plugin")
        return detail

    ok = _run(result, "load", load, "reinstall the plugin; `torchfl list` shows load errors")
    if not ok:
        for name in ("abi", "devices", "memory", "kernels", "autograd", "streams", "fallback",
                     "tunables"):
            result.checks.append(CheckResult(name, SKIP, "the plugin did not load"))
        result.seconds = time.perf_counter() - start
        if verbose:
            print(result, file=file or sys.stdout)
        return result
    h = state["handle"]
    dev = h.name
    module = getattr(torch, dev)
    n_dev = min(len(h.devices), max_devices)

    def abi() -> str:
        (pmaj, pmin), (hmaj, hmin) = h.abi, h.host_abi
        if pmaj != hmaj:
            raise _CheckFailed(f"plugin ABI {pmaj}.{pmin}, host ABI {hmaj}.{hmin}",
                               "rebuild the plugin against this torch-fl's headers")
        if pmin > hmin:
            raise _Warn(f"plugin built for ABI {pmaj}.{pmin}, newer than this torch-fl's "
                        f"{hmaj}.{hmin}: what the plugin added after {hmaj}.{hmin} goes unused",
                        "upgrade torch-fl")
        return f"plugin {pmaj}.{pmin}, host {hmaj}.{hmin}"

    def devices() -> str:
        count = module.device_count()
        if count < 1:
            raise _CheckFailed("the plugin reports no devices",
                               "check the driver and the plugin's configuration "
                               "(flemu: FLEMU_DEVICE_COUNT)")
        if count != len(h.devices):
            raise _CheckFailed(f"torch.{dev}.device_count() is {count} but the plugin "
                               f"reported {len(h.devices)} devices at load",
                               "report this as a bridge bug")
        if not torch.accelerator.is_available() or \
                torch.accelerator.current_accelerator().type != dev:
            raise _CheckFailed(f"torch.accelerator does not see '{dev}' "
                               f"(current: {torch.accelerator.current_accelerator()})",
                               "another accelerator extension took over; load only one")
        bad = [f"{dev}:{p.index} ({p.name}): total memory {p.total_memory}, alignment "
               f"{p.memory_alignment}" for p in h.devices
               if p.total_memory <= 0 or p.memory_alignment <= 0
               or p.memory_alignment & (p.memory_alignment - 1)]
        if bad:
            raise _CheckFailed("implausible device properties: " + "; ".join(bad),
                               "fix Device_GetProperties in the plugin")
        return f"{count} device(s): " + ", ".join(
            f"{dev}:{p.index} {p.name} {p.total_memory / 2**30:.1f} GiB" for p in h.devices)

    def memory() -> str:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(1 << 16, generator=g)
        checked = []
        for i in range(n_dev):
            before = module.memory_allocated(i)
            y = x.to(f"{dev}:{i}")
            if module.memory_allocated(i) <= before:
                raise _CheckFailed(f"{dev}:{i}: memory_allocated did not grow after allocating "
                                   f"{x.numel() * 4} bytes", "check the bridge's allocator stats")
            back = y.cpu()
            if not torch.equal(back, x):
                raise _CheckFailed(f"{dev}:{i}: a host -> device -> host copy changed the data",
                                   "fix Memory_Copy (HOST_TO_DEVICE / DEVICE_TO_HOST)")
            pinned = x.pin_memory()
            z = pinned.to(f"{dev}:{i}", non_blocking=True)
            module.synchronize(i)
            if not torch.equal(z.cpu(), x):
                raise _CheckFailed(f"{dev}:{i}: a non-blocking copy from pinned memory "
                                   "changed the data", "fix stream-ordered Memory_Copy")
            zeros = torch.zeros(4096, device=f"{dev}:{i}")
            if bool(zeros.cpu().any()):
                raise _CheckFailed(f"{dev}:{i}: torch.zeros is not all zeros", "fix Memory_Set")
            checked.append(f"{dev}:{i}")
            del y, z, zeros
        caps = set(h.devices[0].capabilities)
        dtypes = [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float32]
        dtypes += [d for d, cap in ((torch.float16, "fp16"), (torch.bfloat16, "bf16"),
                                    (torch.float64, "fp64")) if cap in caps]
        for dt in dtypes:
            src = (torch.randint(-100, 100, (4, 33), generator=g).to(dt) if not dt.is_floating_point
                   else torch.randn(4, 33, generator=g).to(dt))
            back = src.to(f"{dev}:0").t().contiguous().cpu()
            if not torch.equal(back, src.t().contiguous()):
                raise _CheckFailed(f"{dev}:0: a {dt} round trip (with a transposed copy on the "
                                   "device) changed the data",
                                   f"fix Memory_Copy or the plugin's copy kernel for {dt}")
        checked.append(f"{len(dtypes)} dtypes")
        if n_dev > 1:
            a = x.to(f"{dev}:0").to(f"{dev}:1")
            if not torch.equal(a.cpu(), x):
                raise _CheckFailed(f"a {dev}:0 -> {dev}:1 copy changed the data",
                                   "fix PEER copies or Device_CanAccessPeer")
            checked.append("0->1")
        return f"{x.numel() * 4 // 1024} KiB round trips bit-exact on {', '.join(checked)}"

    def kernels() -> str:
        smoke = _smoke_level()
        wrong: list[str] = []
        with torch_fl.fallback_mode("silent"), torch_fl.op_stats_scope() as scope:
            if smoke is not None:
                apis, compare = smoke
                g = torch.Generator().manual_seed(7)
                x, y, m = (torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g),
                           torch.randn(5, 3, generator=g))
                dx, dy, dm = x.to(dev), y.to(dev), m.to(dev)
                for name, fn in apis.items():
                    try:
                        ref = fn("cpu", x, y, m)
                        out = torch.utils._pytree.tree_map(
                            lambda t: t.cpu() if isinstance(t, torch.Tensor) else t,
                            fn(dev, dx, dy, dm))
                        bad, _, _ = compare(out, ref, "output", None)
                    except Exception as exc:  # noqa: BLE001 - one broken kernel must not hide the others
                        wrong.append(f"{name} raised {type(exc).__name__}: {_first_line(exc)}")
                        continue
                    if bad:
                        wrong.append(f"{name} ({bad[0].where}: {bad[0].message})")
                what = f"{len(apis)} APIs of the conformance L0 smoke level"
            else:
                g = torch.Generator().manual_seed(1)
                a, b, m = (torch.randn(64, 48, generator=g), torch.randn(64, 48, generator=g),
                           torch.randn(48, 32, generator=g))
                da, db, dm = (t.to(dev) for t in (a, b, m))
                own_cases = _own_kernel_cases()
                for name, fn, rtol, atol in own_cases:
                    try:
                        good, err = _close(fn(da, db, dm), fn(a, b, m), rtol, atol)
                    except Exception as exc:  # noqa: BLE001 - one broken kernel must not hide the others
                        wrong.append(f"{name} raised {type(exc).__name__}: {_first_line(exc)}")
                        continue
                    if not good:
                        wrong.append(f"{name} (max error {err:.3g})")
                what = (f"{len(own_cases)} common float32 ops (conformance suite not "
                        "installed: torch-fl's own cases)")
            module.synchronize()
        if wrong:
            raise _CheckFailed(f"{len(wrong)} wrong or failing: " + "; ".join(wrong),
                               "run `torchfl-conformance run --plugin " + dev +
                               " --level L1` for the failing kernels' details")
        t = scope.table.totals()
        fallbacks = sorted({r.op for r in scope.table.fallbacks()})
        detail = (f"{what} match the CPU; {t.native} native, {t.decomposed} decomposed, "
                  f"{t.cpu_fallback} CPU-fallback calls")
        state["fallbacks"] = fallbacks
        if fallbacks:
            detail += f" (fallback: {', '.join(fallbacks)})"
        return detail

    def autograd() -> str:
        torch.manual_seed(0)
        cpu_net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                      torch.nn.Linear(32, 4))
        dev_net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                      torch.nn.Linear(32, 4)).to(dev)
        dev_net.load_state_dict(cpu_net.state_dict())
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(2))
        with torch_fl.fallback_mode("silent"):
            cpu_net(x).pow(2).mean().backward()
            dev_net(x.to(dev)).pow(2).mean().backward()
        wrong = []
        for (name, p_cpu), p_dev in zip(cpu_net.named_parameters(), dev_net.parameters()):
            if p_dev.grad is None:
                wrong.append(f"{name}: no gradient")
                continue
            good, err = _close(p_dev.grad, p_cpu.grad, 1e-3, 1e-5)
            if not good:
                wrong.append(f"{name} (max error {err:.3g})")
        if wrong:
            raise _CheckFailed("gradients of a 2-layer MLP differ from the CPU: " + ", ".join(wrong),
                               "check the backward kernels (mm, threshold_backward, sum) with "
                               f"`torchfl-conformance run --plugin {dev} --level L1`")
        return "gradients of a 2-layer MLP match the CPU within 1e-3"

    def streams() -> str:
        s = torch.Stream(device=f"{dev}:0")
        x = torch.arange(1024, dtype=torch.float32, device=f"{dev}:0")
        start_ev = torch.Event(device=f"{dev}:0", enable_timing=True)
        end_ev = torch.Event(device=f"{dev}:0", enable_timing=True)
        s.wait_stream(torch.accelerator.current_stream())  # x is produced on the current stream
        with s:
            start_ev.record(s)
            y = x * 2
            end_ev.record(s)
        end_ev.synchronize()
        if not end_ev.query():
            raise _CheckFailed("an event reports not complete after synchronize()",
                               "fix Event_Synchronize / Event_Query")
        ms = start_ev.elapsed_time(end_ev)
        torch.accelerator.current_stream().wait_stream(s)
        if not torch.equal(y.cpu(), torch.arange(1024, dtype=torch.float32) * 2):
            raise _CheckFailed("work on a side stream gave a wrong result",
                               "check stream ordering in the plugin")
        module.synchronize()
        return f"side stream, events and elapsed time ({ms:.3f} ms) work"

    def fallback() -> str:
        mode = torch_fl.get_fallback_mode()
        disabled = os.environ.get("TORCH_FL_DISABLE_KERNELS", "").strip()
        detail = f"mode '{mode}', {len(h.kernels)} native kernel overloads"
        if disabled:
            detail += f", disabled by TORCH_FL_DISABLE_KERNELS: {disabled}"
        seen = state.get("fallbacks", [])
        if mode == "silent":
            raise _Warn(detail + "; CPU fallbacks happen without any notice",
                        "set TORCH_FL_FALLBACK=warn (or error to find every fallback)")
        if seen:
            detail += f"; common ops on the CPU fallback: {', '.join(seen)}"
        return detail

    def tunables() -> str:
        if not h.groups.get("tunables"):
            return "the plugin has no tunables group (nothing to probe)"
        from torch_fl.tooling import probe

        cached = [d for d in range(len(h.devices))
                  if probe.cache_path(h.plugin_name, h.version, d, h.devices[d].name).exists()]
        values = {t.name: probe.get_tunable(t.name, 0) for t in probe.list_tunables(0)}
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        if not cached:
            return f"defaults in use ({shown}); `torchfl probe` tunes them for this machine"
        return f"probed settings cached for device(s) {cached}; device 0: {shown}"

    for name, fn, remedy in (
        ("abi", abi, "rebuild the plugin against this torch-fl"),
        ("devices", devices, "check the plugin's device enumeration"),
        ("memory", memory, "check the plugin's memory functions"),
        ("kernels", kernels, f"run `torchfl-conformance run --plugin {dev}` for details"),
        ("autograd", autograd, f"run `torchfl-conformance run --plugin {dev}` for details"),
        ("streams", streams, "check the plugin's stream and event functions"),
        ("fallback", fallback, "check TORCH_FL_FALLBACK"),
        ("tunables", tunables, "run `torchfl probe` again or delete the probe cache"),
    ):
        _run(result, name, fn, remedy)
    result.seconds = time.perf_counter() - start
    if verbose:
        print(result, file=file or sys.stdout)
    return result


# pytest must not collect this function when a test module imports it by name.
test_compatibility.__test__ = False  # type: ignore[attr-defined]
