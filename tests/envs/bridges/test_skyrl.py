"""The SkyRL-gym bridge (envs/bridges/skyrl.py): every registered env played through ``skyrl_gym.make`` (the call
SkyRL's generator makes for a dataset row) gives what ``gymnasium.make`` gives, reply for reply."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import skyrl_gym
from gymnasium.envs.registration import load_env_creator
from omegaconf import DictConfig
from skyrl_gym.metrics import aggregate_for_environment

import agentrl.envs
from agentrl.envs import ENVS, register_env
from agentrl.envs.bridges.skyrl import AgentRLSkyRLEnv, register_skyrl_envs, skyrl_rows
from agentrl.envs.code_tool import CodeToolEnv
from agentrl.envs.tool_use.env import ToolUseEnv

gym.register_envs(agentrl.envs)


#: The built-in envs a scripted episode plays offline: all but AgentRL/OpenEnv-v0, which plays a running OpenEnv
#: server (tests/envs/bridges/test_openenv.py).
SCRIPTABLE = tuple(i for i in ENVS if i != "AgentRL/OpenEnv-v0")


def env_ids() -> list:
    """Every built-in id; those whose env runs code need bubblewrap."""
    return [pytest.param(i, marks=pytest.mark.needs_bwrap) if issubclass(load_env_creator(ENVS[i][0]), CodeToolEnv)
            else i for i in SCRIPTABLE]


def play_gym(env_id: str, task: dict, actions: list[str]) -> list[tuple]:
    """``(obs, reward, terminated, truncated, correct, metrics)`` of each step of ``actions`` via gymnasium."""
    env = gym.make(env_id)
    try:
        _, info = env.reset(options={"task": task})
        steps = []
        for a in actions:
            obs, r, term, trunc, info = env.step(a)
            steps.append((obs, r, term, trunc, info.get("correct"), _counters(info["metrics"])))
            if term or trunc:
                break
        return steps
    finally:
        env.close()


def _counters(metrics: dict) -> dict:
    """The metrics without wall-clock latency (it differs between two runs of the same episode)."""
    return {k: v for k, v in metrics.items() if not k.endswith("latency_s")}


def play_skyrl(env_id: str, row: dict, actions: list[str]) -> tuple[list[tuple], list[dict], AgentRLSkyRLEnv]:
    env = skyrl_gym.make(env_id, env_config=DictConfig({}), extras=row)
    chat, meta = env.init(row["prompt"])
    steps, outputs = [], []
    for a in actions:
        out = env.step(a)
        md = out["metadata"]
        steps.append((md["obs"], out["reward"], md["terminated"], md["truncated"], md.get("correct"),
                      _counters(md["metrics"])))
        outputs.append(out)
        if out["done"]:
            break
    env.close()
    return steps, [chat, meta, *outputs], env


@pytest.fixture(scope="module", autouse=True)
def registered():
    return register_skyrl_envs()


@pytest.fixture
def user_ids():
    """Ids a test adds with ``register_env`` (and maybe to ``skyrl_gym``), removed from both registries after."""
    added: list[str] = []
    yield added
    for env_id in added:
        gym.registry.pop(env_id, None)
        agentrl.envs._ADDED.pop(env_id, None)
        skyrl_gym.registry.pop(env_id, None)


def test_register_skyrl_envs_registers_every_builtin_id_under_its_gymnasium_id(registered):
    assert set(ENVS) <= set(registered)
    for env_id in ENVS:
        assert skyrl_gym.spec(env_id).kwargs == {"env_id": env_id}
    assert register_skyrl_envs() == registered  # a second call is harmless


@pytest.mark.parametrize("env_id", env_ids())
def test_a_scripted_episode_gives_the_same_rewards_done_and_correct_as_gymnasium(env_id):
    base = gym.make(env_id).unwrapped
    # the first test task with a known solution (TauBench-v0 has none for a task that wants facts told to a user)
    task, actions = next((t, a) for t in base.test_tasks(8) if (a := base.demo_actions(t)))
    tools = base.reset(options={"task": task})[1]["tools"]  # the task's own tools where its row brings them
    base.close()
    [row] = skyrl_rows(env_id, [task])
    assert json.loads(row["task"]) == json.loads(json.dumps(task))  # the row pins the task, as JSON text

    want = play_gym(env_id, task, actions)
    got, (chat, meta, *outs), env = play_skyrl(env_id, row, actions)
    assert got == want
    assert want[-1][1] == 1.0 and want[-1][4] is True  # the demo solves the task: the comparison has teeth
    assert outs[-1]["done"] and not any(o["done"] for o in outs[:-1])

    # the prompt is the env's own, tools and task id survive, tool results come back as tool messages
    assert [m["role"] for m in chat] == ["system", "user"] and chat == row["prompt"]
    assert meta["tools"] == tools and meta["task_id"] == str(task["id"]) and meta["tools"]
    for out in outs[:-1]:
        assert out["observations"] and all(m["role"] == "tool" and m["tool_call_id"] for m in out["observations"])
        assert out["metadata"]["tools"] == tools
    assert outs[-1]["observations"] == []
    assert outs[-1]["metadata"]["termination"] == "answered"
    metrics = env.get_metrics()
    # HumanEval-v0's demonstration answers at once; the others call a tool first
    assert metrics["correct"] == 1.0 and metrics["format_ok"] == 1.0 and metrics["tool_calls"] >= len(outs) - 1
    assert aggregate_for_environment(env_id, [metrics, {**metrics, "correct": 0.0}])["correct"] == 0.5


@pytest.mark.parametrize("env_id", env_ids())
@pytest.mark.parametrize("reply", ["", "<tool_call>\n{not json\n</tool_call>", "\x00" * 3 + "<answer>"])
def test_an_invalid_reply_ends_the_episode_as_it_does_in_gymnasium(env_id, reply):
    task = gym.make(env_id).unwrapped.test_tasks(1)[0]
    [row] = skyrl_rows(env_id, [task])
    want = play_gym(env_id, task, [reply])
    got, (_, _, out), _ = play_skyrl(env_id, row, [reply])
    assert got == want
    assert out["done"] and out["reward"] == want[0][1]
    assert out["metadata"]["termination"] in ("invalid", "answered")


def test_a_bad_tool_call_is_an_observation_and_the_episode_goes_on():
    task = ToolUseEnv().test_tasks(1)[0]
    [row] = skyrl_rows("AgentRL/ToolUse-v0", [task])
    call = '<tool_call>\n{"name": "no_such_tool", "arguments": {}}\n</tool_call>'
    got, (_, _, out), _ = play_skyrl("AgentRL/ToolUse-v0", row, [call])
    assert got == play_gym("AgentRL/ToolUse-v0", task, [call])
    assert not out["done"] and out["reward"] == 0.0
    [obs] = out["observations"]
    assert obs["role"] == "tool" and obs["content"].startswith("Error")
    assert out["metadata"]["metrics"]["invalid_calls"] == 1


def test_env_config_holds_the_make_kwargs_and_a_budget_ends_the_episode_as_in_gymnasium():
    task = ToolUseEnv().test_tasks(1)[0]
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    env = skyrl_gym.make("AgentRL/ToolUse-v0", env_config=DictConfig({"max_turns": 2, "max_tool_calls": 9}),
                         extras={"task": task})
    env.init([])
    outs = [env.step(call), env.step(call)]
    assert [o["done"] for o in outs] == [False, True]
    assert outs[1]["metadata"]["truncated"] and outs[1]["metadata"]["termination"] == "budget"
    ref = gym.make("AgentRL/ToolUse-v0", max_turns=2, max_tool_calls=9)
    ref.reset(options={"task": task})
    assert [ref.step(call)[1] for _ in range(2)] == [o["reward"] for o in outs]


def test_an_unpinned_row_draws_a_seeded_task():
    a = skyrl_gym.make("AgentRL/ToolUse-v0", env_config={}, extras={"extra_info": {"seed": 3}})
    b = skyrl_gym.make("AgentRL/ToolUse-v0", env_config={}, extras={"seed": 3})
    assert a.init([])[1]["task"] == b.init([])[1]["task"]


@pytest.mark.parametrize("env_id", ["AgentRL/BFCL-v0", "AgentRL/ToolUse-v0"])
def test_the_hosted_envs_declared_capabilities_travel_through_the_bridge(env_id):
    # issue 60 (N3): one declaration (agentrl.envs.capabilities.CAPABILITIES) that every proxy forwards
    from agentrl.envs.capabilities import capabilities

    env = skyrl_gym.make(env_id, env_config={}, extras={"seed": 0})
    local = gym.make(env_id)
    try:
        assert env.init([])[1]["capabilities"] == capabilities(env) == capabilities(local)
        assert capabilities(env)["grades_cut_replies"] is (env_id == "AgentRL/BFCL-v0")
    finally:
        env.close()
        local.close()


def test_a_user_env_added_with_register_env_is_registered_too(user_ids):
    user_ids.append("Test/SkyRLToolUse-v0")
    register_env("Test/SkyRLToolUse-v0", ToolUseEnv, "a copy of ToolUse for this test")
    assert "Test/SkyRLToolUse-v0" in register_skyrl_envs()
    task = ToolUseEnv().test_tasks(1)[0]
    env = skyrl_gym.make("Test/SkyRLToolUse-v0", env_config={}, extras={"task": task})
    env.init([])
    out = None
    for a in ToolUseEnv().demo_actions(task):
        out = env.step(a)
    assert out["done"] and out["reward"] == 1.0


def test_bad_rows_and_conflicting_names_get_clear_errors(user_ids):
    with pytest.raises(ValueError, match="skyrl_rows"):
        skyrl_gym.make("AgentRL/ToolUse-v0", env_config={}, extras={"task": "{not json"})
    with pytest.raises(gym.error.Error):
        register_skyrl_envs(["Nope/Missing-v0"])
    user_ids.append("Test/Taken-v0")
    skyrl_gym.register(id="Test/Taken-v0", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    register_env("Test/Taken-v0", ToolUseEnv)
    with pytest.raises(ValueError, match="already registers another env"):
        register_skyrl_envs(["Test/Taken-v0"])
