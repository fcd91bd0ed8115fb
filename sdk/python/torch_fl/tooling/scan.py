"""A static scan of Python sources for CUDA-specific usage.

It parses each file with `ast` (nothing is imported or run), resolves import
aliases (`import torch as th`, `from torch.cuda.amp import autocast`), and
reports every construct that ties the code to NVIDIA GPUs, with why it matters
on another accelerator and the device-neutral replacement.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

__all__ = ["RULES", "CallSite", "Finding", "ScanResult", "iter_python_files", "scan_path", "scan_source"]

# Rule id -> one-line title (the docs table lists the same ids).
RULES: dict[str, str] = {
    "cuda-api": "torch.cuda.* call or attribute",
    "cuda-amp": "torch.cuda.amp (CUDA-only automatic mixed precision)",
    "cuda-method": "Tensor/Module .cuda() or .is_cuda",
    "cuda-device": 'device string "cuda" / "cuda:N"',
    "cudnn": "torch.backends.cudnn / torch.backends.cuda settings",
    "nccl": "NCCL collective backend",
    "apex": "NVIDIA apex",
    "cuda-extension": "CUDA-only extension or kernel (CUDAExtension, .cu sources, triton)",
    "cuda-env": "CUDA/NCCL environment variable",
}

_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", ".git", ".hg", ".tox", ".venv",
              "venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"}

_DEVICE_STRING = re.compile(r"cuda(:\d+)?")
_BACKEND_STRING = re.compile(r"[a-z0-9:,]*\bnccl\b[a-z0-9:,]*", re.IGNORECASE)
_ENV_STRING = re.compile(r"(CUDA_[A-Z_]+|NCCL_[A-Z_]+|CUDNN_[A-Z_]+|CUBLAS_[A-Z_]+|"
                         r"PYTORCH_CUDA_ALLOC_CONF|PYTORCH_NO_CUDA_MEMORY_CACHING)")


@dataclass(frozen=True)
class Finding:
    """One CUDA-specific construct at a source location."""

    rule: str
    path: str
    line: int
    col: int  # 1-based, as editors show it
    code: str  # the source text of the construct (first line)
    why: str
    fix: str

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True)
class CallSite:
    """A call in the scanned code: the resolved name ("torch.nn.Conv2d"), ".name"
    for a method call on a value, or "@" for a matrix product; literal keywords."""

    name: str
    path: str
    line: int
    keywords: tuple[tuple[str, object], ...] = ()

    @classmethod
    def of(cls, name: str, path: str, call: ast.Call) -> CallSite:
        kws = tuple(
            (kw.arg, kw.value.value if isinstance(kw.value, ast.Constant) else None)
            for kw in call.keywords if kw.arg is not None
        )
        return cls(name, path, call.lineno, kws)

    def keyword(self, name: str, default: object = None) -> object:
        return next((v for k, v in self.keywords if k == name), default)


@dataclass
class ScanResult:
    """Findings of a scan, the files read, and the files that could not be parsed."""

    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, message)
    calls: list[CallSite] = field(default_factory=list)  # for the op map
    dtypes: set[str] = field(default_factory=set)  # reduced-precision dtypes the code uses

    def by_rule(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.rule] = counts.get(f.rule, 0) + 1
        return dict(sorted(counts.items()))

    def to_dict(self) -> dict:
        return {
            "files": list(self.files),
            "findings": [asdict(f) for f in self.findings],
            "by_rule": self.by_rule(),
            "errors": [{"path": p, "message": m} for p, m in self.errors],
        }


# ---------------------------------------------------------------------------
# replacements
# ---------------------------------------------------------------------------

def _accelerator(fn: str) -> str:
    return f"torch.accelerator.{fn}"


# torch.cuda.<name> -> device-neutral replacement ("{mod}" is torch.<device>).
_CUDA_API_FIX: dict[str, str] = {
    "is_available": "torch.accelerator.is_available()",
    "device_count": "torch.accelerator.device_count()",
    "current_device": "torch.accelerator.current_device_index()",
    "set_device": "torch.accelerator.set_device_index(index)",
    "device": "torch.accelerator.device_index(index) (a context manager)",
    "synchronize": "torch.accelerator.synchronize()",
    "current_stream": "torch.accelerator.current_stream()",
    "set_stream": "torch.accelerator.set_stream(stream)",
    "stream": "with torch.Stream(device=...) as s: (or {mod}.stream(s))",
    "Stream": "torch.Stream(device=...)",
    "Event": "torch.Event(device=..., enable_timing=True)",
    "empty_cache": "torch.accelerator.empty_cache()",
    "memory_allocated": "torch.accelerator.memory_allocated()",
    "max_memory_allocated": "torch.accelerator.max_memory_allocated()",
    "memory_reserved": "torch.accelerator.memory_reserved()",
    "memory_cached": "torch.accelerator.memory_reserved()",
    "max_memory_reserved": "torch.accelerator.max_memory_reserved()",
    "max_memory_cached": "torch.accelerator.max_memory_reserved()",
    "memory_stats": "torch.accelerator.memory_stats()",
    "reset_peak_memory_stats": "torch.accelerator.reset_peak_memory_stats()",
    "reset_max_memory_allocated": "torch.accelerator.reset_peak_memory_stats()",
    "reset_accumulated_memory_stats": "torch.accelerator.reset_accumulated_memory_stats()",
    "mem_get_info": "torch.accelerator.get_memory_info()",
    "get_device_capability": "torch.accelerator.get_device_capability()",
    "get_device_name": "{mod}.get_device_properties(index).name",
    "get_device_properties": "{mod}.get_device_properties(index)",
    "is_bf16_supported": "'bf16' in {mod}.get_device_properties(index).capabilities",
    "manual_seed": "torch.manual_seed(seed) (seeds every device)",
    "manual_seed_all": "torch.manual_seed(seed) (seeds every device)",
    "seed": "torch.seed()",
    "seed_all": "torch.seed()",
    "initial_seed": "torch.initial_seed()",
    "get_rng_state": "{mod}.get_rng_state()",
    "set_rng_state": "{mod}.set_rng_state(state)",
    "get_rng_state_all": "{mod}.get_rng_state_all()",
    "set_rng_state_all": "{mod}.set_rng_state_all(states)",
    "OutOfMemoryError": "torch.OutOfMemoryError",
    "nvtx": "torch.profiler.record_function(name)",
    "CUDAGraph": 'torch.compile(model, backend="torchfl")',
    "graph": 'torch.compile(model, backend="torchfl")',
    "graphs": 'torch.compile(model, backend="torchfl")',
    "make_graphed_callables": 'torch.compile(model, backend="torchfl")',
    "nccl": "torch.distributed collectives on the plugin's backend",
    "init": "nothing: the plugin initializes when it is registered",
    "is_initialized": "torch.accelerator.is_available()",
}

_AMP_FIX: dict[str, str] = {
    "autocast": 'torch.amp.autocast(device_type="{dev}", dtype=...)',
    "GradScaler": 'torch.amp.GradScaler("{dev}")',
    "custom_fwd": 'torch.amp.custom_fwd(device_type="{dev}")',
    "custom_bwd": 'torch.amp.custom_bwd(device_type="{dev}")',
}

_CUDNN_FIX: dict[str, tuple[str, str]] = {
    "benchmark": ("cuDNN autotuning has no effect on another device",
                  ("remove it, or guard it with `if device.type == \"cuda\":`; "
                  "plugins with tunables are probed by `torchfl probe`")),
    "deterministic": ("only cuDNN kernels become deterministic; other devices ignore it",
                      "torch.use_deterministic_algorithms(True)"),
    "allow_tf32": ("TF32 is an NVIDIA math mode; other devices ignore the flag",
                   'torch.set_float32_matmul_precision("high")'),
    "enabled": ("switches cuDNN only; it does nothing on another device", "remove it"),
}

_APEX_FIX: dict[str, str] = {
    "apex.amp": 'torch.amp.autocast(device_type="{dev}") and torch.amp.GradScaler("{dev}")',
    "apex.optimizers": "torch.optim.AdamW / SGD (fused=True where the plugin has fused kernels)",
    "apex.parallel": "torch.nn.parallel.DistributedDataParallel (SyncBatchNorm: "
                     "torch.nn.SyncBatchNorm)",
    "apex.normalization": "torch.nn.LayerNorm / torch.nn.RMSNorm",
    "apex.contrib": "the torch equivalent of the fused module, or a plugin kernel",
}


# Names whose use means the code computes in that dtype (CUDA autocast: float16).
_DTYPE_NAMES = {
    "torch.float16": "float16", "torch.half": "float16", "torch.bfloat16": "bfloat16",
    "torch.cuda.amp.autocast": "float16", "torch.autocast": "float16",
    "torch.amp.autocast": "float16", "torch.cuda.amp.GradScaler": "float16",
    "torch.amp.GradScaler": "float16",
}

_BINOPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/",
                           ast.MatMult: "@"}


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= 100 else line[:97] + "..."


# ---------------------------------------------------------------------------
# the visitor
# ---------------------------------------------------------------------------

class _Scanner(ast.NodeVisitor):
    def __init__(self, source: str, path: str, device: str | None) -> None:
        self.source = source
        self.path = path
        self.dev = device or "<device>"
        self.mod = f"torch.{device}" if device else "torch.<device>"
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()  # names bound by `import x` / `import x as y`
        self.findings: list[Finding] = []
        self.calls: list[CallSite] = []
        self.dtypes: set[str] = set()
        self.parents: dict[int, ast.AST] = {}
        self._reported: set[tuple[int, int, str]] = set()

    # -- helpers -----------------------------------------------------------

    def run(self, tree: ast.Module) -> None:
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                        self.modules.add(a.asname)
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
                        self.modules.add(top)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        self.visit(tree)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def qualname(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def segment(self, node: ast.AST) -> str:
        return _first_line(ast.get_source_segment(self.source, node) or "")

    def report(self, rule: str, node: ast.AST, why: str, fix: str, code: str | None = None) -> None:
        key = (node.lineno, node.col_offset, rule)
        if key in self._reported:
            return
        self._reported.add(key)
        self.findings.append(
            Finding(rule, self.path, node.lineno, node.col_offset + 1,
                    code if code is not None else self.segment(node),
                    why, fix.format(dev=self.dev, mod=self.mod))
        )

    def _outermost(self, node: ast.AST) -> bool:
        """True unless `node` is the base of a longer attribute chain."""
        parent = self.parent(node)
        return not (isinstance(parent, ast.Attribute) and parent.value is node)

    def _call_of(self, node: ast.AST) -> ast.Call | None:
        parent = self.parent(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            return parent
        return None

    # -- imports -----------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            self._check_module(node, node.module)
            if node.module.startswith("torch.cuda") or node.module == "torch" and any(
                a.name == "cuda" for a in node.names
            ):
                if node.module.startswith("torch.cuda.amp"):
                    self.report("cuda-amp", node,
                                "imports CUDA-only mixed precision; it only autocasts on CUDA GPUs",
                                "from torch.amp import autocast, GradScaler")
                else:
                    self.report("cuda-api", node,
                                "imports from torch.cuda, which drives NVIDIA GPUs only",
                                "torch.accelerator (device-neutral) or {mod}")
        self.generic_visit(node)

    def _check_module(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if top == "apex":
            key = ".".join(module.split(".")[:2])
            fix = _APEX_FIX.get(key)
            if fix is None and isinstance(node, ast.ImportFrom):
                fix = next((_APEX_FIX[f"apex.{a.name}"] for a in node.names
                            if f"apex.{a.name}" in _APEX_FIX), None)
            self.report("apex", node,
                        "NVIDIA apex builds CUDA kernels and is not available for other devices",
                        fix or "the PyTorch equivalent (torch.amp, torch.optim fused=True, "
                               "torch.nn.parallel.DistributedDataParallel)")
        elif top == "triton":
            self.report("cuda-extension", node,
                        "Triton kernels compile for NVIDIA/AMD GPUs only",
                        "a kernel in the plugin, or torch_fl.register_operator(name, forward, "
                        "backward) with a device implementation; keep a pure-PyTorch fallback")
        elif module == "pycuda" or module.startswith("pycuda.") or top in {"cupy", "numba"} and \
                "cuda" in module:
            self.report("cuda-extension", node, "a CUDA-only Python binding",
                        "PyTorch ops on the plugin device, or a plugin kernel")

    # -- attribute chains --------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check_chain(node)
        if node.attr == "is_cuda" and self.qualname(node) is None:
            self.report("cuda-method", node,
                        ".is_cuda is False for tensors on any other device, so the CUDA branch "
                        "is silently skipped",
                        'x.device.type == "{dev}" (or x.device.type != "cpu")')
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases and not isinstance(self.parent(node), (ast.Import, ast.ImportFrom)):
            self._check_chain(node)
        self.generic_visit(node)

    def _check_chain(self, node: ast.expr) -> None:
        if not self._outermost(node):
            return
        q = self.qualname(node)
        if q is None:
            return
        call = self._call_of(node)
        target = call if call is not None else node
        parts = q.split(".")
        dtype = _DTYPE_NAMES.get(q)
        if dtype:
            self.dtypes.add(dtype)
        if q == "torch.cuda" or q.startswith("torch.cuda."):
            self._torch_cuda(target, parts[2:])
        elif q.startswith(("torch.backends.cudnn", "torch.backends.cuda.")):
            self._backends(target, parts)
        elif q.startswith("torch.distributed.Backend.NCCL") or q == "torch.distributed.NCCL":
            self.report("nccl", target, "NCCL runs collectives on NVIDIA GPUs only",
                        "pass device_id=torch.device(\"{dev}\", local_rank) and omit backend= in "
                        "init_process_group: torch.distributed then uses the backend the plugin "
                        "registered for '{dev}' (or name it: backend=\"{dev}\")")
        elif parts[0] == "apex" and (isinstance(node, ast.Attribute) or call is not None):
            key = ".".join(parts[:2])
            self.report("apex", target, "NVIDIA apex is CUDA-only",
                        _APEX_FIX.get(key, "the PyTorch equivalent (torch.amp, torch.optim)"))
        elif q == "torch.utils.cpp_extension.CUDAExtension" and call is not None:
            self.report("cuda-extension", call,
                        "CUDAExtension compiles .cu sources with nvcc for NVIDIA GPUs",
                        "implement the operator as a plugin kernel (TFL kernel table) or with "
                        "torch_fl.register_operator; build CPU code with CppExtension")
        elif (q in ("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline")
              and call is not None and self._has_cuda_sources(call)):
            self.report("cuda-extension", call,
                        "builds CUDA sources (.cu / cuda_sources) for NVIDIA GPUs",
                        "a plugin kernel or torch_fl.register_operator; keep C++ sources "
                        "for the CPU")
        if call is not None:
            self.calls.append(CallSite.of(q, self.path, call))

    def _torch_cuda(self, target: ast.AST, rest: list[str]) -> None:
        if rest[:1] == ["amp"]:
            name = rest[1] if len(rest) > 1 else ""
            self.report("cuda-amp", target,
                        "torch.cuda.amp only autocasts on CUDA GPUs (and is deprecated)",
                        _AMP_FIX.get(name, "torch.amp (autocast, GradScaler) with "
                                           'device_type="{dev}"'))
            return
        name = rest[0] if rest else ""
        if name.endswith(("Tensor", "Storage")):
            why = f"torch.cuda.{name} creates CUDA tensors only"
            fix = 'torch.tensor(..., dtype=..., device="{dev}") or .to("{dev}")'
        elif name == "is_available":
            why = ("torch.cuda.is_available() is False on any other accelerator, so the code "
                   "silently runs on the CPU")
            fix = _CUDA_API_FIX[name]
        else:
            why = ("torch.cuda drives NVIDIA GPUs only: on another device this fails or "
                   "reports no GPU")
            fix = _CUDA_API_FIX.get(name, "{mod}." + name + " or torch.accelerator")
        self.report("cuda-api", target, why, fix)

    def _backends(self, target: ast.AST, parts: list[str]) -> None:
        name = parts[-1] if len(parts) > 3 else ""
        if parts[2] == "cuda":
            why, fix = ("torch.backends.cuda configures CUDA kernels only",
                        ('torch.set_float32_matmul_precision("high") for TF32-style matmuls; '
                        "otherwise remove"))
        else:
            why, fix = _CUDNN_FIX.get(name, ("configures cuDNN, which exists only on NVIDIA GPUs",
                                             "remove it (other devices ignore it)"))
        self.report("cudnn", target, why, fix)

    @staticmethod
    def _has_cuda_sources(call: ast.Call) -> bool:
        for kw in call.keywords:
            if kw.arg == "cuda_sources":
                return True
        for sub in ast.walk(call):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and (
                sub.value.endswith(".cu") or sub.value.endswith(".cuh")
            ):
                return True
        return False

    # -- calls -------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        qual = self.qualname(func)
        # `module.cuda()` is a module's function, not Tensor/Module.cuda().
        on_module = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            func.value.id in self.modules
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and not on_module:
            self.report("cuda-method", node,
                        ".cuda() moves to an NVIDIA GPU; on another device it raises "
                        "(no CUDA driver) or needs CUDA",
                        '.to("{dev}") or .to(torch.accelerator.current_accelerator())')
        if isinstance(func, ast.Attribute) and qual is None:
            self.calls.append(CallSite.of("." + func.attr, self.path, node))
            dtype = _DTYPE_NAMES.get("torch." + func.attr)
            if dtype:
                self.dtypes.add(dtype)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        symbol = _BINOPS.get(type(node.op))
        if symbol:
            self.calls.append(CallSite(symbol, self.path, node.lineno))
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, ast.Eq) for op in node.ops):
            self.calls.append(CallSite("==", self.path, node.lineno))
        self.generic_visit(node)

    # -- string literals ---------------------------------------------------

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        first = node.values[0] if node.values else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and \
                first.value.startswith("cuda:"):
            self._device_string(node)
        # The literal parts were checked as a whole; expressions inside still count.
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                self.visit(part)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if not isinstance(value, str):
            return
        if _DEVICE_STRING.fullmatch(value):
            self._device_string(node)
        elif _BACKEND_STRING.fullmatch(value):
            self._nccl_string(node)
        elif _ENV_STRING.fullmatch(value):
            self.report("cuda-env", node,
                        f"{value} configures CUDA/NCCL only; the plugin ignores it",
                        "the plugin's own variables (e.g. FLEMU_* for flemu); "
                        "select devices with torch.accelerator.set_device_index")

    def _context_call(self, node: ast.AST) -> tuple[ast.Call | None, str | None]:
        """The call `node` is an argument of, and the keyword it is passed as
        (looking through `a if cond else b` and `a or b`)."""
        parent = self.parent(node)
        while isinstance(parent, (ast.IfExp, ast.BoolOp)):
            node, parent = parent, self.parent(parent)
        if isinstance(parent, ast.keyword):
            call = self.parent(parent)
            return (call if isinstance(call, ast.Call) else None), parent.arg
        if isinstance(parent, ast.Call) and node in parent.args:
            return parent, None
        return None, None

    def _device_string(self, node: ast.expr) -> None:
        call, kw = self._context_call(node)
        parent = self.parent(node)
        fname = ""
        if call is not None:
            fname = self.qualname(call.func) or (
                "." + call.func.attr if isinstance(call.func, ast.Attribute) else "")
        if kw == "device_type" or fname.endswith(("autocast", "GradScaler")):
            why = ('autocast/GradScaler for device type "cuda" does nothing for tensors on '
                   "another device")
            fix = 'device_type="{dev}" (or torch.accelerator.current_accelerator().type)'
        elif fname == "torch.device":
            why = 'torch.device("cuda") names an NVIDIA GPU'
            fix = 'torch.device("{dev}") or torch.accelerator.current_accelerator()'
        elif fname == ".to":
            why = '.to("cuda") moves the tensor or module to an NVIDIA GPU'
            fix = '.to("{dev}") or .to(torch.accelerator.current_accelerator())'
        elif kw == "device" or fname.endswith("set_default_device"):
            why = 'device="cuda" allocates on an NVIDIA GPU'
            fix = 'device="{dev}" or device=torch.accelerator.current_accelerator()'
        elif isinstance(parent, ast.Compare):
            why = ('compares a device (type) with "cuda": on another device the CUDA branch '
                   "is silently skipped")
            fix = '"{dev}" (or torch.accelerator.current_accelerator().type)'
        else:
            why = 'a "cuda" device string pins the code to NVIDIA GPUs'
            fix = '"{dev}" or torch.accelerator.current_accelerator()'
        self.report("cuda-device", node, why, fix)

    def _nccl_string(self, node: ast.expr) -> None:
        call, kw = self._context_call(node)
        fname = self.qualname(call.func) if call is not None else None
        if fname and fname.endswith("init_process_group") or kw == "backend":
            why = "init_process_group with NCCL needs NVIDIA GPUs; it fails on another device"
        else:
            why = "names the NCCL backend, which runs collectives on NVIDIA GPUs only"
        self.report("nccl", node, why,
                    "pass device_id=torch.device(\"{dev}\", local_rank) and omit backend= "
                    "(torch.distributed uses the backend the plugin registered for '{dev}'), "
                    "or name it: backend=\"{dev}\"")


# ---------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------

def scan_source(source: str, path: str = "<string>", device: str | None = None,
                result: ScanResult | None = None) -> ScanResult:
    """Scans one file's text. Raises SyntaxError when it does not parse."""
    result = result if result is not None else ScanResult()
    tree = ast.parse(source, filename=path)
    scanner = _Scanner(source, path, device)
    scanner.run(tree)
    result.files.append(path)
    result.findings.extend(sorted(scanner.findings, key=lambda f: (f.line, f.col, f.rule)))
    result.calls.extend(scanner.calls)
    result.dtypes |= scanner.dtypes
    return result


def iter_python_files(path: str) -> Iterator[str]:
    """`path` itself when it is a file; every *.py below it (sorted) when it is a directory."""
    if os.path.isfile(path):
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(root, name)


def scan_path(paths: str | Iterable[str], device: str | None = None) -> ScanResult:
    """Scans files and directories. Unreadable or unparsable files are listed in
    `errors`; the scan goes on. Raises FileNotFoundError for a path that does not exist."""
    result = ScanResult()
    for path in [paths] if isinstance(paths, str) else list(paths):
        if not os.path.exists(path):
            raise FileNotFoundError(f"nothing to scan at '{path}': give a Python file or a directory")
        for file in iter_python_files(path):
            try:
                with open(file, encoding="utf-8") as f:
                    source = f.read()
                scan_source(source, file, device, result)
            except SyntaxError as exc:
                result.errors.append((file, f"line {exc.lineno}: cannot parse: {exc.msg}"))
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                result.errors.append((file, f"cannot read: {exc}"))
    return result
