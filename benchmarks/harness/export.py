"""What a runner copies into ``docs/results/data/`` at the end of a run (committed with its page): per-task
scores, training metrics and the run's summary. The renderers read it back through :mod:`harness.data`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.ledger import git_state, task_scores
from agentrl.algos.rollout.trajectory import load_trajectories
from harness.layout import ROOT


def per_task_file(episodes: Path, dest: Path) -> None:
    """The per-task scores (``ledger.task_scores``: id, family, score, n) of an episodes file, as compact
    JSONL."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in task_scores(load_trajectories(episodes))),
                    encoding="utf-8")


def export_run(out: Path, dest: Path, summary: dict[str, Any], episodes: dict[str, Path],
               stages: tuple[str, ...] = ("sft", "grpo", "sft_control")) -> Path:
    """Copy what the page needs from a learning run into ``dest`` (committed): ``eval/<stage>.jsonl`` per row
    (per-task scores, from ``episodes``: row label -> episodes file), ``metrics/<stage>.jsonl`` (the training
    stages' metrics) and ``learning.json`` (``summary`` plus ``evals``: row label -> its per-task file)."""
    if dest.exists():
        shutil.rmtree(dest)
    evals = {}
    for label, path in episodes.items():
        if path.is_file():
            rel = path.relative_to(out).with_suffix("").as_posix()
            name = rel.replace("/eval/", "_").removeprefix("eval/").replace("/", "_")
            per_task_file(path, dest / "eval" / f"{name}.jsonl")
            evals[label] = f"eval/{name}.jsonl"
    for stage in stages:
        if (out / stage / "metrics.jsonl").is_file():
            (dest / "metrics").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / stage / "metrics.jsonl", dest / "metrics" / f"{stage}.jsonl")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "learning.json"
    path.write_text(json.dumps({**summary, "evals": evals}, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def export_compare(out: Path, dest: Path) -> Path | None:
    """Copy ``benchmarks/compare_algorithms.py``'s ``compare.json``, the per-task scores of every evaluation
    (cold start; each algorithm, seed and point) and each run's training metrics
    (``metrics/<algo>-s<seed>.jsonl``) from its run directory ``out`` into ``dest``; None without one."""
    if not (out / "compare.json").is_file():
        return None
    if dest.exists():
        shutil.rmtree(dest)
    for episodes in sorted(out.glob("eval/*.jsonl")) + sorted(out.glob("*/eval/*.jsonl")):
        rel = episodes.relative_to(out).with_suffix("").as_posix()
        per_task_file(episodes, dest / "eval" / f"{rel.replace('/eval/', '-').removeprefix('eval/')}.jsonl")
    for metrics in sorted(out.glob("*-s*/metrics.jsonl")):
        (dest / "metrics").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(metrics, dest / "metrics" / f"{metrics.parent.name}.jsonl")
    summary = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    summary.setdefault("commit", None)
    if summary["commit"] is None:  # a compare.json from before compare_algorithms.py recorded it: the checkout's
        summary.update(git_state(ROOT), commit_recorded="at copy time (this compare.json did not record it)")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "compare.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return dest / "compare.json"
