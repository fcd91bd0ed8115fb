"""`torchfl list`: every plugin torch-fl can find, and whether each one loads.

PyTorch allows one PrivateUse1 backend per process, so each candidate is
loaded in its own short-lived interpreter (with TORCH_FL_AUTOLOAD=0, so only
that candidate is registered there); this process never loads any of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from torch_fl._discovery import PluginSpec, discover_plugins

__all__ = ["PluginStatus", "check_plugin", "format_listing", "list_plugins"]

_MARKER = "TORCHFL-LIST "
DEFAULT_TIMEOUT = 120.0


@dataclass
class PluginStatus:
    """One candidate plugin and what loading it in a fresh process showed."""

    name: str
    library: str
    source: str
    priority: int
    ok: bool
    reason: str = ""  # why it failed, "" when it loaded
    error: str = ""  # exception class name when it failed
    unavailable: bool = False  # it loads, but its hardware or driver is absent here
    plugin_name: str = ""
    vendor: str = ""
    version: str = ""
    abi: tuple[int, int] | None = None
    host_abi: tuple[int, int] | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    kernels: int = 0
    rejected_kernels: int = 0
    custom_ops: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _child(spec_json: str) -> None:
    """Runs in the fresh interpreter: registers one plugin, prints what it is."""
    spec = json.loads(spec_json)
    try:
        import torch_fl

        h = torch_fl.register_device_plugin(spec["name"], spec["library"])
        out: dict[str, Any] = {
            "ok": True, "plugin_name": h.plugin_name, "vendor": h.vendor, "version": h.version,
            "abi": list(h.abi), "host_abi": list(h.host_abi),
            "devices": [{"index": d.index, "name": d.name, "total_memory": d.total_memory,
                         "capabilities": list(d.capabilities)} for d in h.devices],
            "groups": [g for g, present in h.groups.items() if present],
            "kernels": len(h.kernels), "rejected_kernels": len(h.rejected_kernels),
            "custom_ops": len(h.custom_ops),
        }
    except Exception as exc:  # noqa: BLE001 - every failure is a result to report
        from torch_fl.errors import PluginUnavailableError

        out = {"ok": False, "error": type(exc).__name__, "reason": str(exc),
               "unavailable": isinstance(exc, PluginUnavailableError)}
    print(_MARKER + json.dumps(out), flush=True)


def check_plugin(spec: PluginSpec, timeout: float = DEFAULT_TIMEOUT) -> PluginStatus:
    """Loads `spec` in a fresh interpreter and reports PASS/FAIL with the reason."""
    status = PluginStatus(spec.name, spec.library, spec.source, spec.priority, ok=False)
    if spec.error is not None:
        status.reason = spec.error
        status.error = "PluginSpecError"
        return status
    env = dict(os.environ, TORCH_FL_AUTOLOAD="0", TORCH_FL_OP_STATS="")
    payload = json.dumps({"name": spec.name, "library": spec.library})
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "torch_fl.tooling.listing", payload],
            env=env, capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        status.error = "Timeout"
        status.reason = f"loading did not finish within {timeout:.0f} s (the plugin hangs in " \
                        "Plugin_Initialize or device enumeration)"
        return status
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_MARKER)), None)
    if line is None:
        if proc.returncode < 0:
            sig = signal.Signals(-proc.returncode).name
            status.error = "Crash"
            status.reason = f"the process loading it died with {sig}"
        else:
            status.error = "Crash"
            status.reason = f"the process loading it exited with code {proc.returncode}"
        tail = proc.stderr.strip().splitlines()[-3:]
        if tail:
            status.reason += ": " + " | ".join(tail)
        return status
    result = json.loads(line[len(_MARKER):])
    status.ok = bool(result.pop("ok"))
    for key, value in result.items():
        if key in ("abi", "host_abi"):
            value = tuple(value)
        setattr(status, key, value)
    return status


def list_plugins(timeout: float = DEFAULT_TIMEOUT, jobs: int = 2) -> list[PluginStatus]:
    """Every discovered plugin, in autoload order, with its load result."""
    specs = discover_plugins()
    if not specs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(specs)))) as pool:
        return list(pool.map(lambda s: check_plugin(s, timeout), specs))


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def format_listing(statuses: list[PluginStatus]) -> str:
    if not statuses:
        return (
            "no plugins found: torch-fl looks at `torch_fl.plugins` entry points of installed "
            "packages and at TORCH_FL_PLUGINS (name=/path/lib.so[@priority], ':'-separated)"
        )
    lines = [(f"{len(statuses)} plugin(s) found, in autoload order "
              "(each loaded in a fresh process):")]
    for s in statuses:
        tag = "PASS" if s.ok else "UNAVAILABLE" if s.unavailable else "FAIL"
        head = f"{tag}  {s.name}"
        if s.ok:
            abi = f"{s.abi[0]}.{s.abi[1]}" if s.abi else "?"
            head += f"  {s.plugin_name} {s.version} by {s.vendor}, ABI {abi}"
        head += f"  (priority {s.priority}, {s.source or 'unknown source'})"
        lines.append(head)
        lines.append(f"      library: {s.library or '-'}")
        if not s.ok:
            lines.append(f"      reason: {s.error}: {s.reason}")
            continue
        for d in s.devices:
            caps = ", ".join(d["capabilities"]) or "none"
            lines.append(f"      {s.name}:{d['index']}: {d['name']}, {_gib(d['total_memory'])}, "
                         f"capabilities: {caps}")
        if not s.devices:
            lines.append("      no devices")
        groups = ", ".join(s.groups) or "none"
        extra = f", {s.rejected_kernels} rejected" if s.rejected_kernels else ""
        lines.append(f"      optional groups: {groups}; {s.kernels} native kernels{extra}, "
                     f"{s.custom_ops} custom ops")
    chosen = next((s for s in statuses if s.ok), None)
    lines.append(
        f"autoload registers: {chosen.name}" if chosen else
        "autoload registers: nothing (no plugin loads)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    _child(sys.argv[1])
