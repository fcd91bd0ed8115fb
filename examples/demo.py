"""The main job's demo: tensors on the flemu device, what ran natively, what fell back."""

from __future__ import annotations

import torch  # flemu autoloads through its torch.backends entry point

import torch_fl


def main() -> None:
    handle = torch_fl.get_plugin() or torch_fl.register_device_plugin("flemu")
    print(handle.summary())
    print()

    torch.manual_seed(0)
    x = torch.randn(4, 4, device="flemu:0")
    y = torch.relu(x @ x + 1)
    print("relu(x @ x + 1) on", y.device)
    print(y.cpu())
    reference = torch.relu(x.cpu() @ x.cpu() + 1)
    print("matches CPU:", torch.allclose(y.cpu(), reference, atol=1e-5))

    with torch_fl.fallback_mode("silent"):
        z = torch.atan2(y, x)  # flemu has no atan2 kernel: CPU fallback, counted
    print("atan2 (CPU fallback) matches CPU:",
          torch.allclose(z.cpu(), torch.atan2(reference, x.cpu()), atol=1e-5))

    print()
    print(f"devices: {torch.flemu.device_count()}, "
          f"memory allocated on flemu:0: {torch.flemu.memory_allocated()} bytes, "
          f"reserved: {torch.flemu.memory_reserved()} bytes")
    print()
    print(torch_fl.op_stats())


if __name__ == "__main__":
    main()
