"""ToolUse-v0's difficulty dial (envs/tool_use/dial.py): decoy tools, a per-call failure rate, the difficulty of a
task in ``info``, and every env's declared knobs (``agentrl-env list --knobs``)."""

from __future__ import annotations

import inspect
import math

import gymnasium as gym
import pytest
from gymnasium.envs.registration import load_env_creator

import agentrl.envs
from agentrl.envs import ENVS, cli
from agentrl.envs.checker import check_text_env
from agentrl.envs.tool_use.axes import FAILURE_TEXT
from agentrl.envs.tool_use.dial import DECOYS, KNOBS, difficulty
from agentrl.envs.tool_use.env import FAMILIES, MOCK_TOOLS, ToolUseEnv, make_task, make_tasks

gym.register_envs(agentrl.envs)

MOCK_NAMES = [t.name for t in MOCK_TOOLS]
DECOY_NAMES = [d.name for _, d in DECOYS]


def call(env: ToolUseEnv, name: str, **arguments):
    return env.step(env.parser.render_call(name, arguments))


# ---------------------------------------------------------------------------------------------- decoys

def test_decoys_are_in_the_schemas_beside_their_neighbours_and_documented():
    env = ToolUseEnv(distractors=3)
    _, info = env.reset(seed=0)
    names = [s["function"]["name"] if "function" in s else s["name"] for s in info["tools"]]
    assert names == ["multiply", "add", "subtract", "power", "stock", "price", "convert_units", "days_between",
                     "weeks_between"]
    assert "subtract" in info["messages"][0]["content"]  # described to the model too
    everything = ToolUseEnv(distractors=len(DECOYS))
    assert sorted(everything.tools.names) == sorted(MOCK_NAMES + DECOY_NAMES)
    for _, decoy in DECOYS:  # typed and documented like the mock tools
        props = decoy.parameters["properties"]
        assert decoy.description and props and all(p.get("description") and p.get("type") for p in props.values())


def test_no_decoy_by_default_and_make_task_is_unchanged():
    assert ToolUseEnv().tools.names == MOCK_NAMES
    assert ToolUseEnv(distractors=8, failure_rate=0.5).test_tasks(40) == make_tasks(40)
    assert all("difficulty" not in make_task(i) for i in range(20))


@pytest.mark.parametrize("name, arguments, result", [
    ("subtract", {"a": 10, "b": 3}, "7"), ("divide", {"a": 10, "b": 4}, "2.5"), ("price", {"item_id": "t1"}, "62"),
    ("weeks_between", {"start": "2024-01-01", "end": "2024-01-15"}, "2"),
    ("convert_temperature", {"value": 100, "from_unit": "C", "to_unit": "F"}, "212"),
    ("square_root", {"value": 2.25}, "1.5"), ("reorder_level", {"item_id": "t2"}, "31"),
    ("add_days", {"start": "2024-02-28", "days": 2}, "2024-03-01")])
def test_every_decoy_runs(name, arguments, result):
    env = ToolUseEnv(distractors=len(DECOYS))
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = call(env, name, **arguments)
    assert (obs, reward, terminated, truncated) == (result, 0.0, False, False)
    assert info["metrics"]["tool_errors"] == 0


def test_a_bad_decoy_call_is_an_error_observation_not_a_crash():
    env = ToolUseEnv(distractors=len(DECOYS))
    env.reset(seed=0)
    obs, _, terminated, _, info = call(env, "divide", a=1, b=0)
    assert obs.startswith("Error") and "divide by 0" in obs and not terminated
    assert info["metrics"]["tool_errors"] == 1


@pytest.mark.parametrize("axis", [None, "depth", "recombination", "rule_variants", "tool_failures"])
def test_decoys_are_never_needed_every_demo_still_scores_one(axis):
    """No decoy name collides with a mock tool or a rule variant's renamed tool, and no solution uses one."""
    env = ToolUseEnv(distractors=len(DECOYS), axis=axis)
    families = FAMILIES if axis is None else None
    for task in make_tasks(24, split="train", families=list(families) if families else None, axis=axis):
        assert not {name for name, _ in task["calls"]} & set(DECOY_NAMES)
        assert env.demo(task)["reward"] == 1.0, task


