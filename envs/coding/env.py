"""``AgentRL/Coding-v0``: write a program that passes hidden tests.

The task asks for a complete Python program that reads standard input and writes standard output. The agent
may try code with ``code_interpreter(code)`` (the same sandboxed tool as ``AgentRL/PythonMath-v0``); its final
answer is the program inside ``<answer>...</answer>`` (a fenced ```` ```python ```` block inside is fine). The
program then runs once per hidden test, each run a fresh sandboxed process with the test's input on stdin,
and passes a test when it exits cleanly and its output equals the expected output (compared line by line,
trailing whitespace and trailing blank lines ignored).

Reward: the fraction of hidden tests passed (``reward_mode="fraction"``, default) or 1/0 for all-or-nothing
(``reward_mode="all"``); ``correct`` means every test passed. Invalid replies and running out of budget score
``invalid_reward`` (0 by default).

Tests are of two kinds: ``basic`` (small inputs) and ``stress`` (large inputs generated from a seed by
:mod:`agentrl.envs.coding.stress`, each with its own ``time_limit_s``), where a task implies an efficient
algorithm; ``tests_passed_basic`` / ``tests_passed_stress`` count them apart in ``info["metrics"]``.

Expected outputs never enter the sandbox, so a program cannot pass by reading them or by exiting early.

Data: 36 bundled tasks (``envs/coding/tasks.jsonl``; each with a reference ``solution``, used for
demonstrations) or your own JSONL / list of ``{"prompt", "tests": [{"input", "output"}, ...]}`` rows
(optional ``id`` and ``solution``). The bundled set is split by a fixed hash of the task id (``split="train"``
about 80 %, ``"test"`` the rest); ``split="all"`` uses every task.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.code_tool import CodeToolEnv
from agentrl.envs.coding.stress import stress_test
from agentrl.envs.core import Budgets, Rewards
from agentrl.envs.datasets import DatasetError, check_split, draw_row, hash_split, located_rows, seeded_draws
from agentrl.envs.sandbox.protocol import CodeSandbox

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n(.*?)```", re.DOTALL)


def bundled_tasks_path() -> Path:
    """Path of the bundled task file."""
    return Path(str(resources.files("agentrl.envs.coding").joinpath("tasks.jsonl")))


def load_coding_tasks(source: str | Path | Iterable[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Coding tasks as ``{"id", "prompt", "tests", "solution"?}`` rows (default: the bundled set).

    Raises:
        DatasetError: naming the file and line (or list index) of the first malformed row.
    """
    src = bundled_tasks_path() if source is None else source
    out = []
    for i, (where, row) in enumerate(located_rows(src, ("prompt", "tests"), name="coding dataset")):
        try:
            out.append(_check_task(row, i))
        except ValueError as e:
            raise DatasetError(f"{where}: {e}") from None
    return out


TEST_KINDS = ("basic", "stress")


def _check_task(row: dict[str, Any], i: int) -> dict[str, Any]:
    if not isinstance(row["prompt"], str) or not row["prompt"].strip():
        raise ValueError('"prompt" must be a non-empty string')
    tests = row["tests"]
    if not isinstance(tests, list) or not tests:
        raise ValueError('"tests" must be a non-empty list of {"input": str, "output": str}')
    checked = []
    for k, t in enumerate(tests):
        if not isinstance(t, dict) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            raise ValueError(f'tests[{k}] must be {{"input": str, "output": str}}')
        kind, limit = t.get("kind", "basic"), t.get("time_limit_s")
        if kind not in TEST_KINDS:
            raise ValueError(f'tests[{k}]["kind"] must be one of {list(TEST_KINDS)}, got {kind!r}')
        if limit is not None and (not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit <= 0):
            raise ValueError(f'tests[{k}]["time_limit_s"] must be a positive number')
        checked.append({**t, "kind": kind})
    stress = row.get("stress", [])
    if not isinstance(stress, list):
        raise ValueError('"stress" must be a list of generator specs')
    for k, spec in enumerate(stress):
        try:
            checked.append(stress_test(spec))
        except ValueError as e:
            raise ValueError(f"stress[{k}]: {e}") from None
    prompt = row["prompt"].strip()
    if stress:  # the constraints a contest statement would give
        prompt += (f"\n\nHidden tests include inputs with n up to {max(spec['n'] for spec in stress)}; each test "
                   f"must finish within {min(spec['time_limit_s'] for spec in stress):g} seconds.")
    task = {"id": str(row.get("id", i)), "prompt": prompt, "tests": checked}
    if isinstance(row.get("solution"), str):
        task["solution"] = row["solution"]
    return task


def extract_program(answer: str) -> str:
    """The program in a final answer: the last fenced block's body if there is one, else the text itself."""
    blocks = _FENCE.findall(answer)
    return blocks[-1] if blocks else answer.strip()


