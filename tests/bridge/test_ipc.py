"""A device tensor sent to another process fails at once, saying what to do:
PyTorch 2.13 has inter-process sharing for CUDA tensors only, and without our
reducer the receiving process would wait until its own timeout."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_device_tensor_through_a_queue_fails_at_once_in_the_consumer(tmp_path: Path) -> None:
    # A file, not `python -c`: spawned processes import the consumer from it.
    script = tmp_path / "send_device_tensor.py"
    script.write_text(textwrap.dedent(
        """
        import queue, time, warnings
        import torch, torch.multiprocessing as mp

        def consumer(q, answers):
            try:
                q.get(timeout=60)
                answers.put("received")
            except Exception as exc:
                answers.put(f"{type(exc).__name__}: {exc}")

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q, answers = ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=consumer, args=(q, answers))
            p.start()
            t0 = time.monotonic()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                q.put(torch.ones(4, device="flemu"))
                time.sleep(1.0)  # the queue pickles in its feeder thread
            answer = answers.get(timeout=60)
            p.join(60)
            print(repr(answer))
            print("waited", int(time.monotonic() - t0 < 45))
            print("warned", int(any("t.cpu()" in str(m.message) for m in w)))
            # CPU tensors still travel through shared memory as usual.
            r, s = ctx.Pipe()
            s.send(torch.arange(3))
            print("cpu", r.recv().tolist())
        """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    lines = out.strip().splitlines()
    assert "RuntimeError" in lines[0] and "t.cpu()" in lines[0] and "flemu" in lines[0], out
    assert lines[1:] == ["waited 1", "warned 1", "cpu [0, 1, 2]"], out
