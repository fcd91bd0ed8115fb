"""Printing device tensors.

PyTorch's tensor formatter computes on the tensor it prints (isfinite,
masked_select, abs, ceil, ...), so printing a device tensor would run
operators on the device, and under TORCH_FL_FALLBACK=error any of them the
plugin lacks would make `print(t)` raise. As PyTorch does for its XLA, lazy
and MTIA tensors, the contents are formatted from a host copy; the device
suffix (`device='<name>:0'`) still comes from the tensor itself. Printing
costs one device-to-host copy and runs no device operator.
"""

from __future__ import annotations

from typing import Any

import torch
import torch._tensor_str as _tensor_str_module

__all__ = ["install"]

_device_type = ""
_original: Any = None


def _contents(self: torch.Tensor, indent: int) -> str:
    if self.device.type == _device_type:
        self = self.to("cpu")
    return _original(self, indent)


def install(device_type: str) -> None:
    """Formats the contents of `device_type` tensors from a host copy."""
    global _device_type, _original
    _device_type = device_type
    if _original is None:
        _original = _tensor_str_module._tensor_str
        _tensor_str_module._tensor_str = _contents