def outputs_match(got: str, expected: str) -> bool:
    """Line-by-line equality, ignoring trailing whitespace on each line and trailing blank lines."""
    def norm(s: str) -> list[str]:
        lines = [ln.rstrip() for ln in s.replace("\r\n", "\n").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    return norm(got) == norm(expected)


def split_of(task_id: str) -> str:
    """The fixed split of a bundled task id (``test`` for about 20 %)."""
    return hash_split(task_id, "test", algorithm="sha256")


#: What the agent is told to do (the system prompt's first paragraph).
INSTRUCTIONS = (
    "You write Python programs that solve programming tasks. You may test code with code_interpreter "
    "(one call per reply; each run starts fresh; print() what you want to see). When you are done, "
    "reply with the complete program inside <answer></answer>, optionally as a ```python fenced "
    "block. The program must read standard input and write standard output; it will be run on "
    "hidden tests."
)


class CodingEnv(CodeToolEnv):
    """Write a program that passes hidden stdin/stdout tests; see the module docstring."""

    def __init__(
        self,
        dataset: str | Path | Iterable[dict[str, Any]] | None = None,
        *,
        split: str = "all",
        reward_mode: str = "fraction",
        invalid_reward: float = 0.0,
        test_timeout_s: float = 5.0,
        max_turns: int = 8,
        max_code_calls: int = 6,
        max_obs_chars: int = 2_000,
        code_timeout_s: float = 10.0,
        call_format: str = "hermes",
        sandbox: CodeSandbox | str | None = None,
        sandbox_kwargs: dict[str, Any] | None = None,
        tools_in_prompt: bool = True,
        render_mode: str | None = None,
    ):
        """
        Args:
            dataset: your tasks (a JSONL path or a list of ``{"prompt", "tests"}`` rows); default the bundled set.
            split: for the bundled set, ``"train"``, ``"test"`` or ``"all"`` (ignored for your own dataset).
            reward_mode: ``"fraction"`` (fraction of tests passed) or ``"all"`` (1 only if every test passes).
            invalid_reward: reward of an invalid reply or of no answer before a budget ran out.
            test_timeout_s: wall-clock limit of the program on one test.
            max_turns, max_code_calls, max_obs_chars, code_timeout_s, call_format, sandbox, sandbox_kwargs: as
                in :class:`~agentrl.envs.python_math.env.PythonMathEnv`.
        """
        if reward_mode not in ("fraction", "all"):
            raise ValueError(f"reward_mode must be 'fraction' or 'all', got {reward_mode!r}")
        self.split = check_split(split, ("train", "test", "all"))
        tasks = load_coding_tasks(dataset)
        self._own_dataset = dataset is not None
        self.tasks = tasks if self._own_dataset or split == "all" else [t for t in tasks if split_of(t["id"]) == split]
        self.reward_mode = reward_mode
        self.test_timeout_s = float(test_timeout_s)
        super().__init__(
            sandbox=sandbox, sandbox_kwargs=sandbox_kwargs, code_timeout_s=code_timeout_s,
            call_format=call_format, answer="answer_tag",
            budgets=Budgets(max_turns=max_turns, max_tool_calls=max_code_calls, max_obs_chars=max_obs_chars),
            rewards=Rewards(correct=1.0, wrong=0.0, invalid=invalid_reward),
            tools_in_prompt=tools_in_prompt, render_mode=render_mode,
        )

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return dict(draw_row(self.tasks, rng))

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` tasks drawn from the bundled ``test`` split (or from your whole dataset), task ``k`` with
        ``np.random.default_rng([seed, k])``."""
        tasks = self.tasks if self._own_dataset else [t for t in load_coding_tasks() if split_of(t["id"]) == "test"]
        return [dict(t) for t in seeded_draws(tasks, n, seed)]

    def task_instructions(self, task: dict[str, Any]) -> str:
        return INSTRUCTIONS

    def user_prompt(self, task: dict[str, Any]) -> str:
        return str(task["prompt"])

    def on_reset(self, task: dict[str, Any]) -> None:
        super().on_reset(task)
        self.metrics.extra.update(tests_passed=0, tests_total=len(task["tests"]))
        for kind in TEST_KINDS:
            self.metrics.extra[f"tests_passed_{kind}"] = 0
            self.metrics.extra[f"tests_total_{kind}"] = sum(_kind(t) == kind for t in task["tests"])

    def run_tests(self, program: str, tests: Sequence[dict[str, Any]], stop_at_first_failure: bool = False
                  ) -> list[bool]:
        """Run ``program`` on each test in the sandbox (concurrently); ``[passed, ...]`` in test order.

        A test runs under its own ``time_limit_s`` when it has one (stress tests), else ``test_timeout_s``."""
        def one(t: dict[str, Any]) -> bool:
            limit = t.get("time_limit_s") or self.test_timeout_s
            r = self.sandbox.run(program, timeout=float(limit), stdin=t["input"])
            return r.status == "ok" and not r.truncated and outputs_match(r.stdout, t["output"])

        if stop_at_first_failure:
            results = []
            for t in tests:
                results.append(one(t))
                if not results[-1]:
                    break
            return results + [False] * (len(tests) - len(results))
        workers = max(1, min(len(tests), self.sandbox.config.max_concurrency))
        if workers == 1:
            return [one(t) for t in tests]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, tests))

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        program = extract_program(answer)
        tests = task["tests"]
        passed = self.run_tests(program, tests, stop_at_first_failure=self.reward_mode == "all")
        n = sum(passed)
        self.metrics.extra["tests_passed"] = n
        for kind in TEST_KINDS:
            self.metrics.extra[f"tests_passed_{kind}"] = sum(
                p for p, t in zip(passed, tests, strict=True) if _kind(t) == kind)
        all_ok = n == len(tests)
        if self.reward_mode == "all":
            return (self.rewards.correct if all_ok else self.rewards.wrong), all_ok
        return n / len(tests), all_ok

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """Try the reference solution on the first test, then answer with it."""
        solution = task.get("solution")
        if not solution:
            return None
        first = task["tests"][0]
        trial = (f"import sys, io\nsys.stdin = io.StringIO({first['input']!r})\n{solution.rstrip()}\n")
        call = self.parser.render_call("code_interpreter", {"code": trial})
        return [f"Let me try my program on the first example.\n{call}",
                f"The output matches the example.\n<answer>\n```python\n{solution.rstrip()}\n```\n</answer>"]


def _kind(test: dict[str, Any]) -> str:
    return test.get("kind", "basic")