# ---------------------------------------------------------------------------------------------- failure rate

def _play(env: ToolUseEnv, seed: int, n_calls: int) -> list[str]:
    env.reset(seed=seed)
    return [call(env, "add", a=2, b=3)[0] for _ in range(n_calls)]


def test_failure_rate_one_fails_every_call_with_the_axis_text_and_metric():
    env = ToolUseEnv(failure_rate=1.0, max_tool_calls=10, max_turns=12)
    env.reset(seed=4)
    for k in range(1, 6):
        obs, reward, terminated, truncated, info = call(env, "multiply", a=6, b=7)
        assert obs == FAILURE_TEXT.format(name="multiply")
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert info["metrics"]["injected_failures"] == k and info["metrics"]["tool_errors"] == k
        assert info["metrics"]["invalid_calls"] == 0  # a transient failure is not the policy's mistake
    obs, *_ = call(env, "no_such_tool", a=1)
    assert obs.startswith("Error") and "temporarily unavailable" not in obs  # an unknown tool is still unknown


def test_failure_rate_zero_never_fails_and_adds_no_metric():
    env = ToolUseEnv(max_tool_calls=10, max_turns=12)
    assert _play(env, 0, 8) == ["5"] * 8
    assert "injected_failures" not in env.step("Answer: 5")[4]["metrics"]


def test_failures_replay_exactly_under_the_reset_seed():
    a = ToolUseEnv(failure_rate=0.5, max_tool_calls=12, max_turns=14)
    b = ToolUseEnv(failure_rate=0.5, max_tool_calls=12, max_turns=14)
    patterns = {}
    for seed in range(12):
        first = _play(a, seed, 12)
        assert _play(b, seed, 12) == first == _play(a, seed, 12)  # another env, and the same env again
        patterns[seed] = tuple(o == "5" for o in first)
    assert len(set(patterns.values())) > 6  # the seeds draw different failures


def test_failure_rate_matches_its_value_over_many_seeded_calls():
    env = ToolUseEnv(failure_rate=0.3, max_tool_calls=10, max_turns=12)
    outcomes = [o != "5" for seed in range(300) for o in _play(env, seed, 10)]
    rate = sum(outcomes) / len(outcomes)  # 3000 calls: one standard deviation is 0.008
    assert abs(rate - 0.3) < 0.04, rate


def test_the_calls_of_an_episode_do_not_change_later_draws():
    quiet, busy = ToolUseEnv(failure_rate=0.5), ToolUseEnv(failure_rate=0.5)
    quiet.reset(seed=9)
    _play(busy, 9, 3)
    assert [quiet.reset()[1]["task_id"] for _ in range(8)] == [busy.reset()[1]["task_id"] for _ in range(8)]


def test_the_dial_leaves_the_tasks_a_seed_draws_unchanged():
    plain, dialled = ToolUseEnv(), ToolUseEnv(distractors=5, failure_rate=0.4)
    for seed in range(30):
        assert plain.reset(seed=seed)[1]["task_id"] == dialled.reset(seed=seed)[1]["task_id"]


def test_a_scripted_failure_still_comes_first_and_draws_nothing():
    task = make_task(0, axis="tool_failures")
    env = ToolUseEnv(failure_rate=1.0, max_tool_calls=6, max_turns=8)
    env.reset(options={"task": task})
    name, args = task["calls"][0]
    obs, *_, info = env.step(env.parser.render_call(name, args))
    assert obs == FAILURE_TEXT.format(name=name) and info["metrics"]["injected_failures"] == 1
    assert env._failures[name] == 0  # the script's failure was spent, then the dial fails the retry too
    obs, *_, info = env.step(env.parser.render_call(name, args))
    assert obs == FAILURE_TEXT.format(name=name) and info["metrics"]["injected_failures"] == 2


def test_tasks_with_their_own_tools_are_left_alone():
    env = ToolUseEnv(families=["procedural_single", "procedural_parallel"], distractors=len(DECOYS),
                     failure_rate=1.0)
    for task in make_tasks(12, split="train", families=["procedural_single", "procedural_parallel"]):
        demo = env.demo(task)
        assert demo["reward"] == 1.0
        assert not {t["function"]["name"] for t in demo["tools"]} & set(DECOY_NAMES)
        assert difficulty(task, distractors=8, failure_rate=1.0)["distractors"] == 0


