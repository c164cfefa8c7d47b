"""AgentRL/Coding-v0: bundled tasks, hidden-test rewards, loaders, protocol."""

from __future__ import annotations

import contextlib
import io
import json

import gymnasium as gym
import numpy as np
import pytest

import agentrl.envs
from agentrl.envs.coding.env import CodingEnv, extract_program, load_coding_tasks, outputs_match
from agentrl.envs.coding.stress import GENERATORS, stress_test
from agentrl.envs.datasets import DatasetError

gym.register_envs(agentrl.envs)

ECHO_SUM = [{"id": "sum", "prompt": "Print the sum of the two integers on the input line.",
             "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"},
                       {"input": "-1 1\n", "output": "0\n"}, {"input": "100 23\n", "output": "123\n"}]}]


def call(code: str) -> str:
    return f'<tool_call>\n{json.dumps({"name": "code_interpreter", "arguments": {"code": code}})}\n</tool_call>'


def answer(program: str) -> str:
    return f"Here is my program.\n<answer>\n```python\n{program}\n```\n</answer>"


def test_bundled_tasks_are_well_formed():
    tasks = load_coding_tasks()
    assert len(tasks) >= 30
    assert len({t["id"] for t in tasks}) == len(tasks)
    for t in tasks:
        assert len(t["tests"]) >= 4 and t["solution"] and "Example input" in t["prompt"]
    train, test = CodingEnv(split="train").tasks, CodingEnv(split="test").tasks
    assert train and test and not {t["id"] for t in train} & {t["id"] for t in test}
    assert len(train) + len(test) == len(tasks)


@pytest.mark.needs_bwrap
def test_every_bundled_demo_reaches_max_reward(sb):
    env = CodingEnv(sandbox=sb)
    for task in env.tasks:
        demo = env.demo(task)
        assert demo["reward"] == 1.0 and demo["correct"], (task["id"], demo["messages"][-2]["content"])
        assert demo["messages"][-2]["content"] == task["tests"][0]["output"]  # the trial run's output


QUADRATIC_INVERSIONS = ("n = int(input())\na = list(map(int, input().split()))\n"
                        "print(sum(1 for i in range(n) for j in range(i + 1, n) if a[i] > a[j]))")
MERGE_SORT_INVERSIONS = """import sys
def count(a):
    if len(a) < 2:
        return a, 0
    left, x = count(a[:len(a) // 2])
    right, y = count(a[len(a) // 2:])
    merged, inv, i, j = [], x + y, 0, 0
    while i < len(left) and j < len(right):
        if right[j] < left[i]:
            merged.append(right[j]); inv += len(left) - i; j += 1
        else:
            merged.append(left[i]); i += 1
    return merged + left[i:] + right[j:], inv
data = sys.stdin.read().split()
print(count(list(map(int, data[1:1 + int(data[0])])))[1])"""


@pytest.mark.needs_bwrap
def test_stress_tests_fail_a_quadratic_inversion_count_and_pass_n_log_n(sb):
    env = CodingEnv(sandbox=sb)
    task = next(t for t in env.tasks if t["id"] == "count-inversions")
    kinds = [t["kind"] for t in task["tests"]]
    stress = [t for t in task["tests"] if t["kind"] == "stress"]
    assert kinds.count("basic") == 6 and len(stress) == 1 and stress[0]["time_limit_s"] == 4.0
    assert stress[0]["input"].startswith("50000\n") and "n up to 50000" in task["prompt"]
    env.reset(options={"task": task})
    _, r, _, _, info = env.step(answer(QUADRATIC_INVERSIONS))
    m = info["metrics"]
    assert (m["tests_passed_basic"], m["tests_total_basic"], m["tests_passed_stress"], m["tests_total_stress"]) \
        == (6, 6, 0, 1)  # right on every small input, stopped by the time limit on the big one
    assert r == pytest.approx(6 / 7) and not info["correct"]
    env.reset(options={"task": task})
    _, r, _, _, info = env.step(answer(MERGE_SORT_INVERSIONS))
    m = info["metrics"]
    assert (m["tests_passed"], m["tests_passed_basic"], m["tests_passed_stress"]) == (7, 6, 1)
    assert r == 1.0 and info["correct"]


