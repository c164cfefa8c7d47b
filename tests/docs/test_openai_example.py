"""docs/examples/openai_policy.py against a local OpenAI-compatible chat server that replays an env's demo actions."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import pytest
from chat_server import ScriptedChatServer
from helpers import ROOT

import agentrl.envs  # noqa: F401

EXAMPLE = ROOT / "docs" / "examples" / "openai_policy.py"


def load_example():
    spec = importlib.util.spec_from_file_location("openai_policy_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", [0, 3])
def test_openai_example_solves_a_task_with_scripted_replies(seed):
    env = gym.make("AgentRL/ToolUse-v0")
    env.reset(seed=seed)  # the example resets with the same seed, so it meets the same task
    task = env.unwrapped.task
    actions = env.unwrapped.demo_actions(task)
    env.close()
    assert len(actions) >= 2  # at least one tool call before the answer

    server = ScriptedChatServer(actions)
    try:
        reward, info = load_example().play("AgentRL/ToolUse-v0", server.url, "scripted", seed=seed, api_key="k")
    finally:
        server.close()
    assert reward == 1.0 and info["correct"] and info["termination"] == "answered"
    assert len(server.requests) == len(actions)
    first, last = server.requests[0], server.requests[-1]
    assert first["model"] == "scripted"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert task["query"] in first["messages"][1]["content"]
    # tool results went back as user turns, plain {role, content} messages only
    assert {m["role"] for m in last["messages"]} <= {"system", "user", "assistant"}
    assert all(set(m) == {"role", "content"} for m in last["messages"])
    assert any(m["content"].startswith("Tool result:") for m in last["messages"])
    assert server.headers[0].get("Authorization") == "Bearer k"


def test_openai_example_wrong_answer_gets_no_reward():
    env = gym.make("AgentRL/ToolUse-v0")
    env.reset(seed=1)
    actions = env.unwrapped.demo_actions(env.unwrapped.task)
    env.close()
    server = ScriptedChatServer(actions[:-1] + ["Answer: not a number"])
    try:
        reward, info = load_example().play("AgentRL/ToolUse-v0", server.url, "scripted", seed=1)
    finally:
        server.close()
    assert reward == 0.0 and not info["correct"]
    assert "Authorization" not in server.headers[0]
