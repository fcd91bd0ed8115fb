"""torch.distributed for a plugin's device: the ``tfl`` backend.

Registering a plugin whose ABI tables include the collectives group also
registers the ``tfl`` backend for its device, so that unchanged PyTorch code
works::

    import torch.distributed as dist
    dist.init_process_group("cpu:gloo,flemu:tfl", device_id=torch.device("flemu", local_rank))
    dist.all_reduce(torch.ones(4, device="flemu"))        # the plugin's collectives
    dist.all_reduce(torch.ones(4))                        # gloo, on the host
    model = torch.nn.parallel.DistributedDataParallel(model.to("flemu"))

``init_process_group("tfl")``, ``init_process_group("<device name>")`` (the
same backend under the device's name) or no backend at all (with
``device_id=`` on the device) use it for device tensors only; CPU tensors need
a CPU backend such as gloo beside it. The backend itself is C++
(``csrc/process_group.cpp``).
"""

from __future__ import annotations

import atexit
import threading
import warnings
from datetime import timedelta
from typing import Any

__all__ = ["BACKEND_NAME", "is_registered", "register_backend"]

BACKEND_NAME = "tfl"

_lock = threading.Lock()
_registered_for: str | None = None


def is_registered() -> bool:
    """Whether the ``tfl`` backend is registered in this process."""
    return _registered_for is not None


def _create(store: Any, rank: int, world_size: int, timeout: timedelta) -> Any:
    from torch_fl import _C

    return _C._dist_create(store, rank, world_size, timeout)


def _close_all() -> None:
    from torch_fl import _C

    _C._dist_close_all()


def register_backend(device_type: str) -> None:
    """Registers ``tfl`` with torch.distributed for ``device_type``.

    Called by torch_fl.register_device_plugin for a plugin with the
    collectives group; calling it again is a no-op. Warns and registers
    nothing when torch was built without distributed support.
    """
    global _registered_for
    import torch.distributed as dist

    with _lock:
        if _registered_for is not None:
            return
        if not dist.is_available():
            warnings.warn(
                f"torch_fl: torch.distributed is not available in this torch build, so the "
                f"'{BACKEND_NAME}' backend for '{device_type}' is not registered",
                RuntimeWarning, stacklevel=2,
            )
            return
        from torch_fl import _C

        _C._dist_register(_C)
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=[device_type])
        # init_process_group(backend="<device>") reaches the same backend, the
        # way accelerator users name their device; a name torch already has
        # ("cpu", "gloo", ...) keeps its meaning.
        if device_type not in dist.Backend.backend_list and not hasattr(dist.Backend, device_type.upper()):
            dist.Backend.register_backend(device_type, _create, devices=[device_type])
        # Runs before torch_fl's own exit hook (registered earlier): process
        # groups still alive are closed while the plugin is still up, and ones
        # with work in flight are aborted instead of waited for.
        atexit.register(_close_all)
        _registered_for = device_type
