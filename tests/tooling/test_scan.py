"""`torchfl scan`: CUDA-specific usage found by AST, with exact locations, on a
realistic CUDA training project (tests/tooling/fixtures/cuda_project) and on
small sources that pin down each rule and its negatives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT
from torch_fl.tooling.scan import RULES, scan_path, scan_source

PROJECT = ROOT / "tests" / "tooling" / "fixtures" / "cuda_project"

# (rule, file, line, column) of every finding in the fixture project, in scan order.
EXPECTED = [
    ("cuda-extension", "fused_ops.py", 6, 1),  # import triton
    ("cuda-extension", "fused_ops.py", 7, 1),  # import triton.language as tl
    ("cuda-extension", "fused_ops.py", 32, 16),  # load(..., sources=[..., "*.cu"])
    ("cuda-api", "fused_ops.py", 33, 10),  # torch.cuda.stream(...)
    ("cuda-api", "fused_ops.py", 33, 28),  # torch.cuda.Stream()
    ("cuda-method", "model.py", 33, 12),  # x.is_cuda
    ("cuda-extension", "setup.py", 6, 18),  # CUDAExtension(...)
    ("cuda-amp", "train.py", 14, 1),  # from torch.cuda.amp import GradScaler, autocast
    ("apex", "train.py", 21, 5),  # from apex.optimizers import FusedAdam
    ("cuda-device", "train.py", 31, 40),  # add_argument("--device", default="cuda")
    ("cuda-env", "train.py", 36, 27),  # "NCCL_DEBUG"
    ("nccl", "train.py", 39, 37),  # init_process_group(backend="nccl")
    ("cuda-api", "train.py", 41, 5),  # torch.cuda.set_device(local_rank)
    ("cudnn", "train.py", 55, 5),  # torch.backends.cudnn.benchmark = True
    ("cuda-device", "train.py", 56, 27),  # torch.device("cuda", local_rank)
    ("cuda-api", "train.py", 56, 50),  # torch.cuda.is_available()
    ("cuda-method", "train.py", 58, 13),  # SmallResNet(...).cuda()
    ("apex", "train.py", 62, 21),  # FusedAdam(...)
    ("cuda-amp", "train.py", 66, 14),  # GradScaler()
    ("cuda-api", "train.py", 70, 9),  # torch.cuda.synchronize()
    ("cuda-method", "train.py", 74, 22),  # labels.cuda(non_blocking=True)
    ("cuda-amp", "train.py", 76, 18),  # with autocast():
    ("cuda-api", "train.py", 84, 9),  # torch.cuda.synchronize()
    ("cuda-api", "train.py", 87, 16),  # torch.cuda.max_memory_allocated()
]


def _rel(path: str) -> str:
    return os.path.relpath(path, PROJECT)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_fl.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_fixture_project_findings_are_exact() -> None:
    result = scan_path(str(PROJECT), device="flemu")
    got = [(f.rule, _rel(f.path), f.line, f.col) for f in result.findings]
    assert got == EXPECTED, "\n".join(
        ["actual findings:", *map(repr, got), "expected:", *map(repr, EXPECTED)])
    assert result.errors == [], result.errors
    assert sorted(map(_rel, result.files)) == ["fused_ops.py", "model.py", "setup.py", "train.py"]


def test_findings_say_why_and_give_device_neutral_fixes() -> None:
    result = scan_path(str(PROJECT / "train.py"), device="flemu")
    by_line = {(f.line, f.rule): f for f in result.findings}
    sync = by_line[(70, "cuda-api")]
    assert sync.code == "torch.cuda.synchronize()", sync
    assert sync.fix == "torch.accelerator.synchronize()", sync
    assert "NVIDIA" in sync.why, sync
    avail = by_line[(56, "cuda-api")]
    assert avail.fix == "torch.accelerator.is_available()", avail
    assert "silently runs on the CPU" in avail.why, avail
    scaler = by_line[(66, "cuda-amp")]
    assert scaler.fix == 'torch.amp.GradScaler("flemu")', scaler
    autocast = by_line[(76, "cuda-amp")]
    assert autocast.fix.startswith('torch.amp.autocast(device_type="flemu"'), autocast
    nccl = by_line[(39, "nccl")]
    assert "init_process_group" in nccl.why and "'flemu'" in nccl.fix, nccl
    device = by_line[(56, "cuda-device")]
    assert device.fix.startswith('torch.device("flemu")'), device
    moved = by_line[(58, "cuda-method")]
    assert moved.fix.startswith('.to("flemu")'), moved
    peak = by_line[(87, "cuda-api")]
    assert peak.fix == "torch.accelerator.max_memory_allocated()", peak


def test_without_device_the_fixes_name_a_placeholder() -> None:
    result = scan_source('import torch\nx = torch.zeros(3, device="cuda")\n', "x.py")
    (f,) = result.findings
    assert (f.rule, f.line, f.col) == ("cuda-device", 2, 27), f
    assert f.fix == 'device="<device>" or device=torch.accelerator.current_accelerator()', f


def test_aliases_are_resolved() -> None:
    src = (
        "import torch as th\n"
        "from torch import cuda\n"
        "from torch.cuda import synchronize as sync\n"
        "import torch.distributed as d\n"
        "th.cuda.empty_cache()\n"
        "cuda.manual_seed_all(0)\n"
        "sync()\n"
        "d.init_process_group('nccl')\n"
        "d.init_process_group(backend=d.Backend.NCCL)\n"
    )
    got = [(f.rule, f.line, f.fix) for f in scan_source(src, "a.py", "npu").findings]
    assert got == [
        ("cuda-api", 2, "torch.accelerator (device-neutral) or torch.npu"),
        ("cuda-api", 3, "torch.accelerator (device-neutral) or torch.npu"),
        ("cuda-api", 5, "torch.accelerator.empty_cache()"),
        ("cuda-api", 6, "torch.manual_seed(seed) (seeds every device)"),
        ("cuda-api", 7, "torch.accelerator.synchronize()"),
        ("nccl", 8, got[5][2]),
        ("nccl", 9, got[6][2]),
    ], got
    assert "omit backend=" in got[5][2] and "'npu'" in got[6][2], got


def test_device_strings_in_every_position() -> None:
    src = (
        "import torch\n"
        "rank = 0\n"
        "a = torch.ones(2).to('cuda:1')\n"
        "b = torch.ones(2, device=f'cuda:{rank}')\n"
        "if a.device.type == 'cuda':\n"
        "    pass\n"
        "with torch.autocast(device_type='cuda', dtype=torch.float16):\n"
        "    pass\n"
        "torch.set_default_device('cuda')\n"
    )
    found = [(f.line, f.col, f.why.split(' ')[0]) for f in scan_source(src, "s.py").findings]
    assert [(line, col) for line, col, _ in found] == [(3, 22), (4, 26), (5, 21), (7, 33), (9, 26)], found
    whys = {f.line: f.why for f in scan_source(src, "s.py").findings}
    assert whys[3].startswith('.to("cuda")'), whys
    assert whys[4].startswith('device="cuda"'), whys
    assert whys[5].startswith("compares a device"), whys
    assert whys[7].startswith("autocast/GradScaler"), whys
    assert whys[9].startswith('device="cuda"'), whys


def test_negatives_are_not_reported() -> None:
    src = (
        "import torch\n"
        "import mylib\n"
        "x = torch.ones(2, device='cpu').to(torch.accelerator.current_accelerator())\n"
        "print('cuda graphs are not used here', 'cudagraph', 'xcuda')\n"
        "mylib.cuda()  # a function of another library called cuda\n"
        "torch.amp.autocast(device_type='cpu')\n"
        "torch.distributed.init_process_group(backend='gloo')\n"
        "from torch.utils.cpp_extension import load, CppExtension\n"
        "load(name='ext', sources=['ext.cpp'])\n"
        "CppExtension('ext', ['ext.cpp'])\n"
    )
    findings = scan_source(src, "clean.py").findings
    assert findings == [], findings


def test_cuda_method_calls_on_any_value() -> None:
    src = "import torch\nm = torch.nn.Linear(2, 2).cuda(0)\nt = m.weight.data.cuda()\n"
    got = [(f.rule, f.line, f.col, f.code) for f in scan_source(src, "m.py").findings]
    assert got == [("cuda-method", 2, 5, "torch.nn.Linear(2, 2).cuda(0)"),
                   ("cuda-method", 3, 5, "m.weight.data.cuda()")], got


def test_unparsable_file_is_reported_and_the_scan_goes_on(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def broken(:\n    pass\n")
    (tmp_path / "good.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    result = scan_path(str(tmp_path))
    assert [(_p, m.split(":")[0]) for _p, m in result.errors] == [
        (str(tmp_path / "bad.py"), "line 1")], result.errors
    assert [(f.rule, f.line) for f in result.findings] == [("cuda-api", 2)], result.findings


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing to scan at .*nowhere"):
        scan_path(str(tmp_path / "nowhere"))


def test_every_rule_is_documented() -> None:
    result = scan_path(str(PROJECT))
    used = {f.rule for f in result.findings}
    assert used <= set(RULES), used - set(RULES)
    docs = (ROOT / "docs" / "tooling.md").read_text()
    missing = [r for r in RULES if f"`{r}`" not in docs]
    assert missing == [], f"rules not in docs/tooling.md: {missing}"


def test_cli_text_output_and_exit_status() -> None:
    proc = run_cli("scan", str(PROJECT), "--device", "flemu")
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stdout.splitlines()
    first = f"{PROJECT / 'fused_ops.py'}:6:1: cuda-extension: import triton"
    assert lines[0] == first, lines[:3]
    assert lines[-1] == ("24 CUDA-specific uses in 4 file(s): apex 2, cuda-amp 3, cuda-api 7, "
                         "cuda-device 2, cuda-env 1, cuda-extension 4, cuda-method 3, cudnn 1, "
                         "nccl 1"), lines[-1]
    assert f"{PROJECT / 'train.py'}:70:9: cuda-api: torch.cuda.synchronize()" in lines, proc.stdout
    assert "    fix: torch.accelerator.synchronize()" in lines, proc.stdout


def test_cli_json_output(tmp_path: Path) -> None:
    proc = run_cli("scan", str(PROJECT / "train.py"), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "torchfl-scan" and doc["version"] == 2, doc.keys()
    got = [(f["rule"], f["line"], f["col"]) for f in doc["findings"]]
    expected = [(r, line, col) for r, file, line, col in EXPECTED if file == "train.py"]
    assert got == expected, got
    assert doc["by_rule"]["cuda-api"] == 5, doc["by_rule"]


def test_cli_clean_code_exits_zero(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("import torch\nx = torch.ones(2)\n")
    proc = run_cli("scan", str(tmp_path))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.strip() == "no CUDA-specific uses in 1 file(s)", proc.stdout


def test_cli_missing_path_exits_two(tmp_path: Path) -> None:
    proc = run_cli("scan", str(tmp_path / "missing.py"))
    assert proc.returncode == 2, proc.returncode
    assert "nothing to scan at" in proc.stderr, proc.stderr
