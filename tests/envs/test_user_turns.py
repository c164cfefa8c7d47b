"""A turn boundary inside an episode: ``grade_reply`` returning a string ends the agent's turn, not the episode; the
string is the next user message (the observation, ``obs_role`` "user"), and the ``max_turns`` budget still holds."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.parsing import ActionParser, ParsedAction
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


def test_a_string_from_grade_reply_is_the_next_user_message_and_the_episode_goes_on():
    env = TwoQuestions()
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step('<tool_call>\n{"name": "echo", "arguments": {"text": "x"}}\n</tool_call>')
    assert (obs, info["obs_role"], term) == ("x", "tool", False)
    obs, reward, term, trunc, info = env.step("a")
    assert (obs, reward, term, trunc, info["obs_role"]) == ("second?", 0.0, False, False, "user")
    assert info["messages"][-2:] == [{"role": "assistant", "content": "a"}, {"role": "user", "content": "second?"}]
    obs, reward, term, trunc, info = env.step("b")
    assert (reward, term, info["correct"], info["termination"]) == (1.0, True, True, "answered")


def test_the_turn_budget_ends_the_episode_at_a_turn_boundary():
    env = TwoQuestions(max_turns=1)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("a")
    assert (obs, reward, term, trunc, info["termination"]) == ("second?", -0.5, False, True, "budget")
