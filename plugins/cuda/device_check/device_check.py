"""The flcuda device check: torch-fl on a real GPU against native torch.cuda.

    python3 device_check.py run [--out DIR] [--budget SECONDS] [--dry-run]

runs every stage in its own guarded, timed subprocess and rewrites
device_check.json and device_check.md under --out (default $OUT, else
./device_check_out) after each one, so a stage that fails or runs out of time
is recorded and the next one still runs:

  environment     versions, GPUs
  build_bridge    pip install --no-build-isolation --no-deps <repo> --target SITE
  build_plugin    the same for plugins/cuda (libflcuda.so, built with nvcc)
  list            torchfl list
  ops             per-op numerics of flcuda against the CPU, with native/fallback counts
  resnet50, bert  one training step's outputs and gradients, then timed steps,
                  through torch-fl (flcuda) and through native torch.cuda
  conformance_L1  torchfl-conformance run --level L1, in the time that is left

--dry-run runs the same code paths with flemu (the CPU-emulated reference
device) in place of flcuda and the CPU in place of torch.cuda, tiny models and
no builds of the bridge, so the harness itself can be exercised anywhere.

The workers (`model`, `ops`) are the same file run with another subcommand:
each measurement runs in a fresh process with only one backend loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE.parent
REPO = PLUGIN_DIR.parents[1]
SCHEMA_VERSION = 1

# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------


def load_backend(device: str, plugin_path: str | None) -> None:
    """Makes `device` usable in this process: a torch-fl plugin is registered
    explicitly (autoload is off in the workers), torch.cuda and cpu need nothing."""
    if device in ("cuda", "cpu"):
        return
    import torch_fl

    torch_fl.register_device_plugin(device, plugin_path)


def synchronize(device: str) -> None:
    import torch

    if device == "cpu":
        return
    getattr(torch, device).synchronize()


def memory_module(device: str) -> Any:
    import torch

    return None if device == "cpu" else getattr(torch, device)


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------


def resnet50(num_classes: int = 1000) -> Any:
    """torchvision's ResNet-50 with random weights, or the same architecture
    built here where torchvision is not installed (recorded in the result)."""
    try:
        import torchvision

        return torchvision.models.resnet50(weights=None, num_classes=num_classes), "torchvision"
    except ImportError:
        pass
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers), "built here (torchvision not installed)"


def build_case(model: str, dry_run: bool, batch: int | None) -> dict[str, Any]:
    """Model, inputs and loss on the CPU, seeded: identical on every backend."""
    import torch

    torch.manual_seed(0)
    if model == "resnet50":
        b = batch or (2 if dry_run else 32)
        size = 64 if dry_run else 224
        net, source = resnet50()
        x = torch.randn(b, 3, size, size)
        y = torch.randint(0, 1000, (b,))

        def loss_fn(net: Any, inputs: tuple[Any, ...]) -> tuple[Any, Any]:
            out = net(inputs[0])
            return torch.nn.functional.cross_entropy(out, inputs[1]), out

        return {"net": net, "inputs": (x, y), "loss": loss_fn, "source": source,
                "shape": f"batch {b}, {size}x{size}"}
    if model == "bert":
        from transformers import BertConfig, BertForMaskedLM

        if dry_run:
            cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=128, max_position_embeddings=64)
            b, t = batch or 2, 16
        else:
            cfg = BertConfig()  # BERT-base: 12 layers, hidden 768, 12 heads, vocab 30522
            b, t = batch or 32, 128
        # Dropout off on both sides: the step compares deterministic math.
        cfg.hidden_dropout_prob = 0.0
        cfg.attention_probs_dropout_prob = 0.0
        cfg._attn_implementation = "eager"
        net = BertForMaskedLM(cfg)
        ids = torch.randint(0, cfg.vocab_size, (b, t))
        labels = ids.clone()
        labels[torch.rand(b, t) > 0.15] = -100
        mask = torch.ones(b, t, dtype=torch.long)

        def loss_fn(net: Any, inputs: tuple[Any, ...]) -> tuple[Any, Any]:
            out = net(input_ids=inputs[0], attention_mask=inputs[2], labels=inputs[1])
            return out.loss, out.logits[:, :8, :64]

        return {"net": net, "inputs": (ids, labels, mask), "loss": loss_fn,
                "source": "transformers BertForMaskedLM (eager attention, dropout 0)",
                "shape": f"batch {b}, sequence {t}"}
    raise SystemExit(f"unknown model {model!r}")


class OpCounter:
    """Counts the aten operators one step dispatches (a TorchDispatchMode)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                counter.count += 1
                return func(*args, **(kwargs or {}))

        self.count = 0
        self.mode = Mode()


