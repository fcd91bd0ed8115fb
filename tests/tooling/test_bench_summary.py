"""bench/summary.py: the table `make bench` puts in the README — rows, verdicts,
the machine it names, and the refusal to publish a partial or failed run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def summary():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("bench_summary", ROOT / "bench" / "summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench(name: str, median_s: float | None, **info) -> SimpleNamespace:  # noqa: ANN003
    stats = SimpleNamespace(median=median_s) if median_s is not None else None
    return SimpleNamespace(name=name, stats=stats, extra_info=info)


def _entry(row: str, value: float, case: str | None = None, target: float | None = None,
           unit: str = "x") -> dict:
    return {"row": row, "case": case, "value": value, "unit": unit, "target": target}


def test_rows_group_cases_in_run_order_with_verdicts(summary) -> None:  # noqa: ANN001
    rows = summary.table([
        _entry("step", 0.6, "ResNet-18", 1.0),
        _entry("bridge", 1.6, "ResNet-18", 1.5, unit="us"),
        _entry("step", 1.2, "encoder", 1.0),
        _entry("bridge", 1.4, "encoder", 1.5, unit="us"),
        _entry("add", 1.23, target=1.1),
        _entry("share", 23.4, "ResNet-18", unit="%"),
        _entry("share", 2.46, "encoder", unit="%"),
    ])
    assert [r["what"] for r in rows] == [
        "step: ResNet-18 / encoder", "bridge: ResNet-18 / encoder", "add", "share: ResNet-18 / encoder"]
    step, bridge, add, share = rows
    assert step["measured"] == "0.60× / 1.20×" and step["target"] == "≤ 1×"
    assert step["verdict"] == "1 of 2 met"
    assert bridge["measured"] == "1.60 µs / 1.40 µs" and bridge["target"] == "≤ 1.5 µs"
    assert add["verdict"] == "missed" and add["target"] == "≤ 1.1×"
    assert share["measured"] == "23% / 2.5%" and share["target"] == share["verdict"] == "—"


def test_rows_in_the_order_of_their_modules(summary) -> None:  # noqa: ANN001
    items = [dict(_entry("all_reduce", 0.2, "64 MiB", 1.0), module="test_allreduce"),
             dict(_entry("not listed", 1.0), module="test_new_benchmark"),
             dict(_entry("gemm", 1.0, "512", 1.1), module="test_kernels_gemm"),
             dict(_entry("step", 0.6, "ResNet-18", 1.0), module="test_training_step"),
             dict(_entry("bridge", 1.4, "ResNet-18", 1.5, unit="us"), module="test_training_step")]
    assert [r["what"].split(":")[0] for r in summary.table(items)] == [
        "step", "bridge", "gemm", "all_reduce", "not listed"]


def test_targets_on_some_cases_or_different_targets(summary) -> None:  # noqa: ANN001
    partial, mixed, exact = summary.table([
        _entry("all_reduce", 1.7, "1 MiB"),
        _entry("all_reduce", 0.2, "64 MiB", 1.0),
        _entry("memory", 0.7, "vs unplanned", 0.8),
        _entry("memory", 1.1, "vs eager", 1.0),
        _entry("adam", 1 / 3, "100 parameters", 1 / 3),
    ])
    # The 1 MiB case has no target: its 1.7x does not count against the row.
    assert partial["target"] == "≤ 1× (64 MiB)" and partial["verdict"] == "met"
    assert mixed["target"] == "≤ 0.8× / ≤ 1×" and mixed["verdict"] == "1 of 2 met"
    assert exact["verdict"] == "met"  # a value at its bound meets it


def test_entries_ratios_against_baselines_then_figures(summary) -> None:  # noqa: ANN001
    benchmarks = [
        _bench("test_unfused[a]", 2.0),
        _bench("test_fused[a]", 0.5, baseline="test_unfused[a]"),
        _bench("test_step[resnet]", 3.0, baseline="CPU step", baseline_median_s=4.0, row="step",
               case="ResNet-18", target=1.0,
               figures=[_entry("bridge", 1.4, "ResNet-18", 1.5, unit="us")]),
        _bench("test_missing_baseline", 1.0, baseline="test_not_run"),
        _bench("test_no_stats", None, baseline="test_unfused[a]"),
    ]
    items = [{k: v for k, v in e.items() if k != "module"} for e in summary.entries(benchmarks)]
    assert items == [
        # No row given: the test's name and its parameters.
        _entry("test_fused", 0.25, "a"),
        _entry("step", 0.75, "ResNet-18", 1.0),
        _entry("bridge", 1.4, "ResNet-18", 1.5, unit="us"),
    ]


@pytest.fixture
def readme(tmp_path: Path) -> Path:
    path = tmp_path / "README.md"
    path.write_text(f"# title\n\nbefore\n\n{'<!-- make bench: begin -->'}\nold table\n"
                    f"{'<!-- make bench: end -->'}\n\nafter\n")
    return path


def _written(summary, out: Path, monkeypatch, **kw) -> Path:  # noqa: ANN001, ANN003
    monkeypatch.setattr(summary, "OUT", out)
    benchmarks = [_bench("test_step[resnet]", 3.0, baseline="CPU step", baseline_median_s=4.0,
                         row="training step", case="ResNet-18", target=1.0)]
    args = dict(exit_status=0, complete=True, args=["bench"])
    args.update(kw)
    return summary.write(benchmarks, **args)


def test_write_names_the_run_and_into_readme_replaces_the_block(
        summary, readme: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("MAKELEVEL", "1")
    path = _written(summary, tmp_path / "out", monkeypatch)
    record = json.loads(path.with_suffix(".json").read_text())
    env = record["environment"]
    assert env["command"] == "make bench" and env["torch"] == torch.__version__
    assert env["torch_threads"] == torch.get_num_threads() and env["cpus"] >= 1
    assert env["commit"], "the summary names no commit"
    assert record["rows"] == [{"what": "training step: ResNet-18", "measured": "0.75×",
                               "target": "≤ 1×", "verdict": "met"}]
    summary.into_readme(readme, path)
    text = readme.read_text()
    assert "old table" not in text and text.startswith("# title\n\nbefore\n\n")
    assert text.endswith("<!-- make bench: end -->\n\nafter\n")
    assert "| training step: ResNet-18 | 0.75× | ≤ 1× | met |" in text
    assert f"torch {torch.__version__} with {torch.get_num_threads()} threads" in text
    summary.into_readme(readme, path)
    assert readme.read_text() == text, "a second copy changed the README"


@pytest.mark.parametrize("kw, why", [
    ({"complete": False, "args": ["bench/test_dispatch.py"]}, "not every benchmark selected"),
    ({"exit_status": 1}, "exit status 1"),
])
def test_into_readme_refuses_partial_or_failed_runs(
        summary, readme: Path, tmp_path: Path, monkeypatch, kw: dict, why: str) -> None:  # noqa: ANN001
    monkeypatch.delenv("MAKELEVEL", raising=False)
    path = _written(summary, tmp_path / "out", monkeypatch, **kw)
    before = readme.read_text()
    with pytest.raises(SystemExit, match=why):
        summary.into_readme(readme, path)
    assert readme.read_text() == before


def test_into_readme_needs_the_markers_and_a_summary(summary, tmp_path: Path) -> None:  # noqa: ANN001
    plain = tmp_path / "plain.md"
    plain.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="no '<!-- make bench: begin -->'"):
        summary.into_readme(plain, tmp_path / "summary.md")
    marked = tmp_path / "marked.md"
    marked.write_text("<!-- make bench: begin -->\n<!-- make bench: end -->\n")
    with pytest.raises(SystemExit, match="run the benchmarks first"):
        summary.into_readme(marked, tmp_path / "missing" / "summary.md")


@pytest.mark.parametrize("paths, keyword, markexpr, deselect, every", [
    (["bench"], "", "", None, True),
    ([str(ROOT / "bench")], "", "", [], True),
    (["bench/test_dispatch.py"], "", "", None, False),
    (["bench", "bench/test_dispatch.py::test_add_flemu_native"], "", "", None, False),
    (["bench"], "add", "", None, False),
    (["bench"], "", "slow", None, False),
    (["bench"], "", "", ["bench/test_startup.py"], False),
])
def test_selects_every_benchmark(summary, monkeypatch, paths, keyword, markexpr, deselect,  # noqa: ANN001
                                 every: bool) -> None:
    monkeypatch.chdir(ROOT)
    assert summary.selects_every_benchmark(paths, keyword, markexpr, deselect) is every


def test_the_readme_has_the_block(summary) -> None:  # noqa: ANN001
    text = (ROOT / "README.md").read_text()
    assert text.count(summary.BEGIN) == 1 and text.count(summary.END) == 1
    assert text.index(summary.BEGIN) < text.index(summary.END)
