"""Paired bootstrap intervals and met/missed verdicts for two evaluations of the same tasks.

A figure on a results page is a difference of two evaluations of the same held-out tasks (RL vs its cold
start, RL vs a control). Its uncertainty comes from which tasks happened to be in the set, so the interval
resamples *tasks*, keeping each task's pair of scores together (a paired bootstrap): 10,000 resamples with a
seeded ``numpy`` generator, the 2.5th and 97.5th percentiles of the resampled difference.

Per-task scores are what :func:`agentrl.algos.evaluation.ledger.task_scores` writes: the mean of ``correct`` over
a task's N episodes. Two metrics:

* ``average_at_n`` — the mean of the per-task scores (Average@N; ToolUse-v0's success, PythonMath-v0's Average@4).
* ``macro_em`` — the unweighted mean over groups (data sources) of the groups' mean scores (Search-v0's
  Macro-EM). Its bootstrap resamples tasks within each group (stratified), so every resample has every group.

A verdict compares the difference with a stated goal: **met** when the point estimate reaches it, **missed**
otherwise; :attr:`Comparison.decided` says whether the whole interval lies on the verdict's side of the goal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: Metric name -> how it reads on a page.
METRICS = {"average_at_n": "Average@N", "macro_em": "Macro-EM"}
RESAMPLES = 10_000
SEED = 0


def metric_value(scores: Sequence[float], metric: str = "average_at_n", groups: Sequence[str] | None = None) -> float:
    """The metric of per-task scores (fractions in [0, 1]); ``groups`` (one per task) for ``macro_em``."""
    s = np.asarray(scores, dtype=float)
    if s.size == 0:
        raise ValueError("no task scores")
    if metric == "average_at_n":
        return float(s.mean())
    if metric == "macro_em":
        if groups is None or len(groups) != s.size:
            raise ValueError("macro_em needs one group per task")
        g = np.asarray(groups)
        return float(np.mean([s[g == k].mean() for k in sorted(set(groups))]))
    raise ValueError(f"unknown metric {metric!r}; known: {sorted(METRICS)}")


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, metric: str = "average_at_n",
                     groups: Sequence[str] | None = None, resamples: int = RESAMPLES, seed: int = SEED,
                     level: float = 0.95) -> tuple[float, float, float]:
    """``(difference, low, high)`` of ``metric(a) - metric(b)`` over the same tasks (``a[i]``, ``b[i]`` and
    ``groups[i]`` belong to task ``i``): the point estimate and the percentile interval of a paired bootstrap
    over tasks. Deterministic for a given ``seed``.
    """
    a_, b_ = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_.shape != b_.shape or a_.ndim != 1 or a_.size == 0:
        raise ValueError(f"need two equally long, non-empty score lists, got {a_.shape} and {b_.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    d = a_ - b_
    rng = np.random.default_rng(seed)
    if metric == "average_at_n":
        stats = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    elif metric == "macro_em":
        if groups is None or len(groups) != d.size:
            raise ValueError("macro_em needs one group per task")
        g = np.asarray(groups)
        per_group = []
        for k in sorted(set(groups)):
            dk = d[g == k]
            per_group.append(dk[rng.integers(0, dk.size, size=(resamples, dk.size))].mean(axis=1))
        stats = np.mean(per_group, axis=0)
    else:
        raise ValueError(f"unknown metric {metric!r}; known: {sorted(METRICS)}")
    tail = (1 - level) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    point = metric_value(a_, metric, groups) - metric_value(b_, metric, groups)
    return float(point), float(low), float(high)


@dataclass(frozen=True)
class Comparison:
    """One comparison of a page: ``a`` against ``b`` on the same tasks, with its interval and verdict.

    Scores, differences and the goal are in points (percent of tasks)."""

    a: float
    b: float
    difference: float
    low: float
    high: float
    goal: float
    metric: str
    strict: bool = False
    """The goal is "above B + goal" (met only when the difference exceeds it), not "at least"."""

    @property
    def met(self) -> bool:
        return self.difference > self.goal if self.strict else self.difference >= self.goal

    @property
    def verdict(self) -> str:
        return "met" if self.met else "missed"

    @property
    def decided(self) -> bool:
        """Whether the whole 95% interval lies on the verdict's side of the goal."""
        if self.strict:
            return self.low > self.goal if self.met else self.high <= self.goal
        return self.low >= self.goal if self.met else self.high < self.goal


def align(a: Mapping[str, float], b: Mapping[str, float]) -> list[str]:
    """The task ids both evaluations scored, in ``a``'s order; ``ValueError`` unless they scored the same tasks."""
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise ValueError(f"not the same tasks: {len(only_a)} only in the first (e.g. {only_a[:3]}), "
                         f"{len(only_b)} only in the second (e.g. {only_b[:3]})")
    return list(a)


def compare(a: Mapping[str, float], b: Mapping[str, float], *, goal_points: float, metric: str = "average_at_n",
            groups: Mapping[str, str] | None = None, strict: bool = False, resamples: int = RESAMPLES,
            seed: int = SEED) -> Comparison:
    """Per-task scores ``{task id: score}`` of two evaluations -> :class:`Comparison` against ``goal_points``
    (e.g. ``10`` for "+10 points"); ``groups`` maps task id -> group for ``macro_em``."""
    ids = align(a, b)
    g = [groups[i] for i in ids] if groups is not None else None
    sa, sb = [a[i] for i in ids], [b[i] for i in ids]
    diff, low, high = paired_bootstrap(sa, sb, metric=metric, groups=g, resamples=resamples, seed=seed)
    return Comparison(a=100 * metric_value(sa, metric, g), b=100 * metric_value(sb, metric, g),
                      difference=100 * diff, low=100 * low, high=100 * high, goal=goal_points, metric=metric,
                      strict=strict)


__all__ = ["METRICS", "Comparison", "align", "compare", "metric_value", "paired_bootstrap"]
