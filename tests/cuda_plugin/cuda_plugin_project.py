"""Building plugins/cuda (libflcuda.so) for the tests, and reading it through its ABI.

The library is built once per source state with CMake and nvcc into
build/cuda_plugin/<hash of the sources>/ under the repository root (ignored by
git), so repeated test runs reuse it. The tests skip only where nvcc is absent.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "cuda"
ABI_INCLUDE = ROOT / "sdk" / "include"
BUILD_ROOT = ROOT / "build" / "cuda_plugin"

# TFL_ErrorCode values (sdk/include/torch_fl/types.h).
TFL_ERR_UNAVAILABLE = 8
TFL_ERR_ABI_MISMATCH = 10


def source_files() -> list[Path]:
    files = [PLUGIN / "CMakeLists.txt", *sorted((PLUGIN / "src").rglob("*"))]
    files += sorted(ABI_INCLUDE.rglob("*.h"))
    return [f for f in files if f.is_file()]


def source_hash() -> str:
    h = hashlib.sha256()
    for f in source_files():
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class BuiltPlugin:
    library: Path
    build_dir: Path
    seconds: float  # wall time of this build; 0 when an earlier one was reused


def require_toolchain() -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the CUDA plugin cannot be built on this machine")
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is needed to build plugins/cuda but is not on PATH")


def build_plugin() -> BuiltPlugin:
    """libflcuda.so for the current sources, built unless an identical build exists."""
    require_toolchain()
    build_dir = BUILD_ROOT / source_hash()
    library = build_dir / "libflcuda.so"
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per source state
        if library.is_file() and (build_dir / ".complete").is_file():
            prune_builds(keep=build_dir)
            return BuiltPlugin(library, build_dir, 0.0)
        start = time.monotonic()
        jobs = str(max(1, min(os.cpu_count() or 1, 4)))
        steps = [
            ["cmake", "-S", str(PLUGIN), "-B", str(build_dir), "-G", "Ninja",
             f"-DFLCUDA_ABI_INCLUDE_DIR={ABI_INCLUDE}"],
            ["cmake", "--build", str(build_dir), "-j", jobs],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            assert proc.returncode == 0, (
                f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}"
                f"\n--- stderr\n{proc.stderr[-6000:]}"
            )
        seconds = time.monotonic() - start
        assert library.is_file(), f"the build finished without {library}"
        (build_dir / ".complete").write_text(f"{seconds:.1f}\n", encoding="utf-8")
    prune_builds(keep=build_dir)
    return BuiltPlugin(library, build_dir, seconds)


def prune_builds(keep: Path, newest: int = 3) -> None:
    """Removes builds of earlier source states, all but the `newest` few."""
    builds = sorted((d for d in BUILD_ROOT.iterdir() if d.is_dir() and d != keep),
                    key=lambda d: d.stat().st_mtime, reverse=True)
    for old in builds[newest - 1:]:
        shutil.rmtree(old, ignore_errors=True)


def has_cuda_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------
# The ABI through ctypes: just the tables these tests read.
# ---------------------------------------------------------------------------


class KernelDesc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("op", ctypes.c_char_p),
        ("fn", ctypes.c_void_p),
        ("user_data", ctypes.c_void_p),
        ("dtypes", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("preferred_memory_format", ctypes.c_int32),
        ("schema", ctypes.c_char_p),
    ]


class KernelsListArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kernels", ctypes.POINTER(ctypes.POINTER(KernelDesc))),
        ("num_kernels", ctypes.c_size_t),
    ]


class KernelApi(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("Kernels_List", ctypes.c_void_p),
                ("Kernels_ListCustomOps", ctypes.c_void_p)]


class CoreApi(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("Error_Destroy", ctypes.c_void_p),
                ("Error_Message", ctypes.c_void_p), ("Error_GetCode", ctypes.c_void_p),
                ("Plugin_GetInfo", ctypes.c_void_p), ("Plugin_Initialize", ctypes.c_void_p),
                ("Plugin_Shutdown", ctypes.c_void_p)]


class DeviceApi(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("Device_Count", ctypes.c_void_p),
                ("Device_GetProperties", ctypes.c_void_p), ("Device_Synchronize", ctypes.c_void_p),
                ("Device_CanAccessPeer", ctypes.c_void_p)]


class Api(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("abi_major", ctypes.c_uint32),
        ("abi_minor", ctypes.c_uint32),
        ("core", ctypes.POINTER(CoreApi)),
        ("device", ctypes.POINTER(DeviceApi)),
        ("memory", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("kernels", ctypes.POINTER(KernelApi)),
        ("collectives", ctypes.c_void_p),
        ("graph", ctypes.c_void_p),
        ("tunables", ctypes.c_void_p),
    ]


class GetInfoArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p),
                ("vendor", ctypes.c_char_p), ("version", ctypes.c_char_p),
                ("device_type", ctypes.c_char_p), ("description", ctypes.c_char_p)]


class InitializeArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("host_abi_major", ctypes.c_uint32),
                ("host_abi_minor", ctypes.c_uint32), ("host", ctypes.c_void_p),
                ("option_keys", ctypes.c_void_p), ("option_values", ctypes.c_void_p),
                ("num_options", ctypes.c_size_t)]


class DeviceCountArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("count", ctypes.c_int32)]


class ErrorMessageArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("error", ctypes.c_void_p),
                ("message", ctypes.c_char_p), ("message_size", ctypes.c_size_t)]


class ErrorGetCodeArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("error", ctypes.c_void_p),
                ("code", ctypes.c_int32)]


class ErrorDestroyArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("error", ctypes.c_void_p)]


def _call(fn_ptr: int, args: ctypes.Structure) -> int | None:
    fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(fn_ptr)
    return fn(ctypes.addressof(args))


class PluginLibrary:
    """The plugin's function tables, loaded with ctypes (no bridge, no torch)."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
        entry = self.lib.TFL_GetPluginApi
        entry.restype = ctypes.POINTER(Api)
        self.api = entry().contents

    def error(self, err: int | None) -> tuple[int, str] | None:
        """(code, message) of an error, which is then released; None for success."""
        if not err:
            return None
        core = self.api.core.contents
        msg = ErrorMessageArgs(ctypes.sizeof(ErrorMessageArgs), err)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(core.Error_Message)(ctypes.addressof(msg))
        code = ErrorGetCodeArgs(ctypes.sizeof(ErrorGetCodeArgs), err)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(core.Error_GetCode)(ctypes.addressof(code))
        text = msg.message.decode() if msg.message else ""
        destroy = ErrorDestroyArgs(ctypes.sizeof(ErrorDestroyArgs), err)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(core.Error_Destroy)(ctypes.addressof(destroy))
        return code.code, text

    def info(self) -> GetInfoArgs:
        args = GetInfoArgs(ctypes.sizeof(GetInfoArgs))
        assert self.error(_call(self.api.core.contents.Plugin_GetInfo, args)) is None
        return args

    def initialize(self, major: int, minor: int) -> tuple[int, str] | None:
        args = InitializeArgs(ctypes.sizeof(InitializeArgs), major, minor, None, None, None, 0)
        return self.error(_call(self.api.core.contents.Plugin_Initialize, args))

    def device_count(self) -> tuple[int | None, tuple[int, str] | None]:
        args = DeviceCountArgs(ctypes.sizeof(DeviceCountArgs), -1)
        err = self.error(_call(self.api.device.contents.Device_Count, args))
        return (None if err else args.count), err

    def kernels(self) -> list[KernelDesc]:
        args = KernelsListArgs(ctypes.sizeof(KernelsListArgs))
        assert self.error(_call(self.api.kernels.contents.Kernels_List, args)) is None
        return [args.kernels[i].contents for i in range(args.num_kernels)]