def test_stress_inputs_are_generated_deterministically_and_checked(tmp_path):
    spec = {"generator": "count-inversions", "seed": 3, "n": 300, "time_limit_s": 2}
    a, b = stress_test(spec), stress_test(dict(spec))
    assert a == b and a["kind"] == "stress" and a["time_limit_s"] == 2.0
    values = list(map(int, a["input"].split()[1:]))
    assert len(values) == 300 and int(a["output"]) == sum(
        1 for i in range(300) for j in range(i + 1, 300) if values[i] > values[j])  # the solver is right
    assert stress_test({**spec, "seed": 4})["input"] != a["input"]
    for name in GENERATORS:  # every generator's expected output is the bundled reference solution's
        task = next(t for t in load_coding_tasks() if t["id"] == name)
        small = stress_test({"generator": name, "seed": 0, "n": 40, "time_limit_s": 1})
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(task["solution"], {"input": io.StringIO(small["input"]).readline})
        assert outputs_match(out.getvalue(), small["output"]), name
    path = tmp_path / "tasks.jsonl"
    good = {"prompt": "p", "tests": [{"input": "", "output": "x"}]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "stress": [{**spec, "generator": "sort"}]}) + "\n")
    with pytest.raises(DatasetError, match=r"tasks\.jsonl:2: stress\[0\]: unknown stress generator 'sort'"):
        load_coding_tasks(path)
    path.write_text(json.dumps({**good, "tests": [{"input": "", "output": "x", "kind": "huge"}]}) + "\n")
    with pytest.raises(DatasetError, match=r"tasks\.jsonl:1: tests\[0\]\[\"kind\"\]"):
        load_coding_tasks(path)


@pytest.mark.needs_bwrap
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


@pytest.mark.needs_bwrap
def test_exiting_early_or_printing_junk_does_not_pass(sb):
    env = CodingEnv(dataset=ECHO_SUM, sandbox=sb)
    env.reset(seed=0)
    _, r, *_ = env.step(answer("import os\nos._exit(0)"))
    assert r == 0.0
    env.reset(seed=0)
    _, r, *_ = env.step(answer("import os\nprint(os.listdir('/tmp'), open('/proc/self/cmdline').read())"))
    assert r == 0.0


@pytest.mark.needs_bwrap
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


@pytest.mark.needs_bwrap
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


def _old_heldout(env_kwargs, n, seed):
    """What algos' TaskSource drew for test tasks: the env made with split="test", task k from
    default_rng([seed + 10_007, k])."""
    env = gym.make("AgentRL/Coding-v0", **{**env_kwargs, "split": "test"}).unwrapped
    return [env.sample_task(np.random.default_rng([seed + 10_007, k])) for k in range(n)]


@pytest.mark.parametrize("kwargs", [{}, {"split": "all"}, {"split": "train"}, {"dataset": ECHO_SUM}])
def test_test_tasks_are_what_the_pipeline_used_to_take(kwargs):
    env = gym.make("AgentRL/Coding-v0", **kwargs).unwrapped
    for seed in (0, 3):
        assert env.test_tasks(8, seed=seed + 10_007) == _old_heldout(kwargs, 8, seed)


# the right output for ECHO_SUM's first test, then a way out: only a clean exit with the right output passes
HOSTILE_PROGRAMS = {
    "sys.exit(0) before any output": "import sys\nsys.exit(0)",
    "os._exit(0) before any output": "import os\nos._exit(0)",
    "raises after the right output": "a, b = map(int, input().split())\nprint(a + b, flush=True)\nraise ValueError",
    "exits non-zero after the right output": "import sys\nprint(sum(map(int, input().split())), flush=True)\n"
                                             "sys.exit(3)",
    "prints a verdict": "print('passed')\nprint('correct: true')",
    "rebinds sys.stdout": "import sys\nclass W:\n    def write(self, s):\n        pass\n    def flush(self):\n"
                          "        pass\nsys.stdout = W()\nprint('3')",
    "looks for the expected outputs": "import os\nfound = [os.path.join(d, f) for d, _, fs in os.walk('/tmp') "
                                      "for f in fs]\nprint(found)",
    "kills its worker": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
}


@pytest.mark.needs_bwrap
@pytest.mark.parametrize("name", list(HOSTILE_PROGRAMS))
def test_a_program_cannot_forge_its_grade(sb, name):
    # issue 60: the verdict is the trainer's comparison of the program's output and exit status with expected
    # outputs that never enter the sandbox; nothing the program does to its own process passes a test it fails
    env = CodingEnv(dataset=ECHO_SUM, sandbox=sb)
    env.reset(seed=0)
    _, r, term, _, info = env.step(answer(HOSTILE_PROGRAMS[name]))
    assert term and r == 0.0 and info["metrics"]["tests_passed"] == 0 and not info["correct"], name
