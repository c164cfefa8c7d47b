"""The text-env contract, checked for every registered id in :data:`agentrl.envs.ENVS`.

Gymnasium's own pattern (``tests/envs/test_envs.py``): registering an env is enough to test it here.
Env-specific cases live in each env's own test file.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import pickle
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.envs.registration import load_env_creator
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentrl.envs
from agentrl.envs import ENVS, TextEnv
from agentrl.envs.code_tool import CodeToolEnv

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


#: Optional keyword arguments that keep a thousand fuzz episodes fast (an env without an entry uses defaults).
FUZZ_KWARGS: dict[str, dict] = {
    "AgentRL/Search-v0": {"split": "dev", "max_obs_chars": 1_000},
    "AgentRL/PythonMath-v0": {"code_timeout_s": 2},
    "AgentRL/Coding-v0": {"dataset": [{"prompt": "echo", "tests": [{"input": "1 2\n", "output": "3\n"}]}],
                          "test_timeout_s": 2, "code_timeout_s": 2},
}


def hermes(name, arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def answer_tag(program: str) -> str:
    return f"Here is my program.\n<answer>\n```python\n{program}\n```\n</answer>"


# ---------------------------------------------------------------------------------------------- the one strategy

_PIECES = st.sampled_from([
    # call syntax and its fragments
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<answer>", "</answer>", "```python\n", "```", "{", "}",
    "[", "]", ":", ",", "\n", " ", '"name"', '"arguments"', '"query"', "null", "1e999", '{"a": 1}', "\\u0000",
    # tool names of the registered envs
    '"multiply"', '"stock"', '"search"', '"code_interpreter"',
    # answers in every answer format
    "Answer:", "\\boxed{", "42", "\\frac{1}{2}", "x^2", "Zambezi",
    # whole calls and answers, valid and broken
    '{"name": "power", "arguments": {"base": 9, "exponent": 12}}',
    '{"name": "search", "arguments": {"query": "Victoria Falls"}}',
    '{"name": "code_interpreter", "arguments": {"code": 5}}',
    hermes("code_interpreter", {"code": "print(1)"}), hermes("code_interpreter", {"code": "1/0"}),
    hermes("code_interpreter", {"code": ""}), "```python\nprint(3)\n```",
    "print(3)", "input()", "import sys", answer_tag("print(3)"), answer_tag("print(sum(map(int, input().split())))"),
])
_ARG_VALUES = st.one_of(st.text(max_size=40), st.integers(-10**6, 10**6), st.floats(allow_nan=False), st.none())
_CALLS = st.builds(hermes, st.sampled_from(["search", "code_interpreter", "multiply", "stock", "power", "nope"]),
                   st.dictionaries(st.sampled_from(["query", "code", "a", "b", "item_id", "base", "exponent"]),
                                   _ARG_VALUES, max_size=3))
#: Replies: free text, soups of the pieces above, and well-formed calls with arbitrary arguments.
REPLIES = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=30).map("".join),
    _CALLS,
    st.text(max_size=80).map(lambda q: hermes("search", {"query": q})),
)

_FUZZ_ENVS: dict[str, TextEnv] = {}


@pytest.mark.parametrize("env_id", env_ids())
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(REPLIES, min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_step_never_raises(env_id, actions, seed):
    env = _FUZZ_ENVS.get(env_id)
    if env is None:
        env = _FUZZ_ENVS[env_id] = gym.make(env_id, **FUZZ_KWARGS.get(env_id, {})).unwrapped
    r_min = min(env.rewards.invalid, env.rewards.wrong, 0.0)
    env.reset(seed=seed)
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        assert isinstance(obs, str) and isinstance(r, float) and math.isfinite(r)
        assert r_min <= r <= env.rewards.correct
        assert info["parsed"]["kind"] in ("tool_call", "answer", "invalid")
        assert info["obs_role"] != "tool" or len(obs) <= env.budgets.max_obs_chars
        assert info["metrics"]["turns"] <= env.budgets.max_turns
        assert info["metrics"]["tool_calls"] <= env.budgets.max_tool_calls
        if term or trunc:
            assert info["termination"] in ("answered", "invalid", "budget")  # "error" would be an env bug
            break


# ---------------------------------------------------------------------------------------------- gymnasium


@pytest.mark.parametrize("env_id", LOCAL_ENVS)
def test_check_env_without_warnings(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make(env_id)
        check_env(env.unwrapped)
        env.reset(seed=0)
        env.step("Answer: 1")  # the passive checker on a real observation with ':' and newlines
        env.close()


@pytest.mark.parametrize("env_id", LOCAL_ENVS)
def test_reset_is_deterministic(env_id):
    a, b = gym.make(env_id).unwrapped, gym.make(env_id).unwrapped
    for seed in (0, 1, 12345):
        first = a.reset(seed=seed)
        assert a.reset(seed=seed) == first  # same instance again
        assert b.reset(seed=seed) == first  # a fresh instance


@pytest.mark.parametrize("env_id", LOCAL_ENVS)
def test_the_env_factory_pickles(env_id):
    """What ``AsyncVectorEnv`` sends to its worker processes."""
    factory = pickle.loads(pickle.dumps(functools.partial(gym.make, env_id)))
    env = factory()
    obs, info = env.reset(seed=0)
    assert obs == gym.make(env_id).reset(seed=0)[0] and info["task_id"]
    env.close()


def test_importing_and_making_every_env_loads_no_torch():
    code = ("import sys, gymnasium as g, agentrl.envs\n"
            f"for i in {LOCAL_ENVS!r}:\n    g.make(i).reset(seed=0)\n"
            "print(sorted(m for m in ('torch', 'agentrl.algos') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------------------- declared hooks


@pytest.mark.parametrize("env_id", LOCAL_ENVS)
def test_text_only_mode_is_declared_consistently(env_id):
    cls = env_class(env_id)
    assert isinstance(cls.supports_text_only, bool)
    takes_keyword = "tools_enabled" in inspect.signature(cls).parameters
    assert takes_keyword == cls.supports_text_only
    if cls.supports_text_only:
        env = gym.make(env_id, tools_enabled=False).unwrapped
        _, info = env.reset(seed=0)
        assert info["tools"] == [] and len(env.tools) == 0
        obs, r, term, trunc, info = env.step(hermes("anything", {}))
        assert obs.startswith("Error:") and not (term or trunc) and info["metrics"]["invalid_calls"] == 1


@pytest.mark.parametrize("env_id", LOCAL_ENVS)
def test_test_tasks_are_declared_consistently(env_id):
    env = gym.make(env_id).unwrapped
    try:
        tasks = env.test_tasks(3, seed=7)
    except ValueError as e:  # the default: no held-out split, and the message says what to do instead
        assert type(env).test_tasks is TextEnv.test_tasks and "--tasks-file" in str(e)
        return
    assert len(tasks) == 3 and all(isinstance(t, dict) and "id" in t for t in tasks)
    assert env.test_tasks(3, seed=7) == tasks  # a pure function of the seed
    obs, info = env.reset(options={"task": tasks[0]})
    assert info["task_id"] == str(tasks[0]["id"]) and obs
