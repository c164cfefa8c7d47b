"""``AgentRL/PythonMath-v0``: solve a math problem with a Python interpreter (ReTool).

The agent may call ``code_interpreter(code)``; every call runs in a fresh, isolated process
(:mod:`agentrl.envs.sandbox`). The observation is the program's stdout on success, its stderr on an error, and
a fixed message on a timeout; it is cut from the head to ``max_obs_chars`` so the end of a traceback survives.
The final answer is the last ``\\boxed{}`` in the last 300 characters of a reply. Reward: +1 when math-verify
says the answer is equivalent to the reference (:mod:`agentrl.envs.verify`), -1 otherwise (wrong, invalid
format, or no answer before a budget ran out).

Data:

* the built-in seeded generator (:func:`make_task`): problems where computing helps — counting with
  conditions, modular arithmetic, sums of sequences, combinatorics, digit sums, primes — with exact answers
  and a solution program, so every task has a demonstration trajectory. Task ``i`` is a pure function of
  ``i``; the ``train`` split uses even indices, ``test`` odd ones.
* your rows: ``dataset=`` a JSONL path or list of ``{"question", "answer"}`` rows (AIME-style eval sets), or
  DAPO-Math-17k rows (``prompt[0].content`` with its "Answer: $Answer" template stripped,
  ``reward_model.ground_truth``) — see :func:`load_math_rows`.

Per-episode metrics (``info["metrics"]``): ``code_calls``, ``exec_ok``, ``exec_error``, ``exec_timeout``,
``exec_latency_s``, and ``self_correction`` (1 when an execution failed, a later one succeeded, and the final
answer was correct).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.code_tool import CodeToolEnv, code_interpreter, exec_observation, recovered_from_error
from agentrl.envs.core import Budgets, Rewards
from agentrl.envs.datasets import DatasetError, TaskGenerator, check_split, draw_row, located_rows
from agentrl.envs.sandbox import CodeSandbox
from agentrl.envs.verify import MathVerifier, default_verifier

__all__ = ["FAMILIES", "CodeToolEnv", "PythonMathEnv", "code_interpreter", "exec_observation", "load_math_rows",
           "make_task", "make_tasks", "recovered_from_error", "strip_dapo_template"]


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


# ---------------------------------------------------------------------------------------------- generator
# Each family draws its parameters from ``r`` and returns (question, answer, solution_code).


def _fam_count_divisible(r):
    n = int(r.integers(500, 20000))
    a, b = (int(x) for x in r.choice([3, 4, 5, 6, 7, 9, 11, 13], size=2, replace=False))
    c = int(r.choice([2, 8, 10, 12, 15]))
    ans = sum(1 for k in range(1, n + 1) if (k % a == 0 or k % b == 0) and k % c != 0)
    q = f"How many integers from 1 to {n} inclusive are divisible by {a} or by {b}, but not by {c}?"
    code = f"print(sum(1 for k in range(1, {n} + 1) if (k % {a} == 0 or k % {b} == 0) and k % {c} != 0))"
    return q, str(ans), code


def _fam_modpow(r):
    a, e = int(r.integers(2, 50)), int(r.integers(100, 10**6))
    m = int(r.choice([7, 11, 13, 97, 101, 1000, 1009, 10**4]))
    q = f"What is the remainder when ${a}^{{{e}}}$ is divided by {m}?"
    return q, str(pow(a, e, m)), f"print(pow({a}, {e}, {m}))"


def _fam_sum_powers(r):
    n, p = int(r.integers(20, 400)), int(r.integers(2, 5))
    q = f"Compute $\\sum_{{k=1}}^{{{n}}} k^{{{p}}}$."
    return q, str(sum(k**p for k in range(1, n + 1))), f"print(sum(k**{p} for k in range(1, {n} + 1)))"


def _fam_digit_sum(r):
    b, e = int(r.integers(2, 10)), int(r.integers(50, 400))
    q = f"What is the sum of the digits of ${b}^{{{e}}}$?"
    return q, str(sum(map(int, str(b**e)))), f"print(sum(int(d) for d in str({b}**{e})))"


def _fam_no_consecutive_subsets(r):
    n, k = int(r.integers(10, 20)), int(r.integers(3, 6))
    q = (f"How many {k}-element subsets of $\\{{1, 2, \\ldots, {n}\\}}$ contain no two consecutive "
         f"integers?")
    ans = math.comb(n - k + 1, k)
    code = ("from itertools import combinations\n"
            f"print(sum(1 for s in combinations(range(1, {n} + 1), {k}) "
            "if all(b - a > 1 for a, b in zip(s, s[1:]))))")
    return q, str(ans), code


def _fam_digit_count(r):
    digits, s = int(r.integers(3, 6)), int(r.integers(5, 25))
    lo, hi = 10 ** (digits - 1), 10**digits
    ans = sum(1 for x in range(lo, hi) if sum(map(int, str(x))) == s)
    q = f"How many {digits}-digit positive integers have digits that sum to {s}?"
    code = f"print(sum(1 for x in range({lo}, {hi}) if sum(map(int, str(x))) == {s}))"
    return q, str(ans), code


def _fam_primes(r):
    n = int(r.integers(1000, 100000))
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, math.isqrt(n) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(range(i * i, n + 1, i)))
    q = f"How many prime numbers are less than or equal to {n}?"
    code = ("import sympy\n"
            f"print(sympy.primepi({n}))")
    return q, str(sum(sieve)), code


def _fam_fibonacci_mod(r):
    n, m = int(r.integers(50, 5000)), int(r.choice([7, 10, 97, 100, 1000, 10007]))
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % m
    q = f"Let $F_0 = 0$, $F_1 = 1$ and $F_{{n+1}} = F_n + F_{{n-1}}$. What is $F_{{{n}}} \\bmod {m}$?"
    code = f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a % {m})"
    return q, str(a), code


def _fam_linear_congruence(r):
    m = int(r.choice([97, 101, 211, 997, 1009]))
    a, c = int(r.integers(2, m)), int(r.integers(1, m))
    x = (c * pow(a, -1, m)) % m or m
    q = f"Find the smallest positive integer $x$ such that ${a}x \\equiv {c} \\pmod{{{m}}}$."
    code = f"print(next(x for x in range(1, {m} + 1) if ({a} * x - {c}) % {m} == 0))"
    return q, str(x), code


def _fam_lattice_paths(r):
    w, h = int(r.integers(4, 10)), int(r.integers(4, 10))
    bx, by = int(r.integers(1, w)), int(r.integers(1, h))
    total = math.comb(w + h, w)
    through = math.comb(bx + by, bx) * math.comb(w - bx + h - by, w - bx)
    q = (f"A path goes from $(0,0)$ to $({w},{h})$ using unit steps right or up. How many such paths avoid "
         f"the point $({bx},{by})$?")
    code = (f"from functools import lru_cache\n@lru_cache(None)\ndef f(x, y):\n"
            f"    if (x, y) == ({bx}, {by}) or x > {w} or y > {h}:\n        return 0\n"
            f"    if (x, y) == ({w}, {h}):\n        return 1\n    return f(x + 1, y) + f(x, y + 1)\nprint(f(0, 0))")
    return q, str(total - through), code


FAMILIES: dict[str, Callable[[np.random.Generator], tuple[str, str, str]]] = {
    "count_divisible": _fam_count_divisible,
    "modpow": _fam_modpow,
    "sum_powers": _fam_sum_powers,
    "digit_sum": _fam_digit_sum,
    "no_consecutive_subsets": _fam_no_consecutive_subsets,
    "digit_count": _fam_digit_count,
    "primes": _fam_primes,
    "fibonacci_mod": _fam_fibonacci_mod,
    "linear_congruence": _fam_linear_congruence,
    "lattice_paths": _fam_lattice_paths,
}


GENERATOR = TaskGenerator(FAMILIES, salt=0x9A7, noun="problem")


def make_task(index: int, families: Sequence[str] | None = None) -> dict[str, Any]:
    """Built-in problem number ``index`` (a pure function of ``index`` and ``families``).

    Returns ``{"id", "family", "question", "answer", "solution_code", "data_source"}``; ``answer`` is exact
    (an integer as a string) and ``solution_code`` prints it.
    """
    family, (question, answer, code) = GENERATOR.draw(index, families)
    return {"id": f"{family}-{index}", "family": family, "question": question, "answer": answer,
            "solution_code": code, "data_source": "agentrl_generator"}


def make_tasks(n: int, split: str = "test", families: Sequence[str] | None = None, start: int = 0) -> list[dict]:
    """``n`` built-in problems of a split (``train``: even indices, ``test``: odd), from position ``start``."""
    return GENERATOR.many(make_task, n, split, families, start)


# ---------------------------------------------------------------------------------------------- env


#: What the agent is told to do (the system prompt's first paragraph).
INSTRUCTIONS = (
    "You solve math problems step by step with the help of a Python interpreter. Call code_interpreter "
    "whenever computation, enumeration or symbolic algebra makes the answer exact and fast; make at "
    "most one call per reply and wait for its result. You see only what the code prints, so print() "
    "the values you need. Every run starts from scratch: define everything again, keep searches small, "
    "and make the code finish within a few seconds. If a run fails, read the error and fix the code. "
    "Do not call the tool and give the final answer in the same reply."
)


class PythonMathEnv(CodeToolEnv):
    """Solve a math problem with a sandboxed Python interpreter; see the module docstring."""

    def __init__(
        self,
        dataset: str | Path | Iterable[dict[str, Any]] | None = None,
        *,
        dataset_format: str = "auto",
        families: Sequence[str] | None = None,
        split: str = "train",
        max_turns: int = 8,
        max_code_calls: int = 6,
        max_obs_chars: int = 2_000,
        code_timeout_s: float = 10.0,
        call_format: str = "hermes",
        sandbox: CodeSandbox | None = None,
        verifier: MathVerifier | None = None,
        tools_in_prompt: bool = True,
        render_mode: str | None = None,
    ):
        """
        Args:
            dataset: your problems — a JSONL path or list of rows (``{"question", "answer"}`` or DAPO-Math-17k
                rows; see :func:`load_math_rows`). Default: the built-in generator.
            dataset_format: ``"auto"``, ``"qa"`` or ``"dapo"``.
            families: restrict the generator to these families (see ``FAMILIES``).
            split: ``"train"`` or ``"test"`` — which generated problems ``reset`` samples.
            max_turns: assistant replies per episode.
            max_code_calls: code executions per episode.
            max_obs_chars: an observation longer than this is cut from the head.
            code_timeout_s: wall-clock limit of one execution.
            call_format: ``"hermes"`` (``<tool_call>{"name": "code_interpreter", ...}</tool_call>``) or
                ``"fenced"`` (a reply ending with a fenced python block runs it).
            sandbox: where code runs (any :class:`~agentrl.envs.sandbox.CodeSandbox`, e.g.
                ``RemoteSandbox("http://host:8080")``); default the process-wide shared :func:`default_sandbox`
                (bubblewrap).
            verifier: answer checker; default the shared :func:`default_verifier`.
        """
        self.split = check_split(split, ("train", "test"))
        self.rows = load_math_rows(dataset, dataset_format) if dataset is not None else None
        self.families = GENERATOR.check(families) if families else None
        self._verifier = verifier
        super().__init__(
            sandbox=sandbox, code_timeout_s=code_timeout_s, call_format=call_format, answer="boxed",
            budgets=Budgets(max_turns=max_turns, max_tool_calls=max_code_calls, max_obs_chars=max_obs_chars),
            rewards=Rewards(correct=1.0, wrong=-1.0, invalid=-1.0),
            tools_in_prompt=tools_in_prompt, render_mode=render_mode,
        )

    @property
    def verifier(self) -> MathVerifier:
        if self._verifier is None:
            self._verifier = default_verifier()
        return self._verifier

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.rows is not None:
            return dict(draw_row(self.rows, rng))
        return GENERATOR.sample(make_task, rng, self.split, self.families)

    def heldout_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """The first ``n`` generated problems of the ``test`` split (of ``families`` when given); ``seed`` is
        unused: the split is fixed."""
        return make_tasks(n, split="test", families=self.families)

    def task_instructions(self, task: dict[str, Any]) -> str:
        return INSTRUCTIONS

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
        code = task.get("solution_code")
        if not code:
            return None
        call = self.parser.render_call("code_interpreter", {"code": code})
        return [f"Let me compute this exactly with Python.\n{call}",
                f"The program printed the result, so the answer is {self.parser.render_answer(str(task['answer']))}"]
