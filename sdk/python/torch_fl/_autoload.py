"""The `torch.backends` entry point: `import torch` registers the best plugin.

It must never raise: a raising entry point breaks every `import torch`. A
failure is a warning and leaves the device unregistered.
"""

from __future__ import annotations

import os
import time
import warnings

__all__ = ["autoload", "elapsed_s"]

_attempted = False
# Seconds the last autoload spent registering a plugin (imports of torch_fl
# included): what `import torch` pays for torch-fl, without the noise of
# timing two whole imports of torch against each other.
elapsed_s: float | None = None


def autoload() -> None:
    global _attempted, elapsed_s
    if _attempted:
        return
    try:
        from torch_fl._device_hint import install as install_device_hint

        # Even with autoload off: a device string that does not parse then says
        # that no torch-fl device is registered, and which plugins are installed.
        install_device_hint()
    except Exception:  # never let a plugin break `import torch`
        pass
    if os.environ.get("TORCH_FL_AUTOLOAD", "1") == "0":
        return
    _attempted = True
    start = time.perf_counter()
    try:
        from torch_fl._registration import autoload_best_plugin

        autoload_best_plugin()
    except Exception as exc:  # never let a plugin break `import torch`
        warnings.warn(
            f"torch_fl: autoloading a device plugin failed ({type(exc).__name__}: {exc}); "
            "the device is not registered. Run `python -c \"import torch_fl; "
            "torch_fl.register_device_plugin('<name>')\"` to see the full error, or set "
            "TORCH_FL_AUTOLOAD=0 to skip autoloading.",
            RuntimeWarning,
            stacklevel=2,
        )
    finally:
        elapsed_s = time.perf_counter() - start
