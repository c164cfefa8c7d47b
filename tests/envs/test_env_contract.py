"""The text-env contract, checked for every registered id in :data:`agentrl.envs.ENVS` by the public checker
:func:`agentrl.envs.checker.check_text_env` (what a plugin author runs in CI; docs/checker.md).

Gymnasium's own pattern (``tests/envs/test_envs.py``): registering an env is enough to test it here.
Env-specific cases live in each env's own test file; the checker's own cases in test_checker.py.
"""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.envs.registration import load_env_creator

import agentrl.envs
from agentrl.envs import ENVS
from agentrl.envs.checker import check_text_env
from agentrl.envs.code_tool import CodeToolEnv
from agentrl.envs.core import Budgets

gym.register_envs(agentrl.envs)


#: Registered ids whose env plays a running server (``url=``): left out here, checked against real servers in their
#: own tests (tests/envs/bridges/test_openenv.py).
NEEDS_SERVER = ("AgentRL/OpenEnv-v0",)
LOCAL_ENVS = [i for i in ENVS if i not in NEEDS_SERVER]


def env_class(env_id: str) -> type:
    return load_env_creator(ENVS[env_id][0])


def env_ids() -> list:
    """Every registered id; ids whose env runs code are marked ``needs_bwrap``."""
    return [pytest.param(i, marks=pytest.mark.needs_bwrap) if issubclass(env_class(i), CodeToolEnv) else i
            for i in LOCAL_ENVS]


#: Optional keyword arguments that keep the fuzz episodes fast (an env without an entry uses defaults).
FUZZ_KWARGS: dict[str, dict] = {
    "AgentRL/Search-v0": {"split": "dev", "max_obs_chars": 1_000},
    "AgentRL/PythonMath-v0": {"code_timeout_s": 2},
    "AgentRL/Coding-v0": {"dataset": [{"prompt": "echo", "tests": [{"input": "1 2\n", "output": "3\n"}]}],
                          "test_timeout_s": 2, "code_timeout_s": 2},
}
#: Fuzz episodes per env (up to four replies each): deeper than the checker's default, a few seconds per env.
EPISODES = 300


@pytest.mark.parametrize("env_id", env_ids())
def test_every_env_honours_the_text_env_contract(env_id):
    """Spaces, Gymnasium's check_env without a warning, reset's shape and info keys, never-raise fuzz of
    ``step``, determinism under a seed (a fresh env from a pickled factory too), a torch-free make in a fresh
    process and the declared hooks (text-only mode, test tasks, demonstrations): one error naming the check
    that failed."""
    check_text_env(env_id, env_kwargs=FUZZ_KWARGS.get(env_id), episodes=EPISODES)


def test_importing_and_making_every_env_loads_no_torch():
    """All of them in one process, and agentrl.algos stays out too (the checker makes one env per process)."""
    code = ("import sys, gymnasium as g, agentrl.envs\n"
            f"for i in {LOCAL_ENVS!r}:\n    g.make(i).reset(seed=0)\n"
            "print(sorted(m for m in ('torch', 'agentrl.algos') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(("key", "value"), [("max_turns", 0), ("max_tool_calls", -3), ("max_obs_chars", 0),
                                            ("max_turns", 2.5), ("max_turns", True)])
def test_budgets_are_validated_when_the_env_is_made_naming_the_key(key, value):
    with pytest.raises(ValueError, match=rf"^{key} must be an integer >= \d, got {value!r}$"):
        gym.make("AgentRL/ToolUse-v0", **{key: value})
    with pytest.raises(ValueError, match=rf"^{key} must be an integer >= "):
        Budgets(**{key: value})
