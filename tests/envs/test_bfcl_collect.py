"""Tools per task through the consumers: the collector (scripted replies in each template's native call format)
and ``agentrl eval`` (a tiny random model), on AgentRL/BFCL-v0 and on ToolUse-v0 rows that carry their tools.
Each episode's prompt shows its own task's functions, once, and no other task's."""

from __future__ import annotations

import json

import pytest
from helpers import ScriptedPolicy

from agentrl.algos import cli
from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.algos.rollout.trajectory import Trajectory
from agentrl.envs.bfcl.env import BFCLEnv


def names(task):
    return [f["name"] for f in task["tools"]]


def scripted(tokenizer, env, tasks, *, end_token=True):
    """A policy that replies with each task's BFCL ground truth in the template's call format (``end_token=False``:
    each reply stops at the token budget, ``finish_reason == "length"``)."""
    policy = ScriptedPolicy(tokenizer, [], end_token=end_token)
    env.use_call_format(policy.fmt.call_format)
    policy.actions = {t["question"][0][-1]["content"]: env.demo_actions(t) for t in tasks}
    return policy


@pytest.mark.parametrize("kind", ["chatml", "qwen", "llama3"])
def test_the_collector_renders_each_tasks_tools_and_bfcl_grades_the_calls(template_tokenizers, kind):
    tok = template_tokenizers[kind]
    env = BFCLEnv(category="parallel_multiple")
    tasks = env.test_tasks(3, seed=1)
    assert len({tuple(names(t)) for t in tasks}) == 3  # three different tool sets
    trajs = collect("AgentRL/BFCL-v0", scripted(tok, env, tasks), tasks, group_size=2,
                    env_kwargs={"category": "parallel_multiple"}, config=CollectorConfig(max_total_tokens=8192))
    for tr in trajs:
        assert tr.reward == 1.0 and tr.termination == "answered" and tr.metrics["correct"] == 1.0
        prompt = tok.decode(tr.token_ids[: tr.prompt_len])
        own = names(tasks[tr.group_id])
        assert all(prompt.count(f'"{n}"') == 1 for n in own), (kind, own)  # by the template or the env, not both
        others = {n for t in tasks for n in names(t)} - set(own)
        assert not [n for n in others if f'"{n}"' in prompt]


@pytest.mark.parametrize("category", ["simple_python", "irrelevance"])
def test_a_reply_cut_by_the_token_budget_is_graded_by_bfcls_checker(tokenizer, category):
    # BFCL grades whatever the model wrote: complete calls before the cut count, and an irrelevance reply that
    # made no call is right. The same cut reply on a ToolUse-v0 task is not stepped (tests/algos/rollout).
    env = BFCLEnv(category=category)
    tasks = env.test_tasks(2, seed=0)
    trajs = collect("AgentRL/BFCL-v0", scripted(tokenizer, env, tasks, end_token=False), tasks, group_size=1,
                    env_kwargs={"category": category}, config=CollectorConfig(max_total_tokens=8192))
    for tr in trajs:
        assert tr.turns[0].finish_reason == "length" and tr.turns[0].parsed["kind"] != ""
        assert (tr.reward, tr.termination, tr.metrics["correct"]) == (1.0, "answered", 1.0), tr.task["id"]


def test_agentrl_eval_on_bfcl_and_on_rows_with_their_own_tools(tiny_dir, tokenizer, tmp_path, capsys):
    out = tmp_path / "bfcl.jsonl"
    assert cli.main(["eval", "--env", "AgentRL/BFCL-v0", "--env-kwargs", '{"category": "multiple"}', "--model",
                     str(tiny_dir), "--tasks", "2", "--max-new-tokens", "4", "--out", str(out), "--dtype", "fp32",
                     "--device", "cpu"]) == 0
    trajs = [Trajectory.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    ids = {t["id"] for t in BFCLEnv(category="multiple").rows}
    assert len({t.task["id"] for t in trajs}) == 2 and {t.task["id"] for t in trajs} <= ids
    for tr in trajs:
        prompt = tokenizer.decode(tr.token_ids[: tr.prompt_len])
        assert all(f'"{n}"' in prompt for n in names(tr.task))
        assert tr.reward == 0.0  # four random tokens call nothing
    # ToolUse-v0 rows that bring their own tool: the prompt lists it instead of the env's mock tools.
    rows = tmp_path / "rows.jsonl"
    lookup = {"name": "lookup_code", "description": "The code of a city.",
              "parameters": {"type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    rows.write_text("\n".join(json.dumps({"id": f"r{i}", "query": f"Code of city {i}?", "answer": "X",
                                          "tools": [lookup]}) for i in range(2)) + "\n")
    out = tmp_path / "rows_out.jsonl"
    assert cli.main(["eval", "--env", "AgentRL/ToolUse-v0", "--model", str(tiny_dir), "--tasks-file", str(rows),
                     "--max-new-tokens", "4", "--out", str(out), "--dtype", "fp32", "--device", "cpu"]) == 0
    for line in out.read_text().splitlines():
        tr = Trajectory.from_dict(json.loads(line))
        prompt = tokenizer.decode(tr.token_ids[: tr.prompt_len])
        assert '"lookup_code"' in prompt and '"multiply"' not in prompt
    capsys.readouterr()
