"""The plugin's device as Dynamo and Inductor see it.

Dynamo asks torch._dynamo.device_interface for a device's API (current
device, streams, events, synchronize) when it traces device-generic code: the
interface here maps it onto torch.<name>. TorchInductor generates code only
for devices it knows; for this one it would fail deep inside code generation
with a bare KeyError, so a placeholder backend fails with a message that says
to compile with backend="torchfl" instead. Both are registered when those
modules load (compile/_hook.py), never by `import torch_fl`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from torch_fl.compile._hook import when_imported

__all__ = ["register"]


def _interface_class(name: str, base: type) -> type:
    mod = getattr(torch, name)
    properties: list[Any] = []

    def raise_no_triton(device: Any = None) -> None:
        raise RuntimeError(
            f"Triton has no code generator for the '{name}' device; compile with "
            f"torch.compile(model, backend=\"torchfl\")"
        )

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            mod.set_device(device)

        @staticmethod
        def current_device() -> int:
            return mod.current_device()

        @staticmethod
        def get_device_properties(device: Any = None) -> Any:
            if not properties:
                properties.extend(mod.get_device_properties(i) for i in range(mod.device_count()))
            index = device.index if isinstance(device, torch.device) else device
            return properties[mod.current_device() if index is None else index]

    attrs = {
        "device": mod.device,
        "Event": mod.Event,
        "Stream": mod.Stream,
        "Worker": Worker,
        "current_device": staticmethod(mod.current_device),
        "set_device": staticmethod(mod.set_device),
        "maybe_exchange_device": staticmethod(mod._maybe_exchange_device),
        "exchange_device": staticmethod(mod._exchange_device),
        "device_count": staticmethod(mod.device_count),
        "is_available": staticmethod(mod.is_available),
        "stream": staticmethod(mod.stream),
        "current_stream": staticmethod(mod.current_stream),
        "set_stream": staticmethod(mod.set_stream),
        "_set_stream_by_id": staticmethod(mod._set_stream_by_id),
        "get_raw_stream": staticmethod(lambda device_idx: mod.current_stream(device_idx).stream_id),
        "synchronize": staticmethod(mod.synchronize),
        "get_device_properties": staticmethod(mod.get_device_properties),
        "get_compute_capability": staticmethod(lambda device=None: name),
        "is_bf16_supported": staticmethod(mod.is_bf16_supported),
        "memory_allocated": staticmethod(mod.memory_allocated),
        "is_triton_capable": staticmethod(lambda device=None: False),
        "raise_if_triton_unavailable": staticmethod(raise_no_triton),
    }
    return type(f"{name.capitalize()}Interface", (base,), attrs)


def _register_interface(name: str, module: ModuleType) -> None:
    iface = _interface_class(name, module.DeviceInterface)
    module.register_interface_for_device(name, iface)
    for i in range(getattr(torch, name).device_count()):
        module.register_interface_for_device(f"{name}:{i}", iface)


def _register_inductor_placeholder(name: str, common: ModuleType) -> None:
    message = (
        f"TorchInductor has no code generator for the '{name}' device (a torch-fl plugin); "
        f"compile with torch.compile(model, backend=\"torchfl\"), which hands graphs to the "
        f"plugin's graph compiler and runs the rest on its kernels"
    )

    class Refusing(type):
        def __getattr__(cls, attr: str) -> Any:
            raise NotImplementedError(message)

    class NoCodegen(metaclass=Refusing):
        """Whatever inductor asks of it, class or instance, raises `message`."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError(message)

        def __getattr__(self, attr: str) -> Any:
            raise NotImplementedError(message)

    if name not in common.device_op_overrides_dict:
        common.register_device_op_overrides(name, NoCodegen.__new__(NoCodegen))
    if common.get_scheduling_for_device(name) is None:
        common.register_backend_for_device(name, NoCodegen, NoCodegen, NoCodegen, NoCodegen)


def register(name: str) -> None:
    """Registers the device `name` with Dynamo and Inductor as they load."""
    when_imported("torch._dynamo.device_interface", lambda m: _register_interface(name, m))
    when_imported("torch._inductor.codegen.common",
                  lambda m: _register_inductor_placeholder(name, m))
