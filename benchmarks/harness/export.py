"""The one writer of committed data: everything a runner puts into ``docs/results/data/<experiment>/`` goes through
these functions, in the one layout (``<arm>-s<seed>/<set>.jsonl`` beside its meta): a learning run's and a
comparison's data copied at their end (:func:`export_run`, :func:`export_compare`), an axes piece placed when it
finishes (:func:`place_piece`, :func:`write_meta`), a transfer evaluation's records and meta (:func:`write_new`,
:func:`rewrite`). Runners work in their own folders (``runs/``, a scratch folder) and never write the data
themselves (``tests/test_architecture.py`` checks it). The renderers read it back through :mod:`harness.data`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from harness.experiments import LEARNING_ARMS
from harness.layout import ARM_OF_STAGE, COLD_START_DIR, ROOT, cell, records_file, set_name


def write_new(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, which must not exist (mode ``x``: an earlier evaluation is never overwritten)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as f:
        f.write(text)


def rewrite(path: Path, text: str) -> None:
    """Replace a committed file's text (a re-grade that keeps what it replaced in the meta it writes beside)."""
    path.write_text(text, encoding="utf-8")


def remove(path: Path) -> None:
    """Remove what a killed piece or evaluation left (a file, or a training piece's folder); nothing if absent."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def write_meta(path: Path, meta: dict[str, Any]) -> None:
    """A piece's meta, written last and atomically: the piece counts as finished only once it is there."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def place_piece(scratch: Path, data: Path, key: str, evaluation: bool) -> None:
    """Move what an axes piece made in ``scratch`` into the data folder: an evaluation's ``tasks.jsonl`` becomes
    ``<key>.jsonl`` (``<model>/<set>-<mode>.jsonl``); a training piece's files go into its folder ``<key>/``."""
    if evaluation:
        records = data / f"{key}.jsonl"
        records.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(scratch / "tasks.jsonl", records)
        return
    (data / key).mkdir(parents=True, exist_ok=True)
    for path in sorted(scratch.iterdir()):
        shutil.move(path, data / key / path.name)


def per_task_file(episodes: Path, dest: Path) -> None:
    """The per-task scores (``ledger.task_scores``: id, family, score, n) of an episodes file, as compact
    JSONL."""
    from agentrl.algos.evaluation.ledger import task_scores
    from agentrl.algos.rollout.trajectory import load_trajectories

    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in task_scores(load_trajectories(episodes))),
                    encoding="utf-8")


def export_run(out: Path, dest: Path, summary: dict[str, Any], episodes: dict[str, Path],
               stages: tuple[str, ...] = ("sft", "grpo", "sft_control")) -> Path:
    """Copy what the page needs from a learning run into ``dest`` (committed), in the one layout: each row's
    per-task scores as ``<arm>-s<seed>/<set>.jsonl`` (from ``episodes``: row label -> episodes file; the arm of a
    label is :data:`harness.experiments.LEARNING_ARMS`'), each training stage's metrics as its arm's
    ``<arm>-s<seed>/metrics.jsonl``, and ``learning.json`` (``summary`` plus ``evals``: row label -> its per-task
    file), the run's meta."""
    if dest.exists():
        shutil.rmtree(dest)
    seed, name = summary.get("seed", 0), set_name(summary["heldout_file"])
    evals = {}
    for label, path in episodes.items():
        if path.is_file():
            records = records_file(dest, LEARNING_ARMS[label], seed, name)
            per_task_file(path, records)
            evals[label] = records.relative_to(dest).as_posix()
    for stage in stages:
        if (out / stage / "metrics.jsonl").is_file():
            metrics = dest / cell(ARM_OF_STAGE[stage], seed) / "metrics.jsonl"
            metrics.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / stage / "metrics.jsonl", metrics)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "learning.json"
    path.write_text(json.dumps({**summary, "evals": evals}, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def export_compare(out: Path, dest: Path) -> Path | None:
    """Copy ``benchmarks/compare_algorithms.py``'s ``compare.json`` (the comparison's meta), the per-task scores of
    every evaluation (the cold start's ``cold_start/<set>.jsonl``; each algorithm's and seed's
    ``<algo>-s<seed>/<set>.jsonl`` at the end of its budget, ``<set>.at-<fraction>.jsonl`` part-way) and each
    run's training metrics (``<algo>-s<seed>/metrics.jsonl``) from its run directory ``out`` into ``dest``; None
    without one."""
    if not (out / "compare.json").is_file():
        return None
    if dest.exists():
        shutil.rmtree(dest)
    summary = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    name = set_name(summary["heldout_file"])
    if (out / "eval" / "cold_start.jsonl").is_file():
        per_task_file(out / "eval" / "cold_start.jsonl", dest / COLD_START_DIR / f"{name}.jsonl")
    for episodes in sorted(out.glob("*-s*/eval/at-*.jsonl")):
        arm, _, seed = episodes.parent.parent.name.rpartition("-s")
        fraction = float(episodes.stem.removeprefix("at-"))
        per_task_file(episodes, records_file(dest, arm, int(seed), name, fraction))
    for metrics in sorted(out.glob("*-s*/metrics.jsonl")):
        (dest / metrics.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(metrics, dest / metrics.parent.name / "metrics.jsonl")
    summary.setdefault("commit", None)
    if summary["commit"] is None:  # a compare.json from before compare_algorithms.py recorded it: the checkout's
        from agentrl.algos.evaluation.ledger import git_state

        summary.update(git_state(ROOT), commit_recorded="at copy time (this compare.json did not record it)")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "compare.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return dest / "compare.json"
