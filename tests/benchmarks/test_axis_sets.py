"""The generalisation-axis sets of issue 45 (benchmarks/heldout/tooluse_axis_*): rebuilt from their generators they
give the committed files byte for byte, they hold what their axis says, and every task is solvable through a plain
ToolUse-v0 (its demonstration scores 1.0), so a fixed set's rows carry everything the env needs to play them."""

from __future__ import annotations

import json

import gymnasium as gym
import harness.heldout as heldout
import harness.heldout_draw as draw
import pytest

import agentrl.envs  # noqa: F401  (registers the envs)
from agentrl.envs.tool_use.axes import AXIS_FAMILIES


@pytest.mark.parametrize("name", sorted(heldout.AXIS_SETS))
def test_axis_set_equals_its_generator_and_its_sidecar_says_how_it_was_made(name):
    spec = heldout.SPECS[name]
    assert heldout.check(spec) is None, heldout.check(spec)
    meta = json.loads(spec.meta_path.read_text())
    tasks = heldout.read(name)
    assert len(tasks) == meta["tasks"] == draw.SIZE and meta["ids"] == [t["id"] for t in tasks]
    assert len({draw.task_text(t) for t in tasks}) == draw.SIZE  # no question twice
    assert meta["fixed_before_tuning"] is True and meta["axis"] == heldout.AXIS_SETS[name]
    assert meta["env_kwargs"] == {"items": 999}  # never the axis: a run trained "on the set's kwargs" stays off it
    assert meta["generator_command"] == f"python benchmarks/heldout.py write --only {name}"
    axis = heldout.AXIS_SETS[name]
    if axis == "forgetting":
        assert set(meta["families"]) == set(draw.FORGETTING_FAMILIES) and meta["train_text_overlap_note"]
    else:
        assert set(meta["families"]) == set(AXIS_FAMILIES[axis]) and meta["train_text_overlap_total"] == 0
        assert {t["axis"] for t in tasks} == {axis}


@pytest.mark.parametrize("name", sorted(heldout.AXIS_SETS))
def test_every_task_of_an_axis_set_is_solved_by_its_demonstration_on_a_plain_env(name):
    env = gym.make("AgentRL/ToolUse-v0", items=999).unwrapped
    for task in heldout.read(name):
        demo = env.demo(task)
        assert demo["reward"] == 1.0 and demo["correct"], task["id"]


def test_depth_set_holds_3_and_4_call_chains_only():
    lengths = {t["chain_length"] for t in heldout.read("tooluse_axis_depth")}
    assert lengths == {3, 4}


def test_the_axes_experiment_is_declared_on_committed_sets_with_three_seeds_and_runnable_arms():
    from harness.experiments import AXES, COMPARE

    from agentrl.envs.tool_use import env as tool_use

    assert all(heldout.SPECS[s].path.is_file() for s in AXES.sets) and len(AXES.seeds) >= 3
    assert set(AXES.arms) <= {*COMPARE.algos, *COMPARE.options}  # compare_algorithms.py --algos
    assert not set(AXES.train_families) & set(draw.FORGETTING_FAMILIES)
    trained = tool_use.make_tasks(400, "train", families=list(AXES.cold_start["stages.sft.env_kwargs.families"]))
    assert max(len(t["calls"]) for t in trained) == 2  # the depth set's 3-4-call chains are beyond training