# ---------------------------------------------------------------------------------------------- difficulty

def test_difficulty_of_each_kind_of_task_and_in_the_step_info():
    plain = make_task(0, families=["stock_total"])
    assert difficulty(plain) == {"calls": 3, "renamed_tools": 0, "injected_failures": 0, "distractors": 0,
                                 "failure_rate": 0.0}
    retry = make_task(1, axis="tool_failures")
    assert difficulty(retry)["injected_failures"] == 1
    assert difficulty(retry)["calls"] == len(retry["calls"]) - 1 == retry["chain_length"]
    renamed = make_task(0, axis="rule_variants", families=["renamed_add_multiply"])
    assert difficulty(renamed)["renamed_tools"] == 2
    assert difficulty({"id": "x", "query": "q", "answer": "a"})["calls"] is None
    env = ToolUseEnv(distractors=2, failure_rate=0.25)
    env.reset(options={"task": plain})
    info = env.step("Answer: 1")[4]
    assert info["difficulty"] == difficulty(plain, distractors=2, failure_rate=0.25)
    assert info["difficulty"]["distractors"] == 2 and info["difficulty"]["failure_rate"] == 0.25


# ---------------------------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("kwargs, key", [
    ({"distractors": len(DECOYS) + 1}, "distractors"), ({"distractors": -1}, "distractors"),
    ({"distractors": 1.5}, "distractors"), ({"distractors": True}, "distractors"),
    ({"failure_rate": 1.01}, "failure_rate"), ({"failure_rate": -0.1}, "failure_rate"),
    ({"failure_rate": math.nan}, "failure_rate"), ({"failure_rate": "0.2"}, "failure_rate"),
    ({"distractors": 2, "tools": [lambda a: a], "dataset": [{"question": "q", "answer": "a"}]}, "distractors")])
def test_bad_values_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        ToolUseEnv(**kwargs)


def test_the_command_line_refuses_a_bad_value_in_one_line(capsys):
    assert cli.main(["play", "AgentRL/ToolUse-v0", "--seed", "0", "--env-kwargs", '{"failure_rate": 2}']) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "failure_rate must be a number from 0 to 1" in err


def test_the_dial_honours_the_text_env_contract():
    check_text_env("AgentRL/ToolUse-v0", env_kwargs={"distractors": 4, "failure_rate": 0.3}, episodes=150)


# ---------------------------------------------------------------------------------------------- knobs listing

def test_declared_knobs_are_keywords_the_env_takes():
    declared = {}
    for env_id, (entry, _) in ENVS.items():
        knobs = cli.env_knobs(entry)
        params = inspect.signature(load_env_creator(entry).__init__).parameters
        assert set(knobs) <= set(params), (env_id, set(knobs) - set(params))
        declared[env_id] = knobs
    assert declared["AgentRL/ToolUse-v0"] == KNOBS
    assert set(KNOBS) == {"families", "axis", "items", "distractors", "failure_rate"}
    assert set(declared["AgentRL/PythonMath-v0"]) == {"tiers", "families"}
    assert "hops" not in " ".join(declared["AgentRL/Search-v0"]) and declared["AgentRL/Search-v0"]


def test_list_knobs_prints_each_envs_knobs_under_it(capsys):
    assert cli.main(["list"]) == 0
    plain = capsys.readouterr().out
    assert "distractors" not in plain and len(plain.splitlines()) == len(ENVS)  # the plain listing is as it was
    assert cli.main(["list", "--knobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("AgentRL/ToolUse-v0"))
    end = next(i for i, line in enumerate(lines) if i > start and not line.startswith(" "))
    block = "\n".join(lines[start:end])
    assert lines[start + 1].strip() == "difficulty knobs (env_kwargs):"
    for key in KNOBS:
        assert f"      {key} " in block
    assert any(line.startswith("AgentRL/Coding-v0") for line in lines)
    assert "difficulty knobs: none declared" in "\n".join(lines)
