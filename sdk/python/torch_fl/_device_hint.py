"""A note under PyTorch's error for a device string it cannot parse.

For `torch.device("atuu:0")` or `torch.ones(2, device="atuu:0")` PyTorch lists
its built-in device types ("Expected one of cpu, cuda, ..., privateuseone device
type at start of device string: atuu"), never the name a torch-fl plugin gave
PrivateUse1. Its parser (c10::Device) has no hook, so the note is added where an
uncaught error is printed: torch-fl's sys.excepthook adds it to the exception
and hands the exception to the hook that was installed before.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from types import TracebackType

__all__ = ["device_hint", "install"]

_UNPARSABLE = re.compile(r"device type at start of device string: (\S+)")


def _installed_plugins() -> list[str]:
    try:
        from torch_fl._discovery import discover_plugins

        return list(dict.fromkeys(s.name for s in discover_plugins() if s.error is None))
    except Exception:  # a hint must never replace the error it explains
        return []


def device_hint(message: str) -> str | None:
    """What to say under the error `message`, or None when it is not PyTorch's
    refusal of a device type."""
    match = _UNPARSABLE.search(message)
    if match is None:
        return None
    typed = match.group(1)
    from torch_fl._active import get_plugin

    handle = get_plugin()
    installed = _installed_plugins()
    if handle is None:
        names = ", ".join(installed) or "none"
        example = installed[0] if installed else "<name>"
        off = [v for v in ("TORCH_FL_AUTOLOAD", "TORCH_DEVICE_BACKEND_AUTOLOAD")
               if os.environ.get(v) == "0"]
        why = (f"autoload is off, {off[0]}=0" if off
               else "see the RuntimeWarning printed at `import torch` for why")
        return (
            f"torch_fl: {typed!r} is not a device type here: no torch-fl device is registered "
            f"in this process ({why}; installed plugins: {names}). Register one with "
            f"torch_fl.register_device_plugin({example!r}) before using its device."
        )
    name = handle.name
    last = max(handle.device_count - 1, 0)
    hint = (
        f"torch_fl: {typed!r} is not a device type; the device torch-fl registered in this "
        f"process is {name!r} (use '{name}' or '{name}:0'..'{name}:{last}'; PyTorch's list "
        "above calls it 'privateuseone')."
    )
    if typed in installed:
        hint += (
            f" {typed!r} is an installed plugin, but PyTorch allows one PrivateUse1 backend per "
            f"process and {name!r} is registered: start a fresh process with "
            f"TORCH_FL_PLUGINS={typed}=/path/to/lib{typed}.so to get {typed!r}."
        )
    elif difflib.get_close_matches(typed, [name], n=1, cutoff=0.5):
        hint += f" Did you mean {name!r}?"
    return hint


def _annotate(exc: BaseException | None) -> str | None:
    """Adds the hint as a note to the first exception of the chain it explains
    (printed under it by the traceback); returns the hint where notes do not
    exist (Python 3.10), for the caller to print."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RuntimeError):
            hint = device_hint(str(exc))
            if hint is not None:
                if not hasattr(exc, "add_note"):
                    return hint
                if hint not in getattr(exc, "__notes__", ()):
                    exc.add_note(hint)
                return None
        exc = exc.__cause__ or exc.__context__
    return None


def install() -> None:
    """Puts the hint in front of the current sys.excepthook (once per process)."""
    if getattr(sys.excepthook, "_torch_fl_device_hint", False):
        return
    previous = sys.excepthook

    def excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        unprinted = None
        try:
            unprinted = _annotate(exc)
        except Exception:  # a hint must never replace the error it explains
            pass
        previous(exc_type, exc, tb)
        if unprinted is not None:
            print(unprinted, file=sys.stderr)

    excepthook._torch_fl_device_hint = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook
