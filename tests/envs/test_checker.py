"""agentrl.envs.checker.check_text_env: it passes a small env that honours the contract, and each way of
breaking the contract fails with one error that names its check. (Every registered env is checked in
test_env_contract.py.) This module imports no torch, so the torch-free check can make its envs in a fresh
process."""

from __future__ import annotations

import random
import sys
import textwrap

import gymnasium as gym
import pytest
from gymnasium import spaces

from agentrl.envs import register_env
from agentrl.envs.checker import EnvContractError, check_text_env
from agentrl.envs.core import TextEnv
from agentrl.envs.parsing import ActionParser
from agentrl.envs.tools import ToolSet


@pytest.fixture(autouse=True)
def registrations_undone(monkeypatch):
    """Every env a test registers (``register_env``, or ``check_text_env`` of a ``"module:Name"`` id) is gone from
    agentrl.envs' table and gymnasium's registry after it: the bridges' tests register every env listed there."""
    import agentrl.envs

    monkeypatch.setattr(agentrl.envs, "_ADDED", {})
    before = set(gym.registry)
    yield
    for env_id in set(gym.registry) - before:
        del gym.registry[env_id]


def double(x: int) -> int:
    """Twice ``x``.

    Args:
        x: a number.
    """
    return 2 * x


class Doubling(TextEnv):
    """Double a number, with a tool: a small env that honours the contract (the tests below break it)."""

    def __init__(self):
        super().__init__(tools=ToolSet([double]), parser=ActionParser())

    def sample_task(self, rng):
        x = int(rng.integers(100))
        return {"id": str(x), "query": f"What is twice {x}?", "answer": str(2 * x)}

    def score(self, answer, task):
        return (1.0, True) if answer.strip() == task["answer"] else (0.0, False)

    def demo_actions(self, task):
        x = int(task["id"])
        return [self.parser.render_call("double", {"x": x}), self.parser.render_answer(str(2 * x))]


class RaisesOnCalls(Doubling):
    def step(self, action):  # no TextEnv guard: an exception reaches the caller
        if "<tool_call>" in action:
            raise KeyError("call")
        return super().step(action)


class BuggyScore(Doubling):
    def score(self, answer, task):  # TextEnv catches it: the episode ends with termination="error"
        return 1 / 0, False


class GlobalRandom(Doubling):
    def __init__(self):
        super().__init__()
        self.offset = random.randrange(10**9)  # once per instance: each env is deterministic, no two agree

    def sample_task(self, rng):
        x = int(rng.integers(100)) + self.offset
        return {"id": str(x), "query": f"What is twice {x}?", "answer": str(2 * x)}


class NoTools(Doubling):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        del info["tools"]
        return obs, info


class Numbers(Doubling):
    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Discrete(3)


class ClaimsTextOnly(Doubling):
    supports_text_only = True  # but the constructor takes no tools_enabled


class WrongDemo(Doubling):
    def demo_actions(self, task):
        return [self.parser.render_answer("-1")]


def test_a_env_that_honours_the_contract_passes(tmp_path, monkeypatch):
    check_text_env(Doubling(), episodes=30)
    monkeypatch.syspath_prepend(str(tmp_path))  # an id whose module a fresh process imports: torch-free too
    (tmp_path / "doubling_env.py").write_text(f"from {__name__} import Doubling\n")
    check_text_env("doubling_env:Doubling", episodes=10)
    sys.modules.pop("doubling_env", None)
    gym.registry.pop("Doubling", None)


@pytest.mark.parametrize("env, message", [
    (RaisesOnCalls, r"^\[fuzz\] episode \d+ \(reset\(seed=\d+\)\): step\(.*<tool_call>.*\) raised "
                    "KeyError: 'call'$"),
    (BuggyScore, r"^\[fuzz\] .*termination 'error' \(an exception inside the env"),
    (NoTools, r"^\[reset\] reset\(seed=0\): info has no 'tools'"),
    (Numbers, r"^\[spaces\] observation_space is Discrete\(3\), not a gymnasium.spaces.Text$"),
    (ClaimsTextOnly, r"^\[hooks\] supports_text_only is True but the constructor does not take "
                     "tools_enabled$"),
    (WrongDemo, r"^\[hooks\] demo\(task '\d+'\) is not a correct solution"),
])
def test_each_broken_contract_fails_with_its_check(env, message):
    with pytest.raises(EnvContractError, match=message):
        check_text_env(env(), episodes=30)


def test_a_task_drawn_with_the_global_random_is_not_deterministic():
    register_env("Test/GlobalRandom-v0", f"{__name__}:GlobalRandom")
    with pytest.raises(EnvContractError, match=r"^\[determinism\] reset\(seed=0\) of a fresh env gave "):
        check_text_env("Test/GlobalRandom-v0", episodes=2, torch_free=False)


def test_an_env_module_that_imports_torch_fails_the_torch_free_check(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "heavy_env.py").write_text(textwrap.dedent(f"""
        import torch  # at the top: every process that makes the env pays for torch

        from {__name__} import Doubling


        class Heavy(Doubling):
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvContractError, match=r"^\[torch-free\] making heavy_env:Heavy imports torch; "):
        check_text_env("heavy_env:Heavy", episodes=2)
    sys.modules.pop("heavy_env", None)
    gym.registry.pop("Heavy", None)
