"""The device module `torch.<name>` for a registered plugin.

PyTorch calls into it for seeding (torch.manual_seed), RNG state
(torch.random.fork_rng, checkpointing), AMP (torch.autocast) and device
selection; users call it the way they call torch.cuda.
"""

from __future__ import annotations

import collections
import types
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["DeviceProperties", "make_device_module"]

# Plugin state does not survive fork(): a child forked after registration
# must not touch the device (PyTorch asks through _is_in_bad_fork).
_in_bad_fork = False


def _after_fork_in_child() -> None:
    global _in_bad_fork
    _in_bad_fork = True


@dataclass(frozen=True)
class DeviceProperties:
    """What the plugin reports about one device."""

    name: str
    index: int
    total_memory: int
    capabilities: tuple[str, ...]
    memory_alignment: int
    preferred_memory_format: str
    compute_units: int
    version: tuple[int, int]
    extra: dict[str, Any] = field(default_factory=dict)

    def has(self, capability: str) -> bool:
        return capability in self.capabilities


def _flatten_stats(raw: dict[str, Any]) -> collections.OrderedDict[str, int]:
    out: dict[str, int] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            for pool, stat in value.items():
                for kind, number in stat.items():
                    out[f"{key}.{pool}.{kind}"] = number
        else:
            out[key] = value
    return collections.OrderedDict(sorted(out.items()))


