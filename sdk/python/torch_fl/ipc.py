"""Device tensors between processes.

PyTorch 2.13 has inter-process sharing (IPC) for CUDA tensors only. Handed a
PrivateUse1 tensor, torch.multiprocessing fails inside the pickler — for a
multiprocessing.Queue in its background feeder thread — so the sending
process carries on and the receiving one waits until its own timeout. The
reducer installed here turns a device tensor into a payload that fails at
once, with what to do, in whichever process unpickles it; in the sending
process a warning says so the moment the tensor is pickled.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

__all__ = ["install"]

_device_type = ""


def _message(device: str) -> str:
    return (
        f"a tensor on the '{device}' device was sent to another process, but PyTorch has no "
        f"inter-process sharing for PrivateUse1 devices such as '{device}': send `t.cpu()` "
        f"and move it to the device in the receiving process, or create it there"
    )


def _refuse(message: str) -> Any:
    raise RuntimeError(message)


def _reduce(tensor: torch.Tensor) -> Any:
    if tensor.device.type == _device_type:
        message = _message(_device_type)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return _refuse, (message,)
    from torch.multiprocessing.reductions import reduce_tensor

    return reduce_tensor(tensor)


def install(device_type: str) -> None:
    """Registers the reducer for tensors and parameters (once per process)."""
    global _device_type
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing.reductions  # registers torch's own reducers first

    _device_type = device_type
    for cls in (torch.Tensor, torch.nn.Parameter):
        ForkingPickler.register(cls, _reduce)
