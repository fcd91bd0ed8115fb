"""The op-statistics view: a ranked table of torch_fl.op_stats(), and `torchfl
stats FILE` for a TORCH_FL_OP_STATS file written by a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_fl
from support import assert_ok, run_python
from torch_fl.op_stats import OpStat, OpStatsTable
from torch_fl.tooling.profile_view import load_op_stats, profile_view

TABLE = OpStatsTable((
    OpStat("aten::add.Tensor", "float32", native=10, time_ns=2_000_000),
    OpStat("aten::atan2.out", "float32", cpu_fallback=4, time_ns=6_000_000, bytes_copied=3 << 20),
    OpStat("aten::mm", "float32", native=2, time_ns=12_000_000),
    OpStat("aten::erfinv.out", "float64", cpu_fallback=1, failed=1, time_ns=1_000_000),
))


def test_rows_are_ranked_by_time_with_shares() -> None:
    view = profile_view(TABLE)
    assert [r.op for r in view.ranked] == ["aten::mm", "aten::atan2.out", "aten::add.Tensor",
                                           "aten::erfinv.out"], view.ranked
    lines = str(view).splitlines()
    assert lines[0] == "op statistics, ranked by time:", lines[0]
    header = lines[1].split()
    assert header == ["#", "op", "dtype", "calls", "ms", "time%", "fallback%", "native", "decomp",
                      "cpu", "failed", "copied"], header
    mm = lines[3].split()
    assert mm[:7] == ["1", "aten::mm", "float32", "2", "12.000", "57.1", "0"], mm
    atan2 = lines[4].split()
    assert atan2[:7] == ["2", "aten::atan2.out", "float32", "4", "6.000", "28.6", "100"], atan2
    assert atan2[-2:] == ["3.0", "MiB"], atan2
    s = view.summary()
    assert (s["calls"], s["cpu_fallback"], s["failed"]) == (18, 5, 1), s
    assert s["fallback_time_share"] == pytest.approx(7 / 21), s
    assert lines[-2].startswith("total: 18 calls over 4 op/dtype rows, 21.000 ms; CPU fallback 5 "
                                "calls (27.8% of calls, 33.3% of time), failed 1"), lines[-2]
    assert lines[-1] == ("most costly fallbacks (worth a native kernel): aten::atan2.out float32 "
                         "(6.000 ms), aten::erfinv.out float64 (1.000 ms)"), lines[-1]


@pytest.mark.parametrize("key, first", [("calls", "aten::add.Tensor"),
                                        ("fallback", "aten::atan2.out"),
                                        ("bytes", "aten::atan2.out")])
def test_other_sort_keys(key: str, first: str) -> None:
    assert profile_view(TABLE, sort_by=key).ranked[0].op == first


def test_top_limits_rows_and_says_so() -> None:
    text = str(profile_view(TABLE, top=2))
    assert "... 2 more operator/dtype rows (raise --top to see them)" in text, text
    with pytest.raises(ValueError, match="sort_by must be one of"):
        profile_view(TABLE, sort_by="name")
    with pytest.raises(ValueError, match="top must be a positive number"):
        profile_view(TABLE, top=0)


def test_live_counters_of_this_process(flemu: torch_fl.PluginHandle) -> None:
    x = torch.ones(64, device="flemu")
    with torch_fl.fallback_mode("silent"), torch_fl.op_stats_scope() as scope:
        for _ in range(3):
            torch.atan2(x, x)
        x + x
    view = profile_view(scope.table)
    by_op = {r.op: r for r in view.ranked}
    assert by_op["aten::atan2.out"].cpu_fallback == 3, by_op
    assert by_op["aten::atan2.out"].bytes_copied > 0, by_op
    assert by_op["aten::add.Tensor"].native == 1, by_op
    live = profile_view()
    assert (live.plugin, live.device) == ("flemu", "flemu"), live
    assert str(live).startswith("op statistics of flemu (device 'flemu'), ranked by time:")


def test_stats_file_from_a_real_run(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    assert_ok(run_python(
        """
        import torch
        x = torch.rand(32, 32, device="flemu")
        for _ in range(5):
            y = x @ x
        torch.atan2(x, y)
        torch.flemu.synchronize()
        """, env={"TORCH_FL_OP_STATS": str(stats), "TORCH_FL_FALLBACK": "silent"}))
    view = load_op_stats(str(stats))
    assert (view.plugin, view.device) == ("flemu", "flemu"), view
    by_op = {r.op: r for r in view.ranked}
    assert by_op["aten::mm"].native == 5, by_op
    assert by_op["aten::atan2.out"].cpu_fallback == 1, by_op
    proc = run_python("import sys; from torch_fl.cli import main; "
                      f"sys.exit(main(['stats', {str(stats)!r}, '--top', '1']))")
    out = assert_ok(proc)
    lines = out.splitlines()
    assert lines[0] == f"op statistics of flemu (device 'flemu') from {stats}, ranked by time:", lines
    assert len([ln for ln in lines if ln[:1].isdigit() or ln.lstrip()[:1].isdigit()]) == 1, out
    doc = json.loads(assert_ok(run_python(
        "import sys; from torch_fl.cli import main; "
        f"sys.exit(main(['stats', {str(stats)!r}, '--format', 'json', '--sort', 'calls']))")))
    assert doc["rows"][0]["op"] == "aten::mm" and doc["rows"][0]["calls"] == 5, doc["rows"][0]


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read op statistics file"),
    ('{"rows": 3}', "is not a TORCH_FL_OP_STATS file"),
    ('{"rows": [{"op": "aten::mm", "dtype": "float32"}]}', "rows[0] lacks native, decomposed"),
    ('{"rows": [{"op": "a", "dtype": "f", "native": -1, "decomposed": 0, "cpu_fallback": 0, '
     '"failed": 0, "time_ns": 0, "bytes_copied": 0}]}', "not non-negative integers"),
])
def test_bad_stats_files_are_explained(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_op_stats(str(path))
    proc = run_python("import sys; from torch_fl.cli import main; "
                      f"sys.exit(main(['stats', {str(path)!r}]))")
    assert proc.returncode == 2 and message in proc.stderr, (proc.returncode, proc.stderr)


def test_missing_stats_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run a program with TORCH_FL_OP_STATS=<file>|by running"):
        load_op_stats(str(tmp_path / "none.json"))
