"""The device as Dynamo and Inductor see it: Dynamo's device interface maps onto
torch.<name> (so device-generic Dynamo code works), stream and event calls in a
function compiled with backend="torchfl" keep their meaning, and
backend="inductor" refuses the device with a message naming backend="torchfl"."""

from __future__ import annotations

import pytest
import torch
from conftest import compile_fl
from support import DEVICE, assert_ok, run_python


def test_dynamo_device_interface_is_the_device_module() -> None:
    from torch._dynamo.device_interface import get_interface_for_device

    for key in (DEVICE, f"{DEVICE}:1", torch.device(DEVICE, 0)):
        iface = get_interface_for_device(key)
        assert iface.device_count() == torch.flemu.device_count(), iface
    iface = get_interface_for_device(DEVICE)
    assert iface.is_available() and not iface.is_triton_capable()
    with iface.device(1):
        assert iface.current_device() == 1
        assert iface.current_stream().device_index == 1
    assert iface.exchange_device(1) == 0 and iface.exchange_device(0) == 1
    assert issubclass(iface.Event, torch.Event) and issubclass(iface.Stream, torch.Stream)
    event, later = iface.Event(enable_timing=True), iface.Event(enable_timing=True)
    event.record()
    later.record()
    later.synchronize()
    assert event.query() and event.elapsed_time(later) >= 0.0
    assert iface.Worker.get_device_properties(1).index == 1
    with pytest.raises(RuntimeError, match='backend="torchfl"'):
        iface.raise_if_triton_unavailable()


def test_interface_registered_when_dynamo_was_imported_first() -> None:
    out = assert_ok(run_python(
        """
        import os
        os.environ["TORCH_FL_AUTOLOAD"] = "0"
        import torch, torch._dynamo.device_interface as di
        import torch_fl, flemu
        torch_fl.register_device_plugin("flemu", plugin_path=flemu.library_path())
        print(di.get_interface_for_device("flemu").device_count())
        """))
    assert out.strip() == "2", out


def test_streams_and_events_inside_a_compiled_function(dev: torch.device) -> None:
    def on_side_stream(x: torch.Tensor, side: torch.Stream) -> torch.Tensor:
        with torch.flemu.stream(side):
            y = x * 2
        torch.flemu.current_stream().wait_stream(side)
        return y + 1

    def with_event(x: torch.Tensor) -> torch.Tensor:
        event = torch.flemu.Event()
        y = x.sin()
        event.record()
        event.synchronize()
        return y * 3

    def generic_stream(x: torch.Tensor) -> torch.Tensor:
        s = torch.Stream(device=DEVICE)
        with s:
            y = x.cos()
        torch.accelerator.current_stream().wait_stream(s)
        return y

    x = torch.randn(64, device=dev)
    side = torch.flemu.Stream()
    for fn, args, want in ((on_side_stream, (x, side), x.cpu() * 2 + 1),
                           (with_event, (x,), x.cpu().sin() * 3),
                           (generic_stream, (x,), x.cpu().cos())):
        got = compile_fl(fn)(*args)
        torch.flemu.synchronize()
        torch.testing.assert_close(got.cpu(), want, msg=fn.__name__)


def test_inductor_refuses_the_device_naming_the_torchfl_backend(dev: torch.device) -> None:
    fn = torch.compile(lambda x: torch.relu(x) + 1, backend="inductor")
    with pytest.raises(Exception, match='backend="torchfl"') as err:
        fn(torch.randn(8, device=dev))
    assert "KeyError" not in str(err.value), str(err.value)


@pytest.mark.slow
def test_inductor_still_compiles_for_the_cpu() -> None:
    x = torch.randn(8)
    fn = torch.compile(lambda t: torch.relu(t) + 1, backend="inductor")
    torch.testing.assert_close(fn(x), torch.relu(x) + 1)
