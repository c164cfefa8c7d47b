"""Paired bootstrap intervals and verdicts on crafted per-task scores."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.algos.evaluation.intervals import compare, metric_value, paired_bootstrap


def test_identical_runs_give_a_zero_interval():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, 128).astype(float)
    assert paired_bootstrap(a, a) == (0.0, 0.0, 0.0)
    groups = ["x"] * 100 + ["y"] * 28
    assert paired_bootstrap(a, a, metric="macro_em", groups=groups) == (0.0, 0.0, 0.0)


def test_a_known_shift_is_covered_and_the_interval_is_seeded():
    rng = np.random.default_rng(2)
    b = rng.integers(0, 2, 200).astype(float)
    a = b.copy()
    flip = np.flatnonzero(b == 0)[:30]  # 30 of 200 tasks fixed: +15 points
    a[flip] = 1.0
    diff, low, high = paired_bootstrap(a, b, seed=7)
    assert diff == pytest.approx(0.15) and low < 0.15 < high and low > 0  # a real gain: the interval excludes 0
    assert paired_bootstrap(a, b, seed=7) == (diff, low, high)
    # the seed is what fixes the resamples: with few of them, another seed moves the interval
    few = [paired_bootstrap(a, b, seed=s, resamples=20, level=0.5) for s in (7, 7, 8)]
    assert few[0] == few[1] and few[0] != few[2]


def test_macro_em_weighs_groups_equally_and_stratifies():
    scores = [1.0] * 10 + [0.0] * 2  # group x all right (10 tasks), group y all wrong (2 tasks)
    groups = ["x"] * 10 + ["y"] * 2
    assert metric_value(scores, "macro_em", groups) == 0.5 and metric_value(scores) == pytest.approx(10 / 12)
    # a shift only in the small group: stratified resampling keeps both groups, so the interval is exact
    better = [1.0] * 10 + [1.0, 0.0]
    assert paired_bootstrap(better, scores, metric="macro_em", groups=groups) == pytest.approx((0.25, 0.0, 0.5))


def test_compare_gives_points_and_a_verdict_against_the_goal():
    b = {f"t{i}": float(i % 2) for i in range(100)}  # 50%
    a = {k: 1.0 if i < 60 else v for i, (k, v) in enumerate(b.items())}  # the 30 wrong ones among the first 60 fixed
    c = compare(a, b, goal_points=10)
    assert c.a == pytest.approx(80.0) and c.b == pytest.approx(50.0) and c.difference == pytest.approx(30.0)
    assert c.verdict == "met" and c.decided and c.low > 10
    missed = compare(a, b, goal_points=40)
    assert missed.verdict == "missed" and missed.high < 40 and missed.decided
    tie = compare(b, b, goal_points=0, strict=True)
    assert tie.verdict == "missed"  # "above" is not met by a tie
    assert compare(b, b, goal_points=0).verdict == "met"
    with pytest.raises(ValueError, match="not the same tasks"):
        compare({"a": 1.0}, {"b": 1.0}, goal_points=0)
