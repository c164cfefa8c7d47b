"""AgentRL/Coding-v0: bundled tasks, hidden-test rewards, loaders, protocol."""

from __future__ import annotations

import json
import math
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentrl.envs
from agentrl.envs import sandbox as sandbox_mod
from agentrl.envs.coding import CodingEnv, extract_program, load_coding_tasks, outputs_match
from agentrl.envs.datasets import DatasetError
from agentrl.envs.sandbox import Sandbox

gym.register_envs(agentrl.envs)

needs_bwrap = pytest.mark.skipif(not sandbox_mod.bwrap_available(), reason="needs bubblewrap")

ECHO_SUM = [{"id": "sum", "prompt": "Print the sum of the two integers on the input line.",
             "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"},
                       {"input": "-1 1\n", "output": "0\n"}, {"input": "100 23\n", "output": "123\n"}]}]


def call(code: str) -> str:
    return f'<tool_call>\n{json.dumps({"name": "code_interpreter", "arguments": {"code": code}})}\n</tool_call>'


def answer(program: str) -> str:
    return f"Here is my program.\n<answer>\n```python\n{program}\n```\n</answer>"


@pytest.fixture(scope="module")
def sb():
    with Sandbox(max_concurrency=2, timeout_s=5) as s:
        yield s


def test_bundled_tasks_are_well_formed():
    tasks = load_coding_tasks()
    assert len(tasks) >= 30
    assert len({t["id"] for t in tasks}) == len(tasks)
    for t in tasks:
        assert len(t["tests"]) >= 4 and t["solution"] and "Example input" in t["prompt"]
    train, test = CodingEnv(split="train").tasks, CodingEnv(split="test").tasks
    assert train and test and not {t["id"] for t in train} & {t["id"] for t in test}
    assert len(train) + len(test) == len(tasks)


@needs_bwrap
def test_every_bundled_demo_reaches_max_reward(sb):
    env = CodingEnv(sandbox=sb)
    for task in env.tasks:
        demo = env.demo(task)
        assert demo["reward"] == 1.0 and demo["correct"], (task["id"], demo["messages"][-2]["content"])
        assert demo["messages"][-2]["content"] == task["tests"][0]["output"]  # the trial run's output


@needs_bwrap
def test_reward_is_fraction_of_hidden_tests(sb):
    env = CodingEnv(dataset=ECHO_SUM, sandbox=sb)
    env.reset(seed=0)
    _, r, term, _, info = env.step(answer("a, b = map(int, input().split())\nprint(a + b)"))
    assert (r, term, info["correct"], info["metrics"]["tests_passed"]) == (1.0, True, True, 4)
    env.reset(seed=0)
    # Wrong only when the first number is large: 3 of 4 tests.
    _, r, _, _, info = env.step(answer("a, b = map(int, input().split())\nprint(a + b if a < 50 else 0)"))
    assert (r, info["correct"], info["metrics"]["tests_passed"]) == (0.75, False, 3)
    env.reset(seed=0)
    _, r, _, _, info = env.step(answer("print(3)"))
    assert (r, info["metrics"]["tests_passed"]) == (0.25, 1)
    env.reset(seed=0)
    _, r, _, _, info = env.step(answer("raise SystemExit(1)"))
    assert r == 0.0 and not info["correct"]


@needs_bwrap
def test_exiting_early_or_printing_junk_does_not_pass(sb):
    env = CodingEnv(dataset=ECHO_SUM, sandbox=sb)
    env.reset(seed=0)
    _, r, *_ = env.step(answer("import os\nos._exit(0)"))
    assert r == 0.0
    env.reset(seed=0)
    _, r, *_ = env.step(answer("import os\nprint(os.listdir('/tmp'), open('/proc/self/cmdline').read())"))
    assert r == 0.0


