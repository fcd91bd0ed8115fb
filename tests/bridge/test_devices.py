"""Device enumeration, properties, the torch.flemu module and torch.accelerator."""

from __future__ import annotations

import pytest
import torch
import torch_fl
from support import assert_ok, run_python


def test_two_devices_with_properties(flemu: torch_fl.PluginHandle) -> None:
    assert torch.flemu.is_available()
    assert torch.flemu.device_count() == 2 == flemu.device_count
    for i in range(2):
        p = torch.flemu.get_device_properties(i)
        assert p.index == i
        assert p.name == "FL-2000 (emulated)", p
        assert p.total_memory > 0
        assert p.memory_alignment >= 64 and p.memory_alignment & (p.memory_alignment - 1) == 0
        for cap in ("fp64", "fp16", "bf16", "timing_events"):
            assert p.has(cap), (cap, p.capabilities)
        assert not p.has("unified_memory"), p.capabilities
    assert torch.flemu.get_device_name(1) == "FL-2000 (emulated)"


def test_handle_describes_the_plugin(flemu: torch_fl.PluginHandle) -> None:
    assert flemu.name == "flemu" and flemu.plugin_name == "flemu"
    assert flemu.abi == torch_fl.abi_version() == flemu.host_abi
    assert flemu.vendor and flemu.version
    assert "aten::add.Tensor" in flemu.kernels and "aten::mm" in flemu.kernels
    assert "aten::add_.Tensor" in flemu.kernels and "aten::add.out" in flemu.kernels
    assert flemu.groups["kernels"] is True
    assert "flemu" in flemu.summary() and "FL-2000" in flemu.summary()


def test_device_strings_and_tensor_methods() -> None:
    x = torch.ones(2, device="flemu:1")
    assert x.device == torch.device("flemu", 1)
    assert x.is_flemu and not torch.ones(1).is_flemu
    y = torch.ones(3).flemu()
    assert y.device.type == "flemu"
    m = torch.nn.Linear(2, 2).flemu()
    assert m.weight.device.type == "flemu"
    assert torch.device("flemu:0").type == "flemu"


def test_invalid_device_index_is_a_clear_error() -> None:
    # As CUDA's invalid device ordinal: torch.AcceleratorError, a RuntimeError.
    for bad in (lambda: torch.ones(2, device="flemu:7"), lambda: torch.flemu.set_device(9),
                lambda: torch.Stream(device="flemu:5"), lambda: torch.flemu.get_device_name(3)):
        with pytest.raises(torch.AcceleratorError) as err:
            bad()
        assert "2 device" in str(err.value) and "from 0 to 1" in str(err.value), str(err.value)


def test_streams_and_events_without_an_index_are_on_the_current_device() -> None:
    with torch.flemu.device(1):
        s = torch.Stream(device="flemu")
        assert (s.device, s.device_index) == (torch.device("flemu", 1), 1), s
        e = torch.Event(device="flemu")
        e.record(s)
        e.synchronize()
        assert e.query()
    assert torch.Stream(device="flemu").device_index == 0


def test_init_and_forked_children_say_what_to_do() -> None:
    torch.flemu.init()
    assert torch.flemu.is_initialized()
    out = assert_ok(run_python(
        """
        import os, torch
        torch.ones(2, device="flemu")
        pid = os.fork()
        if pid == 0:
            msgs = []
            for use in (lambda: torch.ones(2, device="flemu") + 1, torch.flemu.init):
                try:
                    use()
                    msgs.append("no error")
                except RuntimeError as e:
                    msgs.append(str(e))
            print("|".join(msgs), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        """))
    kernel_msg, init_msg = out.strip().split("|")
    for msg in (kernel_msg, init_msg):
        assert "spawn" in msg and "Plugin_Initialize" not in msg.split("The plugin said")[0], msg


def test_current_device_and_context_manager() -> None:
    assert torch.flemu.current_device() == 0
    with torch.flemu.device(1):
        assert torch.flemu.current_device() == 1
        assert torch.empty(1, device="flemu").device.index == 1
    assert torch.flemu.current_device() == 0
    torch.flemu.set_device(1)
    try:
        assert torch.ones(1, device="flemu").device.index == 1
    finally:
        torch.flemu.set_device(0)


def test_torch_accelerator_sees_the_device() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("flemu")
    assert torch.accelerator.device_count() == 2
    x = torch.ones(1024, device="flemu")
    assert torch.accelerator.memory_allocated() >= x.numel() * 4
    torch.accelerator.synchronize()
    s = torch.accelerator.current_stream()
    assert s.device.type == "flemu"
    cap = torch.accelerator.get_device_capability(0)
    assert cap["supported_dtypes"] and torch.float64 in cap["supported_dtypes"], cap


def test_fp64_off_is_reflected_in_capabilities() -> None:
    out = assert_ok(run_python(
        """
        import torch
        p = torch.flemu.get_device_properties(0)
        cap = torch.accelerator.get_device_capability(0)
        print(p.has("fp64"), torch.float64 in cap["supported_dtypes"])
        """, env={"FLEMU_FP64": "0"}))
    assert out.split() == ["False", "False"], out


def test_device_count_follows_flemu_device_count() -> None:
    out = assert_ok(run_python("import torch; print(torch.flemu.device_count())",
                               env={"FLEMU_DEVICE_COUNT": "4"}))
    assert out.strip() == "4"


def test_amp_supported_dtypes() -> None:
    assert torch.flemu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.flemu.is_bf16_supported()


def test_forked_child_is_marked_bad_and_seeding_there_does_not_touch_the_device() -> None:
    out = assert_ok(run_python(
        """
        import os, torch
        x = torch.ones(2, device="flemu")
        pid = os.fork()
        if pid == 0:
            ok = torch.flemu._is_in_bad_fork()
            torch.manual_seed(0)          # skips the device: its state is the parent's
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), torch.flemu._is_in_bad_fork(), x.sum().item())
        """))
    assert out.split() == ["0", "False", "2.0"], out
