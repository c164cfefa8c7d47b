"""summarize / evaluate / results_table: hand-made trajectories with known answers, and a stand-in collector."""

from __future__ import annotations

import json
import math
import sys
import types

import pytest

import agentrl.algos.evaluation.evaluate as ev
from agentrl.algos.evaluation.report import EvalReport, load_report, pass_at_k, results_table, summarize
from agentrl.algos.rollout.trajectory import Trajectory, Turn, load_trajectories


def traj(group: int, correct: bool, *, source: str | None = None, fmt: bool = True, tool_calls: int = 1,
         turns: int = 2, reward: float | None = None, termination: str = "answered", **metrics) -> Trajectory:
    task = {"id": f"t{group}"} | ({"data_source": source} if source is not None else {})
    kinds = ["tool_call"] * (turns - 1) + ["answer"]
    return Trajectory(token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], prompt_len=1,
                      reward=float(correct) if reward is None else reward, group_id=group, task=task,
                      turns=[Turn(0, 1, "x", {"kind": k}) for k in kinds], termination=termination,
                      metrics={"correct": int(correct), "format_ok": int(fmt), "tool_calls": tool_calls,
                               "turns": turns, "invalid_calls": 0, **metrics})


# ---------------------------------------------------------------------------------------------- summarize


def test_average_and_pass_at_n_the_seed_example():
    # 30 tasks, N = 12, 90 correct answers spread over 14 tasks: Average@12 = 25 %, Pass@12 = 14/30.
    per_task = [7] * 6 + [6] * 8 + [0] * 16  # 42 + 48 = 90 correct on 14 tasks
    assert sum(per_task) == 90 and sum(c > 0 for c in per_task) == 14
    trajs = [traj(g, i < c) for g, c in enumerate(per_task) for i in range(12)]
    r = summarize(trajs, 12)
    assert r.num_tasks == 30 and r.num_samples == 360
    assert r.average_at_n == pytest.approx(0.25)
    assert r.pass_at_n == pytest.approx(14 / 30)
    assert r.pass_at_k[1] == pytest.approx(0.25)  # pass@1 estimate equals Average@N
    assert r.pass_at_k[12] == pytest.approx(14 / 30)
    assert sorted(r.pass_at_k) == list(range(1, 13))  # every k up to N


def test_pass_at_n_counts_tasks_not_samples():
    trajs = [traj(0, True), traj(0, False), traj(0, False), traj(0, False),  # 1 of 4 correct
             traj(1, False), traj(1, False), traj(1, False), traj(1, False)]  # none
    r = summarize(trajs, 4)
    assert r.average_at_n == pytest.approx(1 / 8)
    assert r.pass_at_n == 0.5


def test_macro_em_is_unweighted_mean_over_sources():
    # source a: 4 tasks, 3 correct (75 %); source b: 1 task, 0 correct -> Macro-EM 37.5 %, micro 60 %
    trajs = [traj(0, True, source="a"), traj(1, True, source="a"), traj(2, True, source="a"),
             traj(3, False, source="a"), traj(4, False, source="b")]
    r = summarize(trajs, 1)
    assert r.em_by_source == {"a": 0.75, "b": 0.0}
    assert r.macro_em == pytest.approx(0.375)
    assert r.average_at_n == pytest.approx(0.6)


def test_sources_absent_gives_no_macro_em_and_custom_key_works():
    trajs = [traj(0, True), traj(1, False)]
    r = summarize(trajs, 1)
    assert r.em_by_source == {} and r.macro_em is None
    trajs[0].task["family"] = "multiply"
    trajs[1].task["family"] = "stock"
    r = summarize(trajs, 1, source_key="family")
    assert r.em_by_source == {"multiply": 1.0, "stock": 0.0}


