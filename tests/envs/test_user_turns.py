"""A turn boundary inside an episode: ``user_turn`` (before it, a string from ``grade_reply``, still honoured with a
DeprecationWarning) ends the agent's turn, not the episode; the string is the next user message (the observation,
``obs_role`` "user"), and the ``max_turns`` budget still holds. A benchmark's own call runner (``run_calls``) and
its own end (``episode_over``) plug into the same step loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.step_loop import CallResults, Grade
from agentrl.envs.tools import ToolSet, tool


@tool
def echo(text: str) -> str:
    """Say the text back.

    Args:
        text: what to say.
    """
    return text


class TwoQuestions(TextEnv):
    """Two user turns: the agent's text reply to the first one brings the second; its reply to that is graded."""

    def __init__(self, max_turns: int = 6):
        super().__init__(tools=ToolSet([echo]), parser=ActionParser("hermes", answer="text"),
                         budgets=Budgets(max_turns=max_turns), rewards=Rewards(invalid=-0.5))
        self.answers: list[str] = []

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return {"id": "t", "question": "first?"}

    def on_reset(self, task: dict[str, Any]) -> None:
        self.answers = []

    def grade_reply(self, parsed: ParsedAction, task: dict[str, Any]) -> tuple[float, bool] | str | None:
        if parsed.kind == "tool_call":
            return None
        self.answers.append(parsed.answer or "")
        if len(self.answers) == 1:
            return "second?"
        return (1.0, True) if self.answers == ["a", "b"] else (0.0, False)


def _play_two_questions(env) -> None:
    """A tool call, the first answer (the env asks the second question as the user), the second answer (graded)."""
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step('<tool_call>\n{"name": "echo", "arguments": {"text": "x"}}\n</tool_call>')
    assert (obs, info["obs_role"], term) == ("x", "tool", False)
    obs, reward, term, trunc, info = env.step("a")
    assert (obs, reward, term, trunc, info["obs_role"]) == ("second?", 0.0, False, False, "user")
    assert info["messages"][-2:] == [{"role": "assistant", "content": "a"}, {"role": "user", "content": "second?"}]
    obs, reward, term, trunc, info = env.step("b")
    assert (reward, term, info["correct"], info["termination"]) == (1.0, True, True, "answered")


def test_a_string_from_grade_reply_is_the_next_user_message_and_the_episode_goes_on():
    _play_two_questions(TwoQuestions())


def test_the_turn_budget_ends_the_episode_at_a_turn_boundary():
    env = TwoQuestions(max_turns=1)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("a")
    assert (obs, reward, term, trunc, info["termination"]) == ("second?", -0.5, False, True, "budget")


def test_the_deprecated_string_from_grade_reply_says_to_use_user_turn():
    env = TwoQuestions()
    env.reset(seed=0)
    with pytest.warns(DeprecationWarning, match=r"TwoQuestions.grade_reply .* user_turn\(parsed, task\)"):
        env.step("a")


class TwoQuestionsByHook(TwoQuestions):
    """The same env through the hooks as they are now: ``user_turn`` brings the second question, ``grade_reply``
    only grades."""

    def grade_reply(self, parsed: ParsedAction, task: dict[str, Any]) -> tuple[float, bool] | None:
        if parsed.kind == "tool_call" or not self.answers:
            return None
        self.answers.append(parsed.answer or "")
        return (1.0, True) if self.answers == ["a", "b"] else (0.0, False)

    def user_turn(self, parsed: ParsedAction, task: dict[str, Any]) -> str | None:
        if parsed.kind == "tool_call":
            return None
        self.answers.append(parsed.answer or "")
        return "second?"


def test_user_turn_is_the_next_user_message_and_grade_reply_grades_the_last_reply(recwarn):
    _play_two_questions(TwoQuestionsByHook())
    assert not [w for w in recwarn if w.category is DeprecationWarning]
    env = TwoQuestionsByHook(max_turns=1)
    env.reset(seed=0)
    assert env.step("a")[:4] == ("second?", -0.5, False, True)


SOLVED = Grade(1.0, True)


class Batches(TextEnv):
    """A benchmark stand-in whose harness runs a reply's calls as one batch (``run_calls``) and ends the episode
    itself once ``stop_after`` calls ran, or before any reply when ``gone`` (``episode_over``)."""

    def __init__(self, stop_after: int, grade: Grade = SOLVED, gone: bool = False):
        super().__init__(tools=ToolSet([echo]), parser=ActionParser("hermes", answer="text"))
        self.stop_after, self.grade, self.gone = stop_after, grade, gone
        self.batches: list[list[tuple[str, str]]] = []

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return {"id": "b", "question": "go"}

    def run_calls(self, calls: list[dict[str, Any]]) -> CallResults:
        self.batches.append([(c["name"], c["id"]) for c in calls])
        for c in calls:
            self.messages.append({"role": "tool", "name": c["name"], "tool_call_id": c["id"], "content": "ok"})
        return CallResults(f"ran {len(calls)}", credit=0.25)

    def episode_over(self) -> Grade | None:
        return self.grade if self.gone or sum(map(len, self.batches)) >= self.stop_after else None


TWO_CALLS = ('<tool_call>\n{"name": "echo", "arguments": {"text": "x"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>')


def test_run_calls_gets_the_replys_calls_and_episode_over_ends_the_episode_with_its_grade():
    env = Batches(stop_after=3)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(TWO_CALLS)
    assert (obs, reward, term, trunc, info["obs_role"]) == ("ran 2", 0.25, False, False, "tool")
    assert env.batches == [[("echo", "call00100"), ("nope", "call00101")]]  # one batch, unvalidated, with ids
    assert [m["tool_call_id"] for m in info["messages"][-2:]] == ["call00100", "call00101"]
    obs, reward, term, trunc, info = env.step(TWO_CALLS)
    assert (obs, reward, term, trunc, info["termination"], info["correct"]) == ("ran 2", 1.0, True, False,
                                                                                "answered", True)
    env = Batches(stop_after=1, grade=Grade(0.0, False, "budget", truncated=True))
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(TWO_CALLS)
    assert (reward, term, trunc, info["termination"], info["format_ok"]) == (0.0, False, True, "budget", True)


def test_episode_over_before_the_reply_ends_it_unread():
    env = Batches(stop_after=9, grade=Grade(0.0, False, "invalid"), gone=True)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(TWO_CALLS)
    assert (obs, reward, term, info["termination"], info["format_ok"], info["obs_role"]) == (
        "", 0.0, True, "invalid", False, "user")
    assert env.batches == [] and "tool_calls" not in info["messages"][-1]