def model_worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    t_start = time.monotonic()
    load_backend(args.device, args.plugin_path)
    if args.device == "cuda":
        # Full float32 on both sides: cuDNN would otherwise use TF32 for
        # convolutions, the plugin's cuBLAS calls do not (FLCUDA_ALLOW_TF32=0).
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    case = build_case(args.model, args.dry_run, args.batch)
    dev = torch.device(args.device)
    net = case["net"].to(dev).train()
    inputs = tuple(t.to(dev) for t in case["inputs"])
    fused = args.optimizer == "fused"
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=fused or None, foreach=False if not fused else None)
    result: dict[str, Any] = {"model": args.model, "device": args.device, "source": case["source"],
                              "shape": case["shape"], "optimizer": f"AdamW({'fused' if fused else 'plain'})",
                              "parameters": sum(p.numel() for p in net.parameters()),
                              "float32_math": "full float32 (TF32 off for cuBLAS and cuDNN on both sides)"}

    # Step 0: outputs and gradients for the comparison, before any update.
    loss, out = case["loss"](net, inputs)
    loss.backward()
    synchronize(args.device)
    result["loss0"] = float(loss.detach().cpu())
    if args.save:
        grads = {n: p.grad.detach().float().cpu() for n, p in net.named_parameters() if p.grad is not None}
        torch.save({"output": out.detach().float().cpu(), "loss": result["loss0"], "grads": grads}, args.save)
    opt.step()
    opt.zero_grad(set_to_none=True)
    synchronize(args.device)
    result["setup_s"] = time.monotonic() - t_start

    def step() -> float:
        loss, _ = case["loss"](net, inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter()

    for _ in range(args.warmup):
        step()
    synchronize(args.device)
    mem = memory_module(args.device)
    if mem is not None:
        mem.reset_peak_memory_stats()
    step_s, host_s = [], []
    for _ in range(args.steps):
        synchronize(args.device)
        t0 = time.perf_counter()
        t_host = step()
        synchronize(args.device)
        t1 = time.perf_counter()
        step_s.append(t1 - t0)
        host_s.append(t_host - t0)
    result["step_s"] = step_s
    result["step_s_median"] = statistics.median(step_s)
    result["host_s_median"] = statistics.median(host_s)
    if mem is not None:
        result["peak_memory_bytes"] = int(mem.max_memory_allocated())

    # Operator count of one step (untimed), and how torch-fl ran them.
    counter = OpCounter()
    stats_scope = contextlib.nullcontext()
    if args.device not in ("cuda", "cpu"):
        import torch_fl

        stats_scope = torch_fl.op_stats_scope()
    with stats_scope as scope, counter.mode:
        step()
    synchronize(args.device)
    result["ops_per_step"] = counter.count
    result["host_us_per_op"] = result["host_s_median"] / max(1, counter.count) * 1e6
    # Where the device time of one step goes: its kernels by device time
    # (torch.profiler; CUDA kernels natively, the plugin's kernels through the
    # bridge's activity profiler). Untimed, after the measured steps.
    try:
        result["top_kernels"] = top_kernels(args.device, step)
    except Exception as exc:  # noqa: BLE001 - a profile that fails is a note, not a failed check
        result["top_kernels_error"] = f"{type(exc).__name__}: {exc}"[-500:]
    if scope is not None:
        table = scope.table
        totals = table.totals()
        result["op_path"] = {"native": totals.native, "decomposed": totals.decomposed,
                             "cpu_fallback": totals.cpu_fallback, "failed": totals.failed,
                             "bytes_copied": totals.bytes_copied}
        result["fallbacks"] = sorted(
            ({"op": r.op, "dtype": r.dtype, "calls": r.cpu_fallback, "failed": r.failed,
              "time_ms": r.time_ns / 1e6} for r in table.fallbacks()),
            key=lambda r: -r["time_ms"])
    return result


def top_kernels(device: str, step: Any, count: int = 12) -> list[dict[str, Any]]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if device == "cpu":
        return []
    activity, kind = ((ProfilerActivity.CUDA, DeviceType.CUDA) if device == "cuda"
                      else (ProfilerActivity.PrivateUse1, DeviceType.PrivateUse1))
    with profile(activities=[ProfilerActivity.CPU, activity]) as prof:
        step()
        synchronize(device)
    # Only the device's own records: in a CUDA build of torch, CUPTI also
    # reports the CUDA kernels a plugin's kernel launched, inside its span.
    kernels = [a for a in prof.key_averages() if a.device_type == kind and a.self_device_time_total > 0]
    total = sum(a.self_device_time_total for a in kernels) or 1.0
    kernels.sort(key=lambda a: -a.self_device_time_total)
    return [{"kernel": a.key[:120], "calls": a.count, "ms": a.self_device_time_total / 1e3,
             "share": a.self_device_time_total / total} for a in kernels[:count]]


# ---------------------------------------------------------------------------
# Per-op numerics
# ---------------------------------------------------------------------------


def op_cases() -> list[tuple[str, Any]]:
    """(name, fn(device) -> list of tensors): forward and backward of the
    operators the two models use, each on seeded CPU inputs."""
    import torch
    import torch.nn.functional as F

    def grads(fn: Any, *shapes: tuple[int, ...], seed: int = 0) -> Any:
        def run(dev: str) -> list[Any]:
            g = torch.Generator().manual_seed(seed)
            xs = [torch.randn(*s, generator=g).to(dev).requires_grad_() for s in shapes]
            out = fn(*xs)
            out.backward(torch.ones_like(out))
            return [out, *[x.grad for x in xs]]
        return run

    def module(make: Any, shape: tuple[int, ...], seed: int = 0) -> Any:
        def run(dev: str) -> list[Any]:
            torch.manual_seed(seed)
            m = make()
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(*shape, generator=g)
            m = m.to(dev).train()
            x = x.to(dev).requires_grad_()
            out = m(x)
            out.backward(torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(dev))
            return [out, x.grad, *[p.grad for p in m.parameters()], *[b for b in m.buffers() if b.is_floating_point()]]
        return run

    def adamw(dev: str) -> list[Any]:
        torch.manual_seed(0)
        p = [torch.randn(37, 5).to(dev).requires_grad_(), torch.randn(11).to(dev).requires_grad_()]
        opt = torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, fused=True)
        for _ in range(3):
            loss = sum((q * q).sum() for q in p)
            loss.backward()
            opt.step()
            opt.zero_grad()
        return [q.detach() for q in p]

    def cross_entropy(dev: str) -> list[Any]:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(16, 50, generator=g).to(dev).requires_grad_()
        t = torch.randint(0, 50, (16,), generator=g)
        t[3] = -100
        loss = F.cross_entropy(x, t.to(dev))
        loss.backward()
        return [loss, x.grad]

    def embedding(dev: str) -> list[Any]:
        torch.manual_seed(0)
        emb = torch.nn.Embedding(40, 8, padding_idx=0).to(dev)
        ids = torch.tensor([[1, 0, 5, 5], [39, 2, 0, 7]]).to(dev)
        out = emb(ids)
        out.backward(torch.ones_like(out))
        return [out, emb.weight.grad]

    def dropout(dev: str) -> list[Any]:
        # Not comparable element by element (another generator): the kept
        # values are scaled, the dropped ones zero, and about half are kept.
        g = torch.Generator().manual_seed(0)
        x = (torch.rand(100_000, generator=g) + 0.5).to(dev)
        y, mask = torch.ops.aten.native_dropout(x, 0.5, True)
        exact = (y - x * 2 * mask).abs().max()
        kept = torch.round(mask.float().mean() * 20) / 20
        return [exact, kept]

    def comparisons(dev: str) -> list[Any]:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(6, 7, generator=g).to(dev)
        b = torch.randn(7, generator=g).to(dev)
        i = torch.arange(12).reshape(3, 4).to(dev)
        return [a > b, a <= 0.3, a.eq(a), a.ne(b), i >= 5, i.lt(i.t()[:3, :3].sum()), a.lt(2.5)]

    return [
        ("dropout_statistics", dropout),
        ("comparisons", comparisons),
        ("add_mul_div_broadcast", grads(lambda a, b: (a + 2 * b) * a / (b.abs() + 1), (4, 5), (5,))),
        ("scalar_arithmetic", grads(lambda a: (a * 0.5 - 3) / 7 + 1, (6, 3))),
        ("relu_gelu_tanh_exp", grads(lambda a: F.relu(a) + F.gelu(a) + torch.tanh(a) + torch.exp(-a * a), (8, 9))),
        ("transpose_copy", grads(lambda a: a.t().contiguous() * 2, (7, 3))),
        ("sum_mean_dims", grads(lambda a: a.sum(0, keepdim=True) + a.mean(1, keepdim=True), (33, 17))),
        ("sum_mean_all", grads(lambda a: a.sum() * a.mean() + a.t().sum(), (129, 300))),
        ("softmax", grads(lambda a: torch.softmax(a, -1) * torch.arange(9.0, device=a.device), (5, 9))),
        ("log_softmax_dim0", grads(lambda a: torch.log_softmax(a, 0) * 0.3, (6, 4))),
        ("matmul_bmm", grads(lambda a, b: a @ b, (3, 4, 5), (3, 5, 2))),
        ("matmul_transposed", grads(lambda a, b: a @ b.t(), (6, 4), (3, 4))),
        ("linear", module(lambda: torch.nn.Linear(12, 7), (5, 12))),
        ("linear_3d", module(lambda: torch.nn.Linear(12, 7), (2, 5, 12))),
        ("conv2d_3x3_s2", module(lambda: torch.nn.Conv2d(3, 4, 3, 2, 1), (2, 3, 9, 9))),
        ("conv2d_1x1", module(lambda: torch.nn.Conv2d(4, 6, 1, bias=False), (2, 4, 5, 5))),
        ("conv2d_7x7_s2", module(lambda: torch.nn.Conv2d(3, 8, 7, 2, 3, bias=False), (2, 3, 16, 16))),
        ("batch_norm_train", module(lambda: torch.nn.BatchNorm2d(4), (3, 4, 5, 5))),
        ("layer_norm", module(lambda: torch.nn.LayerNorm(10), (4, 3, 10))),
        ("max_pool2d", module(lambda: torch.nn.MaxPool2d(3, 2, 1), (2, 3, 9, 9))),
        ("adaptive_avg_pool_1x1", module(lambda: torch.nn.AdaptiveAvgPool2d(1), (2, 3, 7, 7))),
        ("cross_entropy", cross_entropy),
        ("embedding", embedding),
        ("where_masked_fill", grads(lambda a: torch.where(a > 0, a, a * 0.1).masked_fill(a < -1, 0.0), (6, 6))),
        ("fused_adamw", adamw),
    ]


