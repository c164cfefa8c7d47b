"""The step loop: what :meth:`TextEnv.step <agentrl.envs.core.TextEnv.step>` does with one assistant reply.

Every environment runs this one loop; an environment changes what happens in it only through the hooks of
:class:`~agentrl.envs.core.TextEnv`, in this order:

1. the reply is counted as a turn, added to the messages and parsed;
2. :meth:`~agentrl.envs.core.TextEnv.episode_over` — did the benchmark end the episode before the agent spoke
   (τ²'s user left)? Its grade ends it; else the reply's calls become its message's ``tool_calls``;
3. :meth:`~agentrl.envs.core.TextEnv.grade_reply` — a grade of the reply as a whole (BFCL's checker) ends it;
4. :meth:`~agentrl.envs.core.TextEnv.user_turn` — the reply ended the agent's turn: the user's next message is the
   observation (a multi-turn benchmark; ``max_turns`` still holds);
5. a final answer is scored (:meth:`~agentrl.envs.core.TextEnv.score`); an unreadable reply ends it as invalid;
6. tool calls go to :meth:`~agentrl.envs.core.TextEnv.run_calls`, the call runner (default :func:`run_each`:
   each call in order through :meth:`~agentrl.envs.core.TextEnv.run_tool`, within the tool-call budget); after a
   user turn or the calls, ``episode_over`` is asked again, then the turn budget.

Nothing here imports :mod:`agentrl.envs.core`: it imports this module.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from agentrl.envs.parsing import ParsedAction
from agentrl.envs.tools import INVALID_CALL_KINDS, ToolResult, openai_tool_calls

if TYPE_CHECKING:
    from agentrl.envs.core import EpisodeMetrics, TextEnv

__all__ = ["CallResults", "Grade", "clip_head", "join_results", "run_each", "step", "tally"]


class Grade(NamedTuple):
    """How a benchmark ended an episode (:meth:`~agentrl.envs.core.TextEnv.episode_over`); a plain
    ``(reward, correct)`` pair reads as ``termination="answered"``, not truncated."""

    reward: float
    correct: bool
    termination: str = "answered"
    """``"answered" | "invalid" | "budget"`` (``info["termination"]``; ``format_ok`` unless ``"invalid"``)."""
    truncated: bool = False


@dataclass
class CallResults:
    """What :meth:`~agentrl.envs.core.TextEnv.run_calls` returns: the observation of a reply's calls (their tool
    messages are in the env's messages already)."""

    obs: str
    obs_role: str = "tool"
    """``"tool"``; ``"user"`` when no call ran and ``obs`` says why (a budget, the benchmark's own stop)."""
    credit: float = 0.0
    """The calls' partial credit (the sum of :meth:`~agentrl.envs.core.TextEnv.call_reward`), the step's reward."""
    budget_spent: bool = False
    """The tool-call budget stopped the calls: the episode ends (``termination="budget"``, truncated, the
    no-answer reward plus ``credit``) unless ``episode_over`` grades it."""


def clip_head(text: str, max_chars: int) -> str:
    """Keep the last ``max_chars`` characters, marking the cut (tracebacks and results live at the end)."""
    if len(text) <= max_chars:
        return text
    marker = "...[truncated]\n"
    keep = max(0, max_chars - len(marker))
    return marker + text[len(text) - keep:]


def join_results(results: list[tuple[str, str]]) -> str:
    """The observation of several calls' ``(name, output)``: one output as it is, several numbered."""
    if len(results) == 1:
        return results[0][1]
    return "\n\n".join(f"Result {k} ({name}):\n{out}" for k, (name, out) in enumerate(results, 1))


def tally(metrics: EpisodeMetrics, result: ToolResult) -> str:
    """Count one call's result into ``metrics`` (an error; an invalid call; the tool's own ``metrics``) and return
    its observation text."""
    if result.error_kind is not None:
        metrics.tool_errors += 1
        if result.error_kind in INVALID_CALL_KINDS:
            metrics.invalid_calls += 1
    extra = metrics.extra
    for key, value in result.metrics.items():
        extra[key] = extra.get(key, 0) + value
    return result.content


