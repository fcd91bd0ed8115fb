"""What a registered plugin is, serves and left out: the handle
register_device_plugin returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch_fl.device_module import DeviceProperties

__all__ = ["PluginHandle"]


@dataclass(frozen=True)
class PluginHandle:
    """A registered plugin: what it is, what it serves, what it left out."""

    name: str  # the PyTorch device type, e.g. "flemu"
    library: str
    plugin_name: str
    vendor: str
    version: str
    abi: tuple[int, int]
    host_abi: tuple[int, int]
    devices: tuple[DeviceProperties, ...]
    groups: dict[str, bool]
    kernels: tuple[str, ...]
    rejected_kernels: tuple[tuple[str, str], ...]
    symbol_kernels: tuple[str, ...]
    custom_ops: tuple[str, ...]
    priority: int = 0
    metadata: dict[str, str] = field(default_factory=dict)
    source: str = "register_device_plugin"
    passed_over: tuple[str, ...] = ()
    # Registered for an older schema of their operator (TFL_KernelDesc.schema):
    # (op, which added arguments the kernel does not receive).
    adapted_kernels: tuple[tuple[str, str], ...] = ()

    @property
    def device_count(self) -> int:
        return len(self.devices)

    def summary(self) -> str:
        lines = [
            f"{self.plugin_name} {self.version} by {self.vendor} as device '{self.name}' "
            f"(plugin ABI {self.abi[0]}.{self.abi[1]}, host ABI "
            f"{self.host_abi[0]}.{self.host_abi[1]})",
            f"  library: {self.library}",
        ]
        for d in self.devices:
            lines.append(
                f"  {self.name}:{d.index}: {d.name}, {d.total_memory / 2**30:.2f} GiB, "
                f"capabilities: {', '.join(d.capabilities) or 'none'}"
            )
        groups = ", ".join(g for g, present in self.groups.items() if present) or "none"
        lines.append(f"  optional groups: {groups}")
        lines.append(f"  native kernels: {len(self.kernels)} operator overloads")
        if self.rejected_kernels:
            lines.append(f"  kernels not registered: {len(self.rejected_kernels)}")
            lines.extend(f"    {op}: {why}" for op, why in self.rejected_kernels)
        if self.adapted_kernels:
            lines.append(f"  kernels registered for an older schema: {len(self.adapted_kernels)}")
            lines.extend(f"    {op}: {what}" for op, what in self.adapted_kernels)
        if self.passed_over:
            lines.append(f"  other plugins not loaded: {', '.join(self.passed_over)}")
        return "\n".join(lines)