def ops_worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    load_backend(args.device, args.plugin_path)
    is_fl = args.device not in ("cuda", "cpu")
    registration: dict[str, Any] = {}
    if is_fl:
        import torch_fl

        handle = torch_fl.get_plugin()
        registration = {"kernels": len(handle.kernels), "rejected_kernels": list(handle.rejected_kernels),
                        "adapted_kernels": list(getattr(handle, "adapted_kernels", ())),
                        "devices": [d.name for d in handle.devices]}
    results: list[dict[str, Any]] = []
    report = {"device": args.device, "torch": torch.__version__, "registration": registration, "cases": results}
    for name, fn in op_cases():
        # Written before each case: a case that kills the process leaves the
        # ones before it, and its own name, on disk.
        Path(args.json).write_text(json.dumps(dict(report, running=name), indent=1), encoding="utf-8")
        entry: dict[str, Any] = {"case": name}
        try:
            expected = [t.detach().cpu() if t is not None else None for t in fn("cpu")]
            scope = contextlib.nullcontext()
            if is_fl:
                import torch_fl

                scope = torch_fl.op_stats_scope()
            with scope as s:
                got = [t.detach().cpu() if t is not None else None for t in fn(args.device)]
            worst_abs, worst_rel, ok = 0.0, 0.0, True
            for e, g in zip(expected, got):
                if e is None or g is None:
                    continue
                if e.shape != g.shape:
                    raise AssertionError(f"shape {tuple(g.shape)} != {tuple(e.shape)}")
                e64, d = e.double(), (e.double() - g.double()).abs()
                if d.numel():
                    worst_abs = max(worst_abs, float(d.max()))
                    worst_rel = max(worst_rel, float((d / (e64.abs() + 1e-6)).max()))
                    # float32 against the CPU: atol 1e-4, rtol 1e-3 (GEMMs and
                    # reductions sum in another order).
                    ok = ok and bool((d <= 1e-4 + 1e-3 * e64.abs()).all())
            entry.update(max_abs=worst_abs, max_rel=worst_rel, ok=ok)
            if s is not None:
                fb = s.table.fallbacks()
                entry["fallbacks"] = sorted({f"{r.op}[{r.dtype}]" for r in fb})
        except Exception as exc:  # noqa: BLE001 - each case is a result
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        results.append(entry)
    return report