@needs_bwrap
def test_all_mode_and_timeouts(sb):
    env = CodingEnv(dataset=ECHO_SUM, sandbox=sb, reward_mode="all", test_timeout_s=1)
    env.reset(seed=0)
    _, r, *_ = env.step(answer("print(3)"))
    assert r == 0.0
    env.reset(seed=0)
    _, r, *_ = env.step(answer("while True:\n    pass"))
    assert r == 0.0
    env.reset(seed=0)
    _, r, _, _, info = env.step(answer("print(sum(map(int, input().split())))"))
    assert r == 1.0 and info["correct"]


@needs_bwrap
def test_tool_runs_code_and_counts(sb):
    env = CodingEnv(dataset=ECHO_SUM, sandbox=sb)
    env.reset(seed=0)
    obs, r, term, _, info = env.step(call("print(sum([1, 2]))"))
    assert (obs, r, term) == ("3\n", 0.0, False)
    obs, *_ , info = env.step(call("input()"))
    assert "EOFError" in obs
    assert (info["metrics"]["code_calls"], info["metrics"]["exec_ok"], info["metrics"]["exec_error"]) == (2, 1, 1)


def test_invalid_reply_and_helpers():
    env = CodingEnv(dataset=ECHO_SUM)
    env.reset(seed=0)
    _, r, term, _, info = env.step("I would write a loop.")
    assert (r, term, info["termination"]) == (0.0, True, "invalid")
    assert extract_program("```python\nprint(1)\n```") == "print(1)\n"
    assert extract_program("  print(2)  ") == "print(2)"
    assert outputs_match("1 2  \n3\n\n", "1 2\n3") and not outputs_match("1\n2", "1 2")
    with pytest.raises(ValueError, match="reward_mode"):
        CodingEnv(reward_mode="partial")


def test_loader_names_file_and_line(tmp_path):
    good = {"prompt": "p", "tests": [{"input": "", "output": "x"}]}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({"prompt": "p", "tests": [{"input": 1}]}) + "\n")
    with pytest.raises(DatasetError, match=r"tasks\.jsonl:2: tests\[0\]"):
        load_coding_tasks(path)
    path.write_text(json.dumps(good) + "\n\n" + json.dumps({"prompt": "p"}) + "\n")
    with pytest.raises(DatasetError, match=r"tasks\.jsonl:3: missing key"):
        load_coding_tasks(path)
    path.write_text(json.dumps(good) + "\n")
    env = CodingEnv(dataset=path)
    obs, info = env.reset(seed=1)
    assert obs == "p" and info["task_id"] == "0"


def test_check_env_without_warnings(sb):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("AgentRL/Coding-v0", sandbox=sb)
        check_env(env.unwrapped)
        env.reset(seed=0)
        env.step("no answer here")
        env.close()


_fuzz_env: CodingEnv | None = None
_pieces = st.sampled_from([
    "<tool_call>", "</tool_call>", "<answer>", "</answer>", "<think>", "</think>", "```python\n", "```", "\n", " ",
    "print(3)", "input()", "import sys", '"code_interpreter"', '"name"', '"arguments"', "{", "}",
    call("print(1)"), answer("print(3)"), answer("print(sum(map(int, input().split())))"),
])
_text = st.one_of(st.text(max_size=200), st.lists(st.one_of(_pieces, st.text(max_size=6)), max_size=20).map("".join))


@needs_bwrap
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(actions=st.lists(_text, min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_fuzz_step_never_raises(sb, actions, seed):
    global _fuzz_env
    if _fuzz_env is None:  # one cheap task (1 hidden test) keeps a thousand examples fast
        _fuzz_env = CodingEnv(dataset=[{"prompt": "echo", "tests": [{"input": "1 2\n", "output": "3\n"}]}],
                              sandbox=sb, test_timeout_s=2, code_timeout_s=2)
    env = _fuzz_env
    env.reset(seed=seed)
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        assert isinstance(obs, str) and isinstance(r, float) and math.isfinite(r) and 0.0 <= r <= 1.0
        assert info["parsed"]["kind"] in ("tool_call", "answer", "invalid")
        if term or trunc:
            assert info["termination"] in ("answered", "invalid", "budget")
            break