def test_format_tools_turns_reward_and_env_metrics():
    trajs = [traj(0, True, fmt=True, tool_calls=2, turns=3, tool_latency_s=1.0, search_calls=2),
             traj(0, False, fmt=False, tool_calls=0, turns=1, reward=-0.1, termination="truncated",
                  tool_latency_s=0.0, search_calls=0)]
    r = summarize(trajs, 2)
    assert r.format_rate == 0.5
    assert r.mean_tool_calls == 1.0
    assert r.mean_turns == 2.0
    assert r.mean_reward == pytest.approx(0.45)
    assert r.tool_use_rate == 0.5
    assert r.truncated_rate == 0.5
    assert r.mean_tool_latency_s == 0.5
    assert r.env_metrics["search_calls"] == 1.0
    assert r.valid_tool_call_rate == 1.0  # two well-formed calls, two attempts


def test_uneven_groups_warn(caplog):
    with caplog.at_level("WARNING"):
        r = summarize([traj(0, True), traj(0, False), traj(1, False)], 2)
    assert "other than n=2" in caplog.text
    assert r.pass_at_n == 0.5
    assert sorted(r.pass_at_k) == [1]  # the smallest group has one episode


def test_empty_and_bad_n():
    assert summarize([], 4).num_tasks == 0
    with pytest.raises(ValueError):
        summarize([], 0)


def test_pass_at_k_estimator():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_report_dict_round_trip():
    r = summarize([traj(0, True, source="a"), traj(0, False, source="a")], 2)
    d = json.loads(json.dumps(r.to_dict()))
    assert EvalReport.from_dict(d) == r


# ---------------------------------------------------------------------------------------------- table


def test_results_table_rows_and_sources():
    base = summarize([traj(0, False, source="nq", fmt=False), traj(1, True, source="popqa")], 1)
    rl = summarize([traj(0, True, source="nq"), traj(1, True, source="popqa")], 1)
    table = results_table([("base", base), ("RL", rl)])
    lines = table.splitlines()
    assert lines[0] == ("| Model | Average@1 | Pass@1 | Format | Tool calls | Turns | Macro-EM | EM nq | EM popqa |")
    assert lines[2].startswith("| base | 50.0% | 50.0% | 50.0% |")
    assert lines[2].endswith("| 50.0% | 0.0% | 100.0% |")
    assert lines[3].startswith("| RL | 100.0% | 100.0% | 100.0% |")
    assert len(lines) == 4


def test_results_table_without_sources_and_missing_source():
    a = summarize([traj(0, True)], 1)
    assert "Macro-EM" not in results_table([("a", a)])
    b = summarize([traj(0, True, source="x")], 1)
    table = results_table([("a", a), ("b", b)])
    assert table.splitlines()[2].endswith("| – | – |")  # a has neither Macro-EM nor EM x
    with pytest.raises(ValueError):
        results_table([])


# ---------------------------------------------------------------------------------------------- text-only


def test_text_only_kwargs_refused_for_env_without_the_mode():
    with pytest.raises(ValueError, match="supports_text_only.*tools_enabled"):
        ev.text_only_env_kwargs("AgentRL/ToolUse-v0")
    with pytest.raises(ValueError, match="factory"):
        ev.text_only_env_kwargs(lambda: None)


def test_text_only_kwargs_for_env_with_the_mode():
    import gymnasium as gym

    from agentrl.envs.tool_use.env import ToolUseEnv

    class NoToolsCapable(ToolUseEnv):
        supports_text_only = True

        def __init__(self, tools_enabled: bool = True, **kw):
            super().__init__(**kw)
            self.tools_enabled = tools_enabled

    gym.register(id="TestTextOnly-v0", entry_point=NoToolsCapable)
    try:
        assert ev.text_only_env_kwargs("TestTextOnly-v0", {"split": "test"}) == {"split": "test",
                                                                                 "tools_enabled": False}
    finally:
        gym.registry.pop("TestTextOnly-v0")


def test_search_env_text_only_mode_has_no_tools():
    import gymnasium as gym

    kw = ev.text_only_env_kwargs("AgentRL/Search-v0", {"split": "dev"})
    assert kw == {"split": "dev", "tools_enabled": False}
    env = gym.make("AgentRL/Search-v0", **kw)
    try:
        _, info = env.reset(seed=0)
        assert info["tools"] == []
        assert "search" not in info["messages"][0]["content"].lower()
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- evaluate