# ---------------------------------------------------------------------------
# The orchestrator
# ---------------------------------------------------------------------------


class Check:
    def __init__(self, out: Path, budget: float, dry_run: bool) -> None:
        self.out = out
        self.deadline = time.monotonic() + budget
        self.dry_run = dry_run
        self.started = time.time()
        self.report: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "dry_run": dry_run, "budget_s": budget,
                                       "stages": [], "summary": {}}
        self.log = open(out / "device_check.log", "a", encoding="utf-8")  # noqa: SIM115 - lives with the run

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def stage(self, name: str, fn: Any, cap: float) -> Any:
        """Runs fn(timeout) guarded and timed; records status, time, error."""
        entry: dict[str, Any] = {"name": name, "status": "skipped", "seconds": 0.0}
        self.report["stages"].append(entry)
        timeout = min(cap, self.left() - 5)
        if timeout < 10:
            entry["error"] = f"no time left ({self.left():.0f} s of the budget)"
            self.save()
            return None
        t0 = time.monotonic()
        self.emit(f"== {name} (up to {timeout:.0f} s)")
        try:
            value = fn(timeout)
            entry["status"] = "ok"
            return value
        except subprocess.TimeoutExpired as exc:
            entry["status"] = "timeout"
            entry["error"] = f"did not finish within {exc.timeout:.0f} s"
        except Exception as exc:  # noqa: BLE001 - a failed stage is a result
            entry["status"] = "failed"
            entry["error"] = f"{type(exc).__name__}: {exc}"[-4000:]
            self.emit(traceback.format_exc())
        finally:
            entry["seconds"] = round(time.monotonic() - t0, 2)
            self.emit(f"== {name}: {entry['status']} in {entry['seconds']} s")
            self.save()
        return None

    def emit(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def run(self, cmd: list[str], timeout: float, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        self.emit("$ " + " ".join(cmd))
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              check=False)
        self.log.write(proc.stdout[-20000:] + proc.stderr[-20000:] + "\n")
        self.log.flush()
        if proc.returncode != 0:
            raise RuntimeError(f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-3000:]}")
        return proc

    def save(self) -> None:
        self.report["elapsed_s"] = round(time.time() - self.started, 1)
        (self.out / "device_check.json").write_text(json.dumps(self.report, indent=1, default=str),
                                                    encoding="utf-8")
        (self.out / "device_check.md").write_text(markdown(self.report), encoding="utf-8")


