"""ToolUse-v0's generalisation axes (agentrl.envs.tool_use.axes): families, demonstrations, rules played at reset."""

import gymnasium as gym
import pytest

import agentrl.envs  # noqa: F401  (registers the envs)
from agentrl.envs.tool_use import env as tool_use
from agentrl.envs.tool_use.axes import AXES, AXIS_FAMILIES


def make(**kwargs):
    return gym.make("AgentRL/ToolUse-v0", **kwargs).unwrapped


@pytest.mark.parametrize("axis", AXES)
def test_every_family_of_every_axis_has_a_demonstration_that_scores_1(axis):
    env = make(axis=axis, items=999)
    tasks = tool_use.make_tasks(60, "test", items=999, axis=axis)
    assert {t["family"] for t in tasks} == set(AXIS_FAMILIES[axis])
    for task in tasks:
        demo = env.demo(task)
        assert demo["reward"] == 1.0 and demo["correct"], task


def test_axis_tasks_are_pure_functions_of_their_index_and_leave_the_default_mixture_alone():
    assert tool_use.make_task(7, axis="depth") == tool_use.make_task(7, axis="depth")
    assert tool_use.make_task(7) == tool_use.make_task(7, axis=None)
    assert "axis" not in tool_use.make_task(7)
    train = {t["id"] for t in tool_use.make_tasks(20, "train", axis="recombination")}
    test = {t["id"] for t in tool_use.make_tasks(20, "test", axis="recombination")}
    assert not train & test


def test_depth_chains_have_3_or_4_calls_and_the_other_axes_at_most_2():
    for axis in AXES:
        lengths = {t["chain_length"] for t in tool_use.make_tasks(80, "test", axis=axis)}
        assert lengths == ({3, 4} if axis == "depth" else {1, 2} if axis in ("rule_variants", "tool_failures")
                           else {2})


def test_recombination_uses_tool_orders_no_default_family_uses():
    default_pairs = {(a[0], b[0]) for t in tool_use.make_tasks(500, "train")
                     for a, b in zip(t["calls"], t["calls"][1:], strict=False)}
    for t in tool_use.make_tasks(40, "test", axis="recombination"):
        assert (t["calls"][0][0], t["calls"][1][0]) not in default_pairs


def test_env_samples_the_axis_and_refuses_an_unknown_axis_or_family_in_one_line():
    env = make(axis="depth")
    _, info = env.reset(seed=3)
    assert env.task["axis"] == "depth"
    with pytest.raises(ValueError, match=r"axis must be one of \['depth', 'recombination'"):
        make(axis="deep")
    with pytest.raises(ValueError, match="unknown depth axis families"):
        make(axis="depth", families=["multiply"])


def test_renamed_tools_are_offered_and_the_old_names_fail_as_an_observation():
    task = next(t for t in tool_use.make_tasks(40, "test", axis="rule_variants") if t.get("renames"))
    env = make()  # a plain env plays the task's rule: a fixed set's row pinned at reset
    _, info = env.reset(options={"task": task})
    names = {s["function"]["name"] for s in info["tools"]}
    new_names = {new for new, _ in task["renames"].values()}
    assert new_names <= names and not set(task["renames"]) & names
    old = task["calls"][0]
    obs, reward, term, trunc, info = env.step(env.parser.render_call(next(iter(task["renames"])), {"a": 1, "b": 2}))
    assert obs.startswith("Error: unknown tool") and not term and info["metrics"]["invalid_calls"] == 1
    obs, *_ = env.step(env.parser.render_call(*old))
    assert not obs.startswith("Error")
    env.reset(options={"task": tool_use.make_task(1)})  # the next task gets the plain tools back
    assert {s["function"]["name"] for s in env.tools.schemas()} == {t.name for t in tool_use.MOCK_TOOLS}


def test_an_injected_failure_needs_the_same_call_again():
    task = tool_use.make_tasks(1, "test", axis="tool_failures")[0]
    env = make()
    env.reset(options={"task": task})
    first = env.parser.render_call(*task["calls"][0])
    obs, reward, term, trunc, info = env.step(first)
    assert "temporarily unavailable" in obs and not term and reward == 0.0
    assert info["metrics"]["tool_errors"] == 1 and info["metrics"]["injected_failures"] == 1
    assert info["metrics"]["invalid_calls"] == 0
    obs, *_ = env.step(first)
    assert not obs.startswith("Error")
    # answering after the failure without retrying leaves the chain unfinished: the answer is wrong
    env.reset(options={"task": task})
    env.step(first)
    _, reward, *_ = env.step(env.parser.render_answer("0"))
    assert reward == 0.0


def test_a_bad_rename_in_a_pinned_task_is_a_clear_error():
    env = make()
    with pytest.raises(ValueError, match=r"renames\['multiply'\]: no argument\(s\) \['z'\]"):
        env.reset(options={"task": {**tool_use.make_task(1), "renames": {"multiply": ["times", {"z": "x"}]}}})