@pytest.fixture
def fake_collect(monkeypatch):
    """A stand-in ``agentrl.algos.rollout.collector.collect``: task i is answered correctly by its first i samples."""
    calls = []

    def collect(env, policy, tasks, group_size, config=None, *, env_kwargs=None, progress=False):
        calls.append({"env": env, "n": group_size, "env_kwargs": env_kwargs, "config": config})
        out = []
        for g, task in enumerate(tasks):
            for i in range(group_size):
                t = traj(g, i < g)
                t.task = task
                out.append(t)
        return out

    mod = types.ModuleType("agentrl.algos.rollout.collector")
    mod.collect = collect
    monkeypatch.setitem(sys.modules, "agentrl.algos.rollout.collector", mod)
    return calls


def test_evaluate_summarises_and_writes(fake_collect, tmp_path):
    tasks = [{"id": "a", "data_source": "s1"}, {"id": "b", "data_source": "s1"}, {"id": "c", "data_source": "s2"}]
    out = tmp_path / "res" / "base.jsonl"
    r = ev.evaluate("AgentRL/ToolUse-v0", policy=object(), tasks=tasks, n=4, out=out, progress=False)
    # task 0: 0/4, task 1: 1/4, task 2: 2/4
    assert r.average_at_n == pytest.approx(3 / 12)
    assert r.pass_at_n == pytest.approx(2 / 3)
    assert r.em_by_source == {"s1": pytest.approx(1 / 8), "s2": 0.5}
    assert r.settings["env"] == "AgentRL/ToolUse-v0" and r.settings["n"] == 4 and not r.settings["text_only"]
    assert fake_collect[0]["n"] == 4
    assert len(load_trajectories(out)) == 12
    assert load_report(out) == r
    assert (tmp_path / "res" / "base.summary.json").exists()


def test_evaluate_text_only_passes_tools_enabled_false(fake_collect, monkeypatch):
    monkeypatch.setattr(ev, "text_only_env_kwargs", lambda env, kw=None: {**(kw or {}), "tools_enabled": False})
    r = ev.evaluate("Some-v0", object(), [{"id": "a"}], n=1, env_kwargs={"x": 1}, text_only=True, progress=False)
    assert fake_collect[0]["env_kwargs"] == {"x": 1, "tools_enabled": False}
    assert r.settings["text_only"] and r.settings["env_kwargs"]["tools_enabled"] is False


def test_evaluate_text_only_refused_before_sampling(fake_collect):
    with pytest.raises(ValueError, match="text-only"):
        ev.evaluate("AgentRL/ToolUse-v0", object(), [{"id": "a"}], n=1, text_only=True, progress=False)
    assert fake_collect == []


def test_evaluate_needs_tasks(fake_collect):
    with pytest.raises(ValueError):
        ev.evaluate("AgentRL/ToolUse-v0", object(), [], n=1)


# ---------------------------------------------------------------------------------------------- real collector


def test_evaluate_tiny_model_on_tool_use(tokenizer, tmp_path):
    collector = pytest.importorskip("agentrl.algos.rollout.collector")
    from agentrl.algos.models import tiny_model
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.envs.tool_use.env import make_tasks

    tasks = make_tasks(3, split="test")
    policy = HFPolicy(tiny_model(tokenizer), tokenizer)
    config = collector.CollectorConfig(max_turns=2, max_new_tokens=12, max_total_tokens=2048, seed=0)
    out = tmp_path / "tiny.jsonl"
    report = ev.evaluate("AgentRL/ToolUse-v0", policy, tasks, n=2, config=config, out=out, progress=False,
                         source_key="family")
    saved = load_trajectories(out)
    assert len(saved) == 6 and sorted({t.group_id for t in saved}) == [0, 1, 2]
    assert [t.task["id"] for t in saved] == [t["id"] for t in tasks for _ in range(2)]
    assert report.num_tasks == 3 and report.num_samples == 6 and report.n == 2
    # the report is exactly the summary of the episodes written
    again = summarize(saved, 2, source_key="family")
    again.settings = report.settings
    assert again == report
    assert set(report.em_by_source) == {t["family"] for t in tasks}
    assert report.settings["collector"]["max_new_tokens"] == 12
    assert load_report(out) == report