def _default_sigint() -> None:
    # A check started in the background (nohup, `&`) runs with SIGINT
    # ignored, and a child would inherit that and never be interrupted.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_interruptible(cmd: list[str], env: dict[str, str], timeout: float, grace: float) -> tuple[int, str]:
    """Runs cmd; past `timeout` sends SIGINT and waits `grace` seconds more
    before killing it. Returns the exit status and the output."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=_default_sigint)
        try:
            code = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        out.seek(0)
        return code, out.read()


def worker_env(site: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, TORCH_FL_AUTOLOAD="0", TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", TORCH_FL_FALLBACK="silent",
               FLCUDA_ALLOW_TF32="0", PYTHONFAULTHANDLER="1")  # a crashing worker prints its Python stack
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra or {})
    return env


def compare_steps(native_file: Path, fl_file: Path) -> dict[str, Any]:
    import torch

    a = torch.load(native_file, weights_only=True)
    b = torch.load(fl_file, weights_only=True)
    out_diff = float((a["output"].double() - b["output"].double()).abs().max())
    scale = float(a["output"].double().abs().max()) or 1.0
    missing = sorted(set(a["grads"]) ^ set(b["grads"]))
    common = [n for n in a["grads"] if n in b["grads"] and a["grads"][n].numel()]
    # Relative to each gradient's largest value, floored at 1e-3 of the largest
    # gradient value of the model (a gradient that is ~0 has no useful scale).
    global_max = max((float(a["grads"][n].double().abs().max()) for n in common), default=0.0) or 1.0
    worst = {"param": None, "max_abs": 0.0, "max_rel_to_grad_max": 0.0}
    worst_abs = {"param": None, "max_abs": 0.0}
    for name in common:
        ga, gb = a["grads"][name].double(), b["grads"][name].double()
        d = float((ga - gb).abs().max())
        rel = d / max(float(ga.abs().max()), 1e-3 * global_max)
        if rel > worst["max_rel_to_grad_max"]:
            worst = {"param": name, "max_abs": d, "max_rel_to_grad_max": rel}
        if d > worst_abs["max_abs"]:
            worst_abs = {"param": name, "max_abs": d}
    return {"loss_native": a["loss"], "loss_torchfl": b["loss"], "loss_abs_diff": abs(a["loss"] - b["loss"]),
            "output_max_abs_diff": out_diff, "output_max_abs": scale, "gradient_worst": worst,
            "gradient_largest_abs_diff": worst_abs, "gradient_max_abs": global_max,
            "gradients_missing_on_one_side": missing}


def model_stage(check: Check, model: str, fl_dev: str, base_dev: str, plugin_path: str | None,
                site: Path | None) -> Any:
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "flcuda_device_check"
    scratch.mkdir(parents=True, exist_ok=True)

    def fn(timeout: float) -> dict[str, Any]:
        t_end = time.monotonic() + timeout
        res: dict[str, Any] = {}
        for role, dev in (("native", base_dev), ("torchfl", fl_dev)):
            save = scratch / f"{model}_{role}.pt"
            save.unlink(missing_ok=True)
            out_json = scratch / f"{model}_{role}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "model", "--model", model, "--device", dev,
                   "--save", str(save), "--json", str(out_json)]
            if plugin_path and dev == fl_dev:
                cmd += ["--plugin-path", plugin_path]
            if check.dry_run:
                cmd += ["--dry-run"]
            try:
                check.run(cmd, max(10.0, t_end - time.monotonic()), env=worker_env(site))
                res[role] = json.loads(out_json.read_text(encoding="utf-8"))
            except Exception as exc:  # noqa: BLE001 - record and go on to the other side
                res[role] = {"error": f"{type(exc).__name__}: {exc}"[-3000:]}
        if "error" not in res["native"] and "error" not in res["torchfl"]:
            n, f = res["native"], res["torchfl"]
            res["ratios"] = {
                "step_time_torchfl_over_native": f["step_s_median"] / n["step_s_median"],
                "host_us_per_op_native": n["host_us_per_op"],
                "host_us_per_op_torchfl": f["host_us_per_op"],
                "host_time_torchfl_over_native": f["host_s_median"] / n["host_s_median"],
            }
            if n.get("peak_memory_bytes") and f.get("peak_memory_bytes"):
                res["ratios"]["peak_memory_torchfl_over_native"] = f["peak_memory_bytes"] / n["peak_memory_bytes"]
            try:
                res["differences"] = compare_steps(scratch / f"{model}_native.pt", scratch / f"{model}_torchfl.pt")
            except Exception as exc:  # noqa: BLE001
                res["differences"] = {"error": f"{type(exc).__name__}: {exc}"}
        check.report["summary"][model] = res
        if "error" in res["torchfl"] or "error" in res["native"]:
            raise RuntimeError("; ".join(f"{k}: {v['error'][-300:]}" for k, v in res.items()
                                         if isinstance(v, dict) and "error" in v))
        return res

    return fn


def run_check(args: argparse.Namespace) -> int:
    out = Path(args.out or os.environ.get("OUT") or "device_check_out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, args.budget, args.dry_run)
    fl_dev, base_dev = ("flemu", "cpu") if args.dry_run else ("flcuda", "cuda")
    site = Path(args.site).resolve() if args.site else None
    check.report["devices"] = {"torchfl": fl_dev, "native": base_dev}
    plugin_path: str | None = args.plugin_path

    def environment(timeout: float) -> dict[str, Any]:
        code = ("import json, sys, torch; print(json.dumps({'python': sys.version.split()[0], "
                "'torch': torch.__version__, 'cuda_available': torch.cuda.is_available(), "
                "'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "
                "'torch_cuda': torch.version.cuda}))")
        proc = check.run([sys.executable, "-c", code], timeout, env=worker_env(None))
        env = json.loads(proc.stdout.strip().splitlines()[-1])
        smi = shutil.which("nvidia-smi")
        if smi:
            with contextlib.suppress(Exception):
                env["nvidia_smi"] = subprocess.run([smi, "-L"], capture_output=True, text=True,
                                                   timeout=20).stdout.strip()
        nvcc = shutil.which("nvcc")
        if nvcc:
            with contextlib.suppress(Exception):
                env["nvcc"] = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                                             timeout=20).stdout.strip().splitlines()[-1]
        check.report["environment"] = env
        return env

    check.stage("environment", environment, 60)

    if site is not None and not args.skip_bridge_build:
        def build_bridge(timeout: float) -> None:
            site.mkdir(parents=True, exist_ok=True)
            # A bridge already in the site (a carried wheel run.sh installed) is
            # used when it loads under this torch.
            probe = subprocess.run(
                [sys.executable, "-c", "import torch, torch_fl, torch_fl._C; print(torch_fl.__version__, torch_fl.__file__)"],
                env=worker_env(site), capture_output=True, text=True, timeout=120, check=False)
            if probe.returncode == 0:
                found = probe.stdout.strip().splitlines()[-1]
                check.report["bridge"] = f"torch-fl {found}: already built (a carried wheel), not rebuilt"
                return
            check.emit(f"no usable prebuilt bridge: {(probe.stderr or probe.stdout).strip()[-400:]}")
            env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 4))
            check.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                       "--target", str(site), "--upgrade", str(REPO)], timeout, env=env)

        check.stage("build_bridge", build_bridge, args.bridge_cap)

    if site is not None and not args.skip_plugin_build:
        def build_plugin(timeout: float) -> str:
            nonlocal plugin_path
            env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 4))
            t0 = time.monotonic()
            lib = site / "torch_flcuda" / "libflcuda.so"
            if lib.is_file():
                check.report["plugin_build"] = f"{lib}: already built (a carried wheel), not rebuilt"
            else:
                check.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                           "--target", str(site), "--upgrade", str(PLUGIN_DIR)], timeout, env=env)
            if not lib.is_file():
                raise FileNotFoundError(f"the plugin build left no {lib}")
            check.report["plugin_build_s"] = round(time.monotonic() - t0, 1)
            if not args.dry_run:
                plugin_path = str(lib)
            check.report["plugin_library"] = str(lib)
            return str(lib)

        check.stage("build_plugin", build_plugin, 240)

    if plugin_path is None and not args.dry_run:
        check.report["summary"]["note"] = "no plugin library: pass --plugin-path or let build_plugin run"

    def listing(timeout: float) -> str:
        env = worker_env(site)
        if plugin_path:
            env["TORCH_FL_PLUGINS"] = f"{fl_dev}={plugin_path}@100"
        env.pop("TORCH_FL_AUTOLOAD")
        proc = subprocess.run([sys.executable, "-m", "torch_fl.cli", "list"], env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        check.report["torchfl_list"] = proc.stdout.strip()[-6000:]
        if f"PASS  {fl_dev}" not in proc.stdout:
            raise RuntimeError(f"torchfl list did not pass {fl_dev}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        return proc.stdout

    check.stage("list", listing, 120)

    def ops(timeout: float) -> dict[str, Any]:
        js = out / "ops.json.tmp"
        cmd = [sys.executable, str(Path(__file__).resolve()), "ops", "--device", fl_dev, "--json", str(js)]
        if plugin_path:
            cmd += ["--plugin-path", plugin_path]
        try:
            check.run(cmd, timeout, env=worker_env(site))
        finally:
            if js.is_file():
                check.report["summary"]["ops"] = json.loads(js.read_text(encoding="utf-8"))
                js.unlink()
        res = check.report["summary"]["ops"]
        bad = [c["case"] for c in res["cases"] if not c.get("ok")]
        if bad:
            raise RuntimeError(f"{len(bad)} op cases differ from the CPU or failed: {bad}")
        return res

    check.stage("ops", ops, 120)
    for model in args.models.split(","):
        check.stage(model, model_stage(check, model, fl_dev, base_dev, plugin_path, site), 150)

    if not args.skip_conformance:
        def conformance(timeout: float) -> None:
            report_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "flcuda_conformance"
            shutil.rmtree(report_dir, ignore_errors=True)
            target = f"{fl_dev}={plugin_path}" if plugin_path else fl_dev
            cmd = [sys.executable, "-m", "torch_fl_conformance", "run", "--plugin", target, "--level",
                   args.conformance_level, "--report", str(report_dir), "-j", str(args.jobs),
                   "--timeout", "120"]
            if args.conformance_ops:
                cmd += ["--ops", args.conformance_ops]
            env = worker_env(site)
            env.pop("TORCH_FL_FALLBACK")
            check.emit("$ " + " ".join(cmd))
            try:
                # Interrupted (SIGINT) when its time is up, the suite writes a
                # partial report: tests not reached are NOT_RUN.
                code, text = run_interruptible(cmd, env, timeout - 30, grace=25)
                check.log.write(text[-40000:])
                check.report["conformance"] = {"exit_status": code, "tail": text[-3000:]}
            finally:
                for name in ("summary.md", "report.md"):
                    if (report_dir / name).is_file():
                        shutil.copy(report_dir / name, out / "conformance_summary.md")
                        break
                if (report_dir / "report.json").is_file():
                    import gzip

                    with open(report_dir / "report.json", "rb") as src, \
                            gzip.open(out / "conformance_report.json.gz", "wb") as dst:
                        shutil.copyfileobj(src, dst)
            if code != 0:
                raise RuntimeError(f"torchfl-conformance exited {code} (level not reached, interrupted or error)")

        check.stage(f"conformance_{args.conformance_level}", conformance, 10_000)

    check.save()
    failed = [s["name"] for s in check.report["stages"] if s["status"] != "ok"]
    check.emit(f"done in {check.report['elapsed_s']} s; stages not ok: {failed or 'none'}; see {out}")
    return 0 if not failed else 1


# ---------------------------------------------------------------------------
# The markdown report
# ---------------------------------------------------------------------------


def _fmt(v: Any, unit: str = "", digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.{digits}g}{unit}"
    return f"{v}{unit}"


def markdown(report: dict[str, Any]) -> str:
    devs = report.get("devices", {})
    lines = [f"# flcuda device check{' (dry run: flemu vs CPU)' if report.get('dry_run') else ''}", ""]
    env = report.get("environment", {})
    if env:
        lines.append("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items() if k != "nvidia_smi"))
        if env.get("nvidia_smi"):
            lines.append(f"GPUs: {env['nvidia_smi']}")
        lines.append("")
    lines += ["| stage | status | seconds | note |", "| --- | --- | --- | --- |"]
    for s in report["stages"]:
        # The end of an error says what went wrong (the start of a traceback does not).
        note = (s.get("error") or "").replace("\n", " ").replace("|", "/")[-240:]
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']} | {note} |")
    lines.append("")
    for key, label in (("bridge", "Bridge"), ("plugin_build", "Plugin")):
        if key in report:
            lines += [f"{label}: {report[key]}", ""]
    if "plugin_build_s" in report and "plugin_build" not in report:
        lines += [f"Plugin build (pip, nvcc): {report['plugin_build_s']} s", ""]
    summary = report.get("summary", {})
    for model in ("resnet50", "bert"):
        res = summary.get(model)
        if not res:
            continue
        lines += [f"## {model}: {devs.get('torchfl')} against {devs.get('native')}", ""]
        for role in ("native", "torchfl"):
            r = res.get(role, {})
            if "error" in r:
                lines.append(f"- {role}: FAILED: ...{r['error'][-600:]}")
            elif r:
                lines.append(f"- {role} ({r.get('device')}, {r.get('source')}, {r.get('shape')}): step "
                             f"{_fmt(r.get('step_s_median', 0) * 1e3, ' ms')}, host {_fmt(r.get('host_s_median', 0) * 1e3, ' ms')}"
                             f", {r.get('ops_per_step')} ops/step, {_fmt(r.get('host_us_per_op'), ' us')}/op, peak "
                             f"{_fmt((r.get('peak_memory_bytes') or 0) / 2**20, ' MiB')}")
        ratios = res.get("ratios")
        if ratios:
            lines.append(f"- step time torch-fl/native: **{_fmt(ratios['step_time_torchfl_over_native'])}** "
                         "(goal <= 1.05)")
            lines.append(f"- host time torch-fl/native: {_fmt(ratios['host_time_torchfl_over_native'])}; "
                         f"host per op {_fmt(ratios['host_us_per_op_torchfl'], ' us')} vs "
                         f"{_fmt(ratios['host_us_per_op_native'], ' us')}")
            if "peak_memory_torchfl_over_native" in ratios:
                lines.append(f"- peak memory torch-fl/native: {_fmt(ratios['peak_memory_torchfl_over_native'])}")
        diffs = res.get("differences")
        if diffs and "error" not in diffs:
            w = diffs["gradient_worst"]
            lines.append(f"- loss {_fmt(diffs['loss_native'], digits=6)} vs {_fmt(diffs['loss_torchfl'], digits=6)}; "
                         f"largest output difference {_fmt(diffs['output_max_abs_diff'])} (outputs up to "
                         f"{_fmt(diffs['output_max_abs'])}); largest gradient difference {_fmt(w['max_abs'])} "
                         f"({_fmt(w['max_rel_to_grad_max'])} of that gradient's largest value, {w['param']})")
            if "gradient_largest_abs_diff" in diffs:
                la = diffs["gradient_largest_abs_diff"]
                lines.append(f"- largest absolute gradient difference {_fmt(la['max_abs'])} ({la['param']}); "
                             f"gradients up to {_fmt(diffs['gradient_max_abs'])}")
        for role in ("native", "torchfl"):
            r = res.get(role, {})
            if r.get("top_kernels"):
                lines.append(f"- {role} device time of one step by kernel: " + "; ".join(
                    f"{k['kernel'][:60]} {_fmt(k['ms'], ' ms')} ({k['share']:.0%}, {k['calls']}x)"
                    for k in r["top_kernels"][:8]))
            elif r.get("top_kernels_error"):
                lines.append(f"- {role} kernel profile failed: {r['top_kernels_error'][-200:]}")
        fl = res.get("torchfl", {})
        if fl.get("op_path"):
            p = fl["op_path"]
            lines.append(f"- op path in one step: {p['native']} native, {p['decomposed']} decomposed, "
                         f"{p['cpu_fallback']} CPU fallback, {p['failed']} failed")
        for f in fl.get("fallbacks", [])[:15]:
            lines.append(f"  - fallback {f['op']} [{f['dtype']}]: {f['calls']} calls, {_fmt(f['time_ms'], ' ms')}")
        lines.append("")
    ops = summary.get("ops")
    if ops:
        lines += [f"## per-op numerics on {ops['device']} against the CPU", ""]
        reg = ops.get("registration") or {}
        if reg:
            lines += [f"{reg.get('kernels')} kernels registered; rejected: {reg.get('rejected_kernels') or 'none'}; "
                      f"adapted: {reg.get('adapted_kernels') or 'none'}; devices: {reg.get('devices')}", ""]
        if ops.get("running"):
            lines += [f"The worker ended during case {ops['running']} (cases after it did not run).", ""]
        lines += ["| case | ok | max abs | max rel | fallbacks |", "| --- | --- | --- | --- | --- |"]
        for c in ops["cases"]:
            note = c.get("error") or ", ".join(c.get("fallbacks", []))
            lines.append(f"| {c['case']} | {'yes' if c.get('ok') else 'NO'} | {_fmt(c.get('max_abs'))} | "
                         f"{_fmt(c.get('max_rel'))} | {note[:160]} |")
        lines.append("")
    if "conformance" in report:
        lines += ["## conformance", "", f"exit status {report['conformance']['exit_status']}", "", "```",
                  report["conformance"]["tail"][-1500:], "```", ""]
    if "torchfl_list" in report:
        lines += ["## torchfl list", "", "```", report["torchfl_list"][-2500:], "```", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the whole check")
    run.add_argument("--out", help="output directory (default $OUT, else ./device_check_out)")
    run.add_argument("--budget", type=float, default=460.0, help="seconds for all stages together")
    run.add_argument("--dry-run", action="store_true", help="flemu against the CPU, tiny models, no bridge build")
    run.add_argument("--site", help="pip --target directory for the bridge and the plugin")
    run.add_argument("--plugin-path", help="a built libflcuda.so (skips nothing; build_plugin overrides it)")
    run.add_argument("--skip-bridge-build", action="store_true")
    run.add_argument("--skip-plugin-build", action="store_true")
    run.add_argument("--skip-conformance", action="store_true")
    run.add_argument("--bridge-cap", type=float, default=300.0, help="seconds the bridge build may take")
    run.add_argument("--models", default="resnet50,bert", help="comma-separated: resnet50, bert")
    run.add_argument("--conformance-level", default="L1")
    run.add_argument("--conformance-ops", help="only these op_db names (torchfl-conformance --ops)")
    run.add_argument("-j", "--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    model = sub.add_parser("model", help="worker: one model on one device")
    model.add_argument("--model", required=True, choices=["resnet50", "bert"])
    model.add_argument("--device", required=True)
    model.add_argument("--plugin-path")
    model.add_argument("--dry-run", action="store_true")
    model.add_argument("--batch", type=int)
    model.add_argument("--warmup", type=int, default=2)
    model.add_argument("--steps", type=int, default=5)
    model.add_argument("--optimizer", choices=["fused", "plain"], default="fused")
    model.add_argument("--save", help="where step 0's outputs and gradients go (torch.save)")
    model.add_argument("--json", required=True)
    ops = sub.add_parser("ops", help="worker: per-op numerics against the CPU")
    ops.add_argument("--device", required=True)
    ops.add_argument("--plugin-path")
    ops.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        unknown = set(args.models.split(",")) - {"resnet50", "bert"}
        if unknown:
            parser.error(f"unknown models {sorted(unknown)}; choose from resnet50, bert")
        if args.dry_run:
            args.skip_bridge_build = True
        return run_check(args)
    result = model_worker(args) if args.command == "model" else ops_worker(args)
    Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
