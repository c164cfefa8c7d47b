"""plot_run / plot_eval write readable PNGs; smoothing is the debiased EMA; plot sits on top of the evaluation
modules (the run log never imports it)."""

from __future__ import annotations

import ast
import json
import math

import pytest
from helpers import ROOT

from agentrl.algos.evaluation.plot import find_eval_reports, plot_eval, plot_run, smooth
from agentrl.algos.evaluation.report import EvalReport
from agentrl.algos.evaluation.run_log import MetricsLogger

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_smooth_is_debiased_ema():
    assert smooth([3.0, 3.0, 3.0], 0.9) == pytest.approx([3.0, 3.0, 3.0])  # a constant stays put
    s = smooth([0.0, 1.0], 0.5)
    assert s[0] == 0.0 and s[1] == pytest.approx((0.5 * 0.0 * 0.5 + 0.5 * 1.0) / (1 - 0.25))
    assert smooth([1.0, 5.0, 2.0]) == [1.0, 5.0, 2.0]  # too few points: no smoothing by default
    with pytest.raises(ValueError):
        smooth([1.0], 1.0)


@pytest.fixture
def run_dir(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as log:
        for step in range(1, 41):
            log.log(step, {
                "reward/mean": 0.1 + 0.02 * step + 0.1 * math.sin(step),
                "reward/correct": min(1.0, 0.02 * step),
                "rollout/turns": 2 + math.cos(step),
                "train/loss": 1.0 / step,
                "train/clip_frac_low": 0.01,
                "train/clip_frac_high": 0.02 + 0.001 * step,
                "train/kl": float("nan") if step == 3 else 1e-4 * step,
                "time/rollout": 5.0,
                "note": "strings are not plotted",
            })
        log.log(20, {"eval/average_at_n": 0.3})
    return tmp_path


def test_plot_run_one_png_per_group(run_dir):
    paths = plot_run(run_dir)
    assert [p.name for p in paths] == ["reward.png", "rollout.png", "train.png", "time.png", "eval.png"]
    for p in paths:
        assert p.parent == run_dir / "plots"
        w, h = _png_size(p)
        assert w >= 400 and h >= 300


def test_plot_run_splits_large_groups(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as log:
        for step in range(3):
            log.log(step, {f"env/m{i:02d}": float(i + step) for i in range(14)})
    assert [p.name for p in plot_run(tmp_path)] == ["env.png", "env_2.png"]


def test_plot_run_includes_eval_summaries(run_dir):
    for label, acc in (("base", 0.1), ("rl", 0.4)):
        r = EvalReport(n=4, num_tasks=10, average_at_n=acc, pass_at_n=acc + 0.2, format_rate=0.9)
        (run_dir / f"{label}.summary.json").write_text(json.dumps(r.to_dict()))
    assert [label for label, _ in find_eval_reports(run_dir)] == ["base", "rl"]
    paths = plot_run(run_dir)
    assert [p.name for p in paths][-2:] == ["eval.png", "eval_comparison.png"]  # eval/* curves, then bars
    assert len(set(paths)) == len(paths)


def test_plot_run_nothing_to_plot(tmp_path, caplog):
    with caplog.at_level("WARNING"):
        assert plot_run(tmp_path) == []
    assert "nothing to plot" in caplog.text
    with pytest.raises(FileNotFoundError, match="no run directory"):
        plot_run(tmp_path / "typo")


def test_plot_eval_with_sources(tmp_path):
    base = EvalReport(n=4, num_tasks=14, average_at_n=0.2, pass_at_n=0.5, format_rate=0.6, mean_tool_calls=0.3,
                      mean_turns=1.4, em_by_source={"nq": 0.1, "popqa": 0.3}, macro_em=0.2)
    rl = EvalReport(n=4, num_tasks=14, average_at_n=0.45, pass_at_n=0.7, format_rate=0.95, mean_tool_calls=1.9,
                    mean_turns=2.8, em_by_source={"nq": 0.5}, macro_em=0.5)
    path = plot_eval([("base", base), ("RL", rl.to_dict())], tmp_path / "sub" / "cmp.png")
    assert path.exists()
    w, h = _png_size(path)
    assert h > w * 0.6  # the per-source row makes it taller than the plain chart
    with pytest.raises(ValueError):
        plot_eval([], tmp_path / "x.png")


#: The evaluation modules, lowest first (algos/evaluation/__init__.py): each imports only modules before it.
ORDER = ["process_memory", "trackers", "run_log", "metrics", "report", "intervals", "ledger", "evaluate", "plot",
         "kl"]


def test_evaluation_modules_import_only_lower_ones():
    """At module or function level: the run log draws no plots, so run_log -> plot -> report -> metrics -> run_log
    cannot come back."""
    folder = ROOT / "algos" / "evaluation"
    assert sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__") == sorted(ORDER)
    package = "agentrl.algos.evaluation"
    upward = []
    for i, name in enumerate(ORDER):
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == package:
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
                targets = [node.module.split(".")[3]]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".")[3] for a in node.names if a.name.startswith(package + ".")]
            else:
                continue
            upward += [f"{name} -> {t}" for t in targets if ORDER.index(t) >= i]
    assert not upward, upward
