"""``AgentRL/PythonMath-v0``: solve a math problem with a Python interpreter (ReTool).

The agent may call ``code_interpreter(code)``; every call runs in a fresh, isolated process
(:mod:`agentrl.envs.sandbox`). The observation is the program's stdout on success, its stderr on an error, and
a fixed message on a timeout; it is cut from the head to ``max_obs_chars`` so the end of a traceback survives.
The final answer is the last ``\\boxed{}`` in the last 300 characters of a reply. Reward: +1 when math-verify
says the answer is equivalent to the reference (:mod:`agentrl.envs.verify`), -1 otherwise (wrong, invalid
format, or no answer before a budget ran out).

Data:

* the built-in seeded generator (:mod:`agentrl.envs.python_math.tasks`): 20 families in three tiers — tier 1,
  one line of Python copies the question (``What is 48213 * 9127 - 3391?``); tier 2, a short loop or
  comprehension (the sum of the squares of the odd numbers below N); tier 3, competition-style problems (counting
  with conditions, modular arithmetic, combinatorics, primes). Every task has an exact answer and a solution
  program, so every task has a demonstration trajectory. Task ``i`` is a pure function of ``i`` and the selection
  (``families=`` or ``tiers=``); the ``train`` split uses even indices, ``test`` odd ones.
  **Default mixture: all three tiers, a third of the tasks each** — tiers 1 and 2 are the ones a sub-1B model
  can learn to solve with the interpreter, tier 3 keeps the ReTool setting for larger models. This default holds
  other tasks at each position than the one before 2026-12-01 (tier 3 only); ``tiers=[3]`` reproduces that one
  task for task, and ``families=[...]`` draws exactly as before. :meth:`PythonMathEnv.test_tasks` is the
  first ``n`` test-split tasks of the env's own selection.
* your rows: ``dataset=`` a JSONL path or list of ``{"question", "answer"}`` rows (AIME-style eval sets), or
  DAPO-Math-17k rows (``prompt[0].content`` with its "Answer: $Answer" template stripped,
  ``reward_model.ground_truth``) — see :func:`load_math_rows`.

``tools_enabled=False`` is the text-only baseline: no tool is offered (none in the prompt or in
``info["tools"]``), a call is answered with an ``Error: no tools are available`` observation (an invalid call;
the episode goes on) and the answer must be worked out in the reply itself.

Per-episode metrics (``info["metrics"]``): ``code_calls``, ``exec_ok``, ``exec_error``, ``exec_timeout``,
``exec_latency_s``, and ``self_correction`` (1 when an execution failed, a later one succeeded, and the final
answer was correct).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.code_tool import CodeToolEnv, recovered_from_error
from agentrl.envs.core import Budgets, Rewards
from agentrl.envs.datasets import DatasetError, check_split, draw_row, located_rows
from agentrl.envs.python_math.tasks import (
    DEFAULT_TIERS,
    GENERATOR,
    check_tiers,
    make_tasks,
    sample_task,
)
from agentrl.envs.sandbox.protocol import CodeSandbox
from agentrl.envs.tools import ToolSet
from agentrl.envs.verify import MathVerifier, default_verifier

__all__ = ["PythonMathEnv", "load_math_rows", "strip_dapo_template"]


# ---------------------------------------------------------------------------------------------- data

_DAPO_PREFIX = re.compile(r"^\s*Solve the following math problem.*?\n\s*\n", re.DOTALL)
_DAPO_SUFFIX = re.compile(r"\n\s*\n?\s*Remember to put your answer on its own line after \"?Answer:?\"?\.?\s*$")


def strip_dapo_template(content: str) -> str:
    """The bare problem from a DAPO-Math-17k prompt (its "Answer: $Answer" instructions removed)."""
    text = _DAPO_PREFIX.sub("", content, count=1)
    text = _DAPO_SUFFIX.sub("", text, count=1)
    return text.strip()


def load_math_rows(source: str | Path | Iterable[dict[str, Any]], fmt: str = "auto") -> list[dict[str, Any]]:
    """Math problems as ``{"id", "question", "answer", "data_source"}`` rows.

    Args:
        source: a JSONL path or a list of dicts.
        fmt: ``"qa"`` — rows ``{"question", "answer"}`` (optional ``id``; ``problem`` is accepted for
            ``question``); ``"dapo"`` — DAPO-Math-17k rows (``prompt[0].content``, ``reward_model.ground_truth``,
            optional ``extra_info.index``, ``data_source``); ``"auto"`` — decided per row by its keys.

    Raises:
        DatasetError: naming the file and line (or list index) of the first malformed row.
    """
    if fmt not in ("auto", "qa", "dapo"):
        raise ValueError(f"fmt must be 'auto', 'qa' or 'dapo', got {fmt!r}")
    out = []
    for i, (where, row) in enumerate(located_rows(source, name="math dataset")):
        kind = fmt if fmt != "auto" else ("dapo" if "prompt" in row and "reward_model" in row else "qa")
        try:
            out.append(_dapo_row(row, i) if kind == "dapo" else _qa_row(row, i))
        except ValueError as e:
            raise DatasetError(f"{where}: {e}") from None
    return out


def _qa_row(row: dict[str, Any], i: int) -> dict[str, Any]:
    question = row.get("question", row.get("problem"))
    if not isinstance(question, str) or not question.strip():
        raise ValueError('a row needs a non-empty string "question"')
    answer = row.get("answer")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError('a row needs a non-empty "answer" (string or number)')
    return {"id": str(row.get("id", i)), "question": question.strip(), "answer": answer.strip(),
            "data_source": str(row.get("data_source", "qa"))}


def _dapo_row(row: dict[str, Any], i: int) -> dict[str, Any]:
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[0], dict):
        raise ValueError('"prompt" must be a non-empty list of messages')
    content = prompt[0].get("content")
    if not isinstance(content, str) or not content.strip():
        raise ValueError('"prompt[0].content" must be a non-empty string')
    rm = row.get("reward_model")
    truth = rm.get("ground_truth") if isinstance(rm, dict) else None
    if isinstance(truth, list):
        truth = truth[0] if truth else None
    if truth is None or not str(truth).strip():
        raise ValueError('"reward_model.ground_truth" is missing or empty')
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    question = strip_dapo_template(content)
    if not question:
        raise ValueError("the prompt holds no problem once its template is stripped")
    return {"id": str(extra.get("index", i)), "question": question, "answer": str(truth).strip(),
            "data_source": str(row.get("data_source", "dapo_math"))}


# ---------------------------------------------------------------------------------------------- env


#: What the agent is told to do (the system prompt's first paragraph); the shape of a call in the env's call
#: format follows it (:meth:`PythonMathEnv.task_instructions`). No worked example with numbers: the 135M model
#: copied an example's answer into its own replies (measured, see docs/envs/python_math.md).
INSTRUCTIONS = (
    "Solve the math problem with Python. Write a short program that computes the answer and prints it, and run "
    "it with one code_interpreter call. The printed result comes back in the next message; then reply with that "
    "number in \\boxed{}. Each run starts fresh, so write the whole program every time. If the run fails, read "
    "the error, fix the code and call again."
)

#: The instructions of the text-only baseline (``tools_enabled=False``).
TEXT_ONLY_INSTRUCTIONS = "Solve the math problem. No tools are available: work the answer out in your reply."


class PythonMathEnv(CodeToolEnv):
    """Solve a math problem with a sandboxed Python interpreter; see the module docstring."""

    supports_text_only = True
    difficulty_knobs = {
        "tiers": "which tiers are drawn (any of 1, 2, 3; default all): 1 one line of Python copies the question, "
                 "2 a short loop or comprehension, 3 competition-style problems",
        "families": "restrict the generator to these families (20, each of one tier; see tasks.FAMILIES)",
    }

    def __init__(
        self,
        dataset: str | Path | Iterable[dict[str, Any]] | None = None,
        *,
        dataset_format: str = "auto",
        families: Sequence[str] | None = None,
        tiers: Sequence[int] | None = None,
        split: str = "train",
        max_turns: int = 8,
        max_code_calls: int = 6,
        max_obs_chars: int = 2_000,
        code_timeout_s: float = 10.0,
        call_format: str = "hermes",
        sandbox: CodeSandbox | str | None = None,
        sandbox_kwargs: dict[str, Any] | None = None,
        verifier: MathVerifier | None = None,
        tools_enabled: bool = True,
        tools_in_prompt: bool = True,
        render_mode: str | None = None,
    ):
        """
        Args:
            dataset: your problems — a JSONL path or list of rows (``{"question", "answer"}`` or DAPO-Math-17k
                rows; see :func:`load_math_rows`). Default: the built-in generator.
            dataset_format: ``"auto"``, ``"qa"`` or ``"dapo"``.
            families: restrict the generator to these families (see ``FAMILIES``); each must be in ``tiers``
                when both are given.
            tiers: the generator's tiers (1, 2, 3; see ``TIERS``), e.g. ``[1, 2]``; default all three
                (``DEFAULT_TIERS``). Ignored for the draw when ``families`` is given.
            split: ``"train"`` or ``"test"`` — which generated problems ``reset`` samples.
            max_turns: assistant replies per episode.
            max_code_calls: code executions per episode.
            max_obs_chars: an observation longer than this is cut from the head.
            code_timeout_s: wall-clock limit of one execution.
            call_format: ``"hermes"`` (``<tool_call>{"name": "code_interpreter", ...}</tool_call>``) or
                ``"fenced"`` (a reply ending with a fenced python block runs it).
            sandbox: where code runs: any :class:`~agentrl.envs.sandbox.protocol.CodeSandbox` (e.g.
                ``RemoteSandbox("http://host:8080")``), or a name in
                :data:`~agentrl.envs.sandbox.registry.SANDBOXES` (``"bwrap"``, ``"remote"``, or registered);
                default the process-wide shared bubblewrap sandbox.
            sandbox_kwargs: keyword arguments of a named ``sandbox`` (JSON-able:
                ``sandbox="remote", sandbox_kwargs={"url": "http://host:8080"}``).
            verifier: answer checker; default the shared :func:`default_verifier`.
            tools_enabled: offer ``code_interpreter`` (False: the text-only baseline).

        Raises:
            ValueError: an unknown family (names the families), a bad ``tiers`` value (names ``tiers``), a
                bad split, call format or time limit.
        """
        self.split = check_split(split, ("train", "test"))
        self.rows = load_math_rows(dataset, dataset_format) if dataset is not None else None
        self.families = GENERATOR.check(families) if families else None
        self.tiers = check_tiers(tiers, self.families) if tiers is not None else None
        self.tools_enabled = bool(tools_enabled)
        self._verifier = verifier
        super().__init__(
            sandbox=sandbox, sandbox_kwargs=sandbox_kwargs, code_timeout_s=code_timeout_s,
            call_format=call_format, answer="boxed",
            budgets=Budgets(max_turns=max_turns, max_tool_calls=max_code_calls, max_obs_chars=max_obs_chars),
            rewards=Rewards(correct=1.0, wrong=-1.0, invalid=-1.0),
            tools_in_prompt=tools_in_prompt, render_mode=render_mode,
        )
        if not self.tools_enabled:
            self.tools = ToolSet(when_empty="Error: no tools are available in this mode; work the answer out "
                                            f"yourself. {self.parser.answer_instructions()}")

    @property
    def verifier(self) -> MathVerifier:
        if self._verifier is None:
            self._verifier = default_verifier()
        return self._verifier

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.rows is not None:
            return dict(draw_row(self.rows, rng))
        return sample_task(rng, self.split, self.families, self.tiers)

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """The first ``n`` generated problems of the ``test`` split of this env's task families: ``families`` when
        given, else ``tiers``, else all tiers (``DEFAULT_TIERS``). ``seed`` is unused: the split is fixed."""
        if self.families:
            return make_tasks(n, split="test", families=self.families)
        return make_tasks(n, split="test", tiers=self.tiers or DEFAULT_TIERS)

    def task_instructions(self, task: dict[str, Any]) -> str:
        if not self.tools_enabled:
            return TEXT_ONLY_INSTRUCTIONS
        call = self.parser.render_call("code_interpreter", {"code": "print(<the computation>)"})
        return f"{INSTRUCTIONS} A call looks like this:\n{call}"

    def system_prompt(self, task: dict[str, Any]) -> str:
        if not self.tools_enabled:
            return f"{self.task_instructions(task)}\n{self.parser.answer_instructions()}"
        return super().system_prompt(task)

    def user_prompt(self, task: dict[str, Any]) -> str:
        return str(task["question"])

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        correct = self.verifier.equal(answer, str(task["answer"]))
        self.metrics.extra["self_correction"] = float(correct and recovered_from_error(self.exec_history))
        return (self.rewards.correct if correct else self.rewards.wrong), correct

    def on_reset(self, task: dict[str, Any]) -> None:
        super().on_reset(task)
        self.metrics.extra["self_correction"] = 0.0

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """One ``code_interpreter`` call running the task's ``solution_code``, then the boxed answer (text-only
        mode: the boxed answer alone). None for a task without a solution program."""
        answer = self.parser.render_answer(str(task["answer"]))
        if not self.tools_enabled:
            return [f"The answer is {answer}."]
        code = task.get("solution_code")
        if not code:
            return None
        call = self.parser.render_call("code_interpreter", {"code": code})
        return [f"Let me compute this with Python.\n{call}", f"The answer is {answer}."]
