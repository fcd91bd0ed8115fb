"""On a machine with an NVIDIA driver and GPU (skipped elsewhere, so skipped in
CI): flcuda registers, enumerates the GPU and computes what the CPU computes."""

from __future__ import annotations

import pytest
from cuda_plugin_project import BuiltPlugin, has_cuda_driver
from support import run_python

pytestmark = pytest.mark.skipif(not has_cuda_driver(), reason="needs an NVIDIA driver and GPU")


def test_registers_and_computes_like_the_cpu(flcuda_build: BuiltPlugin) -> None:
    code = f"""
        import torch, torch_fl
        h = torch_fl.register_device_plugin("flcuda", {str(flcuda_build.library)!r})
        assert h.devices and h.rejected_kernels == (), (h.devices, h.rejected_kernels)
        torch.manual_seed(0)
        a, b = torch.randn(64, 32), torch.randn(32, 16)
        x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
        checks = {{
            "add": (a * 2 + 1, (a.to("flcuda") * 2 + 1).cpu()),
            "mm": (a @ b, (a.to("flcuda") @ b.to("flcuda")).cpu()),
            "conv": (torch.nn.functional.conv2d(x, w, padding=1),
                     torch.nn.functional.conv2d(x.to("flcuda"), w.to("flcuda"), padding=1).cpu()),
            "softmax": (a.softmax(-1), a.to("flcuda").softmax(-1).cpu()),
        }}
        for name, (want, got) in checks.items():
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=name)
        print("OK", h.devices[0].name, len(h.kernels))
    """
    proc = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "TORCH_FL_AUTOLOAD": "0"})
    assert proc.returncode == 0 and "OK" in proc.stdout, (proc.returncode, proc.stdout, proc.stderr[-3000:])
