"""``agentrl eval``'s evaluation layer on TauBench-v0 (mock, solo mode, offline): per-task success is τ²'s, so the
report's pass^k is τ²-bench's pass^k (all k tries of a task succeed) and its pass@k the usual estimate."""

from __future__ import annotations

from math import comb

import pytest

from agentrl.algos.evaluation.evaluate import evaluate
from agentrl.algos.policy.base import GenerationResult, Policy
from agentrl.algos.rollout.chat import ChatFormat
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.envs.tau_bench.env import TauBenchEnv


class SometimesRightPolicy(Policy):
    """For task ``t``, its first ``right[t]`` samples play τ²'s expected actions, then ``done``; the others answer
    in plain text at once (in solo mode, τ²'s agent error). The turn is read from the prompt: the number of calls
    the agent made since the ticket."""

    def __init__(self, tokenizer, env: TauBenchEnv, right: dict[str, int]):
        self.tokenizer, self.env, self.right = tokenizer, env, dict(right)
        self.stop = ChatFormat(tokenizer).stop_token_ids[0]
        self.seen: dict[str, int] = {}

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            text = self.tokenizer.decode(r.prompt_ids, skip_special_tokens=False)
            task_id = next(t for t in self.right if self.env.all_tasks[t].ticket in text)
            after_ticket = text.split(self.env.all_tasks[task_id].ticket)[-1]
            turn = after_ticket.count("<tool_call>")
            if turn == 0:
                self.seen[task_id] = k = self.seen.get(task_id, 0) + 1
                if k > self.right[task_id]:
                    reply = "I cannot help with that."
                    out.append(self._result(reply))
                    continue
            out.append(self._result(self.env.demo_actions({"id": task_id})[turn]))
        return out

    def _result(self, reply: str) -> GenerationResult:
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.stop]
        return GenerationResult(ids, [-1.0] * len(ids), "stop")


def test_evaluate_reports_tau2s_pass_hat_k(tokenizer):
    """4 samples of 3 mock tasks, of which 4, 2 and 0 succeed: Average@4 = 6/12, pass^k and pass@k per k as the
    per-task counts give them."""
    right = {"create_task_1": 4, "update_task_1": 2, "impossible_task_1": 0}
    env = TauBenchEnv("mock")
    policy = SometimesRightPolicy(tokenizer, env, right)
    report = evaluate("AgentRL/TauBench-v0", policy, [{"id": t} for t in right], 4,
                      CollectorConfig(max_turns=4, max_new_tokens=256), env_kwargs={"domain": "mock"},
                      progress=False)
    assert report.average_at_n == pytest.approx(6 / 12)
    for k in range(1, 5):
        assert report.pass_hat_k[k] == pytest.approx(sum(comb(c, k) / comb(4, k) for c in right.values()) / 3)
        assert report.pass_at_k[k] == pytest.approx(
            sum(1 - comb(4 - c, k) / comb(4, k) for c in right.values()) / 3)
    assert report.pass_hat_k[4] == pytest.approx(1 / 3) and report.pass_at_k[4] == pytest.approx(2 / 3)


def test_agentrl_eval_runs_tau_bench_mock_offline(tiny_dir, tmp_path, capsys):
    """The command of docs/envs/tau_bench.md, with a tiny random model: every mock test task, twice, offline."""
    import json

    from agentrl.algos import cli

    out = tmp_path / "mock.jsonl"
    assert cli.main(["eval", "--env", "AgentRL/TauBench-v0", "--env-kwargs", '{"domain": "mock"}',
                     "--model", str(tiny_dir), "--n", "2", "--max-new-tokens", "4", "--out", str(out),
                     "--dtype", "fp32", "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["task"]["id"] for r in rows}) == sorted(TauBenchEnv("mock").test_ids) and len(rows) == 12
    assert "pass^k" in capsys.readouterr().out