def make_device_module(name: str, info: dict[str, Any]) -> types.ModuleType:
    """Builds the module that `torch._register_device_module(name, ...)` installs."""
    from torch_fl import _C

    mod = types.ModuleType(f"torch.{name}", f"Device module of the torch-fl plugin {name!r}.")
    props = [
        DeviceProperties(
            name=d["name"],
            index=i,
            total_memory=d["total_memory"],
            capabilities=tuple(d["capabilities"]),
            memory_alignment=d["memory_alignment"],
            preferred_memory_format=d["preferred_memory_format"],
            compute_units=d["compute_units"],
            version=tuple(d["version"]),
        )
        for i, d in enumerate(info["devices"])
    ]

    def _index(device: Any = None) -> int:
        if device is None:
            return _C.current_device()
        if isinstance(device, int):
            index = device
        else:
            device = torch.device(device)
            if device.type != name:
                raise ValueError(f"expected a {name} device, got {device}")
            index = _C.current_device() if device.index is None else device.index
        if not 0 <= index < len(props):
            # As CUDA's "invalid device ordinal": a RuntimeError.
            raise torch.AcceleratorError(
                f"invalid device index {index} for {name!r}: it has {len(props)} device(s), "
                f"so use an index from 0 to {len(props) - 1}"
            )
        return index

    def is_available() -> bool:
        return _C.device_count() > 0

    def device_count() -> int:
        return _C.device_count()

    def current_device() -> int:
        return _C.current_device()

    def set_device(device: Any) -> None:
        _C.set_device(_index(device))

    class device:  # noqa: N801 - mirrors torch.cuda.device
        """Context manager that makes a device current."""

        def __init__(self, dev: Any) -> None:
            self.index = -1 if dev is None else _index(dev)
            self.previous = -1

        def __enter__(self) -> None:
            if self.index >= 0:
                self.previous = _C.current_device()
                _C.set_device(self.index)

        def __exit__(self, *exc: object) -> None:
            if self.index >= 0:
                _C.set_device(self.previous)

    def synchronize(device: Any = None) -> None:
        _C.synchronize(_index(device))

    class Stream(torch.Stream):
        """A stream of this device (torch.Stream with the device type filled in)."""

        def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
            if "stream_id" in kwargs:
                return super().__new__(cls, priority=priority, **kwargs)
            return super().__new__(
                cls, device=torch.device(name, _index(device)), priority=priority
            )

    class Event(torch.Event):
        """Makes an event of this device: a torch.Event with the device filled in.

        A class deriving from torch.Event, as Dynamo expects of a device's Event,
        whose instances are plain torch.Events: torch 2.13's elapsed_time and
        wait take exactly that type."""

        def __new__(cls, enable_timing: bool = False, blocking: bool = False,  # type: ignore[misc]
                    interprocess: bool = False, device: Any = None) -> torch.Event:
            return torch.Event(
                device=torch.device(name, _index(device)), enable_timing=enable_timing,
                blocking=blocking, interprocess=interprocess,
            )

    def _wrap(raw: tuple[int, int, int]) -> Stream:
        stream_id, device_index, device_type = raw
        return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)

    def current_stream(device: Any = None) -> Stream:
        return _wrap(_C.current_stream(_index(device)))

    def default_stream(device: Any = None) -> Stream:
        return _wrap(_C.default_stream(_index(device)))

    def set_stream(stream: torch.Stream) -> None:
        _C.set_stream(stream.stream_id, stream.device_index)

    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _C.set_stream(stream_id, device_index)

    def _exchange_device(device: int) -> int:
        previous = _C.current_device()
        if device >= 0 and device != previous:
            _C.set_device(_index(device))
        return previous

    class StreamContext:
        """Makes `stream` current on its device for the duration of a with block."""

        def __init__(self, stream: torch.Stream | None) -> None:
            self.stream = stream
            self.previous: Stream | None = None

        def __enter__(self) -> torch.Stream | None:
            if self.stream is not None:
                self.previous = current_stream(self.stream.device_index)
                set_stream(self.stream)
            return self.stream

        def __exit__(self, *exc: object) -> None:
            if self.previous is not None:
                set_stream(self.previous)

    def stream(s: torch.Stream | None) -> StreamContext:
        return StreamContext(s)

    def memory_stats(device: Any = None) -> collections.OrderedDict[str, int]:
        return _flatten_stats(_C.memory_stats(_index(device)))

    def _stat(device: Any, key: str) -> int:
        return _C.memory_stats(_index(device))[key]["all"]

    def memory_allocated(device: Any = None) -> int:
        return _stat(device, "allocated_bytes")["current"]

    def max_memory_allocated(device: Any = None) -> int:
        return _stat(device, "allocated_bytes")["peak"]

    def memory_reserved(device: Any = None) -> int:
        return _stat(device, "reserved_bytes")["current"]

    def max_memory_reserved(device: Any = None) -> int:
        return _stat(device, "reserved_bytes")["peak"]

    def reset_peak_memory_stats(device: Any = None) -> None:
        _C.reset_peak_memory_stats(_index(device))

    def reset_accumulated_memory_stats(device: Any = None) -> None:
        _C.reset_accumulated_memory_stats(_index(device))

    def empty_cache() -> None:
        _C.empty_cache()

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return tuple(_C.mem_get_info(_index(device)))

    def _generator(device: Any = None) -> torch.Generator:
        return _C.default_generator(_index(device))

    def manual_seed(seed: int) -> None:
        _generator().manual_seed(int(seed))

    def manual_seed_all(seed: int) -> None:
        for i in range(device_count()):
            _generator(i).manual_seed(int(seed))

    def seed() -> None:
        _generator().seed()

    def seed_all() -> None:
        for i in range(device_count()):
            _generator(i).seed()

    def initial_seed() -> int:
        return _generator().initial_seed()

    def get_rng_state(device: Any = name) -> torch.Tensor:
        return _generator(device).get_state()

    def set_rng_state(new_state: torch.Tensor, device: Any = name) -> None:
        _generator(device).set_state(new_state)

    def get_rng_state_all() -> list[torch.Tensor]:
        return [get_rng_state(i) for i in range(device_count())]

    def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            set_rng_state(state, i)

    def get_amp_supported_dtype() -> list[torch.dtype]:
        # torch.autocast(device_type=<this device>) asks this first: the autocast
        # kernels must be in the dispatcher before its first op, which may run
        # on fake tensors that never allocate on the device.
        _C.install_deferred()
        caps = props[0].capabilities if props else ()
        dtypes = []
        if "fp16" in caps:
            dtypes.append(torch.float16)
        if "bf16" in caps:
            dtypes.append(torch.bfloat16)
        return dtypes

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return bool(props) and "bf16" in props[0].capabilities

    def get_device_properties(device: Any = None) -> DeviceProperties:
        return props[_index(device)]

    def get_device_name(device: Any = None) -> str:
        return props[_index(device)].name

    def is_initialized() -> bool:
        return not _in_bad_fork

    def init() -> None:
        """Initializes the device, as torch.cuda.init(): registration already did;
        in a process forked after that it raises with what to do instead."""
        _lazy_init()

    def _is_in_bad_fork() -> bool:
        return _in_bad_fork

    def _lazy_init() -> None:
        if _in_bad_fork:
            raise RuntimeError(
                f"cannot use the {name} device in a process forked after it was "
                "initialized; use the 'spawn' start method for multiprocessing"
            )

    exported = {
        "is_available": is_available,
        "device_count": device_count,
        "current_device": current_device,
        "set_device": set_device,
        "device": device,
        "synchronize": synchronize,
        "Stream": Stream,
        "Event": Event,
        "current_stream": current_stream,
        "default_stream": default_stream,
        "set_stream": set_stream,
        "_set_stream_by_id": _set_stream_by_id,
        "_exchange_device": _exchange_device,
        "_maybe_exchange_device": _exchange_device,
        "stream": stream,
        "StreamContext": StreamContext,
        "memory_stats": memory_stats,
        "memory_allocated": memory_allocated,
        "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_reserved,
        "max_memory_reserved": max_memory_reserved,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
        "empty_cache": empty_cache,
        "mem_get_info": mem_get_info,
        "manual_seed": manual_seed,
        "manual_seed_all": manual_seed_all,
        "seed": seed,
        "seed_all": seed_all,
        "initial_seed": initial_seed,
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "get_rng_state_all": get_rng_state_all,
        "set_rng_state_all": set_rng_state_all,
        "get_amp_supported_dtype": get_amp_supported_dtype,
        "is_bf16_supported": is_bf16_supported,
        "get_device_properties": get_device_properties,
        "get_device_name": get_device_name,
        "is_initialized": is_initialized,
        "init": init,
        "_is_in_bad_fork": _is_in_bad_fork,
        "_lazy_init": _lazy_init,
    }
    for attr, value in exported.items():
        setattr(mod, attr, value)
    mod.__all__ = [k for k in exported if not k.startswith("_")]
    return mod