def run_each(env: TextEnv, calls: list[dict[str, Any]], run: Callable[[str, Any], str] | None = None) -> CallResults:
    """The default call runner: each call (``{"name", "arguments", "id"}``) in order, each counted against the
    tool-call budget, timed, credited (:meth:`~agentrl.envs.core.TextEnv.call_reward`), its output cut to
    ``max_obs_chars`` and added as a ``tool`` message. ``run(name, arguments)`` runs one call and returns its
    observation, its errors counted (default: :meth:`~agentrl.envs.core.TextEnv.run_tool`)."""
    if run is None:
        def run(name: str, arguments: Any) -> str:
            return env.run_tool(ParsedAction("tool_call", name=name, arguments=arguments))
    results: list[tuple[str, str]] = []
    credit, metrics, budgets = 0.0, env.metrics, env.budgets
    for call in calls:
        if metrics.tool_calls >= budgets.max_tool_calls:
            return CallResults(f"Tool-call budget of {budgets.max_tool_calls} exhausted before an answer.",
                               obs_role="user", credit=credit, budget_spent=True)
        metrics.tool_calls += 1
        t0 = time.perf_counter()
        out = run(call["name"], call["arguments"])
        metrics.tool_latency_s += time.perf_counter() - t0
        assert env.task is not None
        credit += float(env.call_reward(call["name"], call["arguments"], env.task))
        out = clip_head(out, budgets.max_obs_chars)
        env.messages.append({"role": "tool", "name": call["name"], "tool_call_id": call["id"], "content": out})
        results.append((call["name"], out))
    return CallResults(join_results(results), credit=credit)


def step(env: TextEnv, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """One assistant reply through the loop (the module docstring); ``TextEnv.step`` guards it (never raises)."""
    if not isinstance(action, str):
        action = "" if action is None else str(action)
    env.metrics.turns += 1
    env.messages.append({"role": "assistant", "content": action})
    parsed = env.parser.parse(action)
    calls = (parsed.calls or []) if parsed.kind == "tool_call" else []
    ids = [str(c.get("id") or f"call{env.metrics.turns:03d}{k:02d}") for k, c in enumerate(calls)]
    task = env.task
    assert task is not None, "step() before reset()"
    over = env.episode_over()
    if over is not None:  # the benchmark ended the episode before this reply (τ²'s user left): nothing of it ran
        return _end(env, over, "", parsed, "user", None)
    if calls:
        env.messages[-1]["tool_calls"] = openai_tool_calls(calls, ids)
    graded = env.grade_reply(parsed, task)
    said = None
    if isinstance(graded, str):
        warnings.warn(f"{type(env).__name__}.grade_reply returned the next user message: return it from "
                      "user_turn(parsed, task) instead (grade_reply returns a grade or None)",
                      DeprecationWarning, stacklevel=2)
        said, graded = graded, None
    if graded is not None:
        ok = parsed.kind != "invalid"
        env.metrics.invalid_calls += not ok
        return env._finish("", parsed, reward=graded[0], termination="answered" if ok else "invalid",
                           correct=graded[1], answer=parsed.answer, format_ok=ok)
    if said is None:
        said = env.user_turn(parsed, task)
    if said is not None:  # the agent's turn ends; the episode goes on with the user's next message
        over = env.episode_over()
        if over is None and env.metrics.turns >= env.budgets.max_turns:
            return env._finish(said, parsed, reward=env.rewards.invalid, termination="budget", truncated=True)
        if said:
            env.messages.append({"role": "user", "content": said})
        if over is not None:
            return _end(env, over, said, parsed, "user", parsed.answer)
        return said, 0.0, False, False, env._info(parsed, "user")

    if parsed.kind == "answer":
        reward, correct = env.score(parsed.answer or "", task)
        return env._finish("", parsed, reward=reward, termination="answered", correct=correct, answer=parsed.answer)
    if parsed.kind == "invalid":
        env.metrics.invalid_calls += 1
        return env._finish(f"Invalid reply: {parsed.error}", parsed, reward=env.rewards.invalid,
                           termination="invalid", format_ok=False)

    ran = env.run_calls([{**c, "id": i} for c, i in zip(calls, ids, strict=True)])
    over = env.episode_over()
    if over is not None:
        return _end(env, over, ran.obs, parsed, ran.obs_role, None)
    if ran.budget_spent or env.metrics.turns >= env.budgets.max_turns:
        return env._finish(ran.obs, parsed, reward=env.rewards.invalid + ran.credit, termination="budget",
                           truncated=True, obs_role=ran.obs_role)
    return ran.obs, ran.credit, False, False, env._info(parsed, ran.obs_role)


def _end(env: TextEnv, over: tuple, obs: str, parsed: ParsedAction, obs_role: str, answer: str | None):
    """End the episode with the benchmark's grade ``over`` (:class:`Grade`, or a ``(reward, correct)`` pair)."""
    reward, correct, termination, truncated = Grade(*over)
    return env._finish(obs, parsed, reward=reward, termination=termination, truncated=truncated, correct=correct,
                       answer=answer, format_ok=termination != "invalid", obs_role=obs_role)
