"""The training run of the bridge's profile-guided build (`make build`).

Run with an instrumented bridge (CMake: TORCH_FL_PGO=generate) first on the
path and flemu installed: it trains the conformance zoo's ResNet-18 and
BERT-style encoder for a few steps on flemu and runs a loop of small
elementwise ops, the calls whose host cost the bridge's op path is measured
by (bench/test_training_step.py, bench/test_dispatch.py). The instrumented
bridge writes its profile when the process exits; `make build` checks that
it did before compiling the bridge with it.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    import torch
    import torch_fl
    from torch_fl_conformance.zoo import get_model

    plugin = torch_fl.get_plugin() or torch_fl.register_device_plugin("flemu")
    if plugin.name != "flemu":
        sys.exit(f"pgo_train: the registered plugin is '{plugin.name}', not flemu; run it with flemu installed")
    device = torch.device("flemu:0")
    start = time.perf_counter()
    for name, steps in (("resnet18", 6), ("bert_mlm", 6)):
        spec = get_model(name)
        torch.manual_seed(0)
        model = spec.build().to(device).train()
        opt = spec.make_optimizer(model.parameters(), device.type)
        inputs, target = spec.make_batch(0)
        inputs = tuple(t.to(device) for t in inputs)
        target = target.to(device)
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            spec.loss_fn(model, inputs, target).backward()
            opt.step()
        torch.flemu.synchronize()
    x = torch.randn(16, device=device)
    y = torch.randn(16, device=device)
    for _ in range(2000):
        x = torch.relu(x + y) * 0.5
    torch.flemu.synchronize()
    print(f"pgo_train: trained the bridge's profile in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
