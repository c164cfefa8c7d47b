"""The text-env protocol: the contract between every environment and every trainer.

An agent acts in text. ``reset`` returns the user-turn text; ``step`` takes the assistant's whole reply and
returns what the environment says back. Every environment in :mod:`agentrl.envs` derives from
:class:`TextEnv`, which owns the bookkeeping (message list, budgets, metrics, the never-raise guarantee) so a
concrete environment only says what a task is, which tools exist and how an answer is scored.

The contract (also in ``docs/protocol.md``)
-------------------------------------------
``reset(seed=None, options=None) -> (obs, info)``
    ``options={"task": {...}}`` pins a task (a trainer or evaluator passes dataset rows); otherwise the env
    draws one from its own dataset with ``self.np_random`` (never the global ``random``). ``obs`` is the
    user-turn text. ``info["messages"]`` is the OpenAI-style message list so far (system prompt included; an
    assistant turn that called tools carries ``tool_calls``, each result is a ``tool`` turn with ``name`` and
    ``tool_call_id``), ``info["tools"]`` the tool schemas of this episode (OpenAI function format: the task's own
    when its row carries ``"tools"``, else the env's), ``info["task_id"]``.

``step(action) -> (obs, reward, terminated, truncated, info)``
    ``action`` is the assistant's whole reply. It is parsed into exactly one of

    * **tool calls** — one, or several in one reply where the call format has them: each runs in order and
      counts against the tool-call budget; ``obs`` holds every result (``info["obs_role"] == "tool"``), reward 0
      (or the sum of :meth:`TextEnv.call_reward` over the calls, an env's partial credit);
    * a **final answer** — ``terminated=True``, reward = the outcome reward;
    * **invalid** — ``terminated=True``, reward = the format penalty, ``obs`` says what was wrong.

    A call that names an unknown tool or passes bad arguments is not invalid *format*: it returns an
    ``Error: ...`` observation, counts as an invalid call, and the episode goes on.
    When a budget runs out (assistant turns, tool calls) the episode ends with ``truncated=True`` and the
    no-answer reward. ``info`` always holds ``parsed`` (what the reply was read as), ``obs_role``,
    ``metrics`` (the episode's counters so far); the last step adds ``correct``, ``format_ok``, ``answer``
    and ``termination`` (``"answered" | "invalid" | "budget" | "error"``).

**No action string ever makes ``step`` raise.** Tool failures become observation text and counted metrics; an
unexpected bug inside an environment is logged with its traceback and ends the episode with
``termination="error"``.
"""

from __future__ import annotations

import logging
import string
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agentrl.envs import step_loop
from agentrl.envs.parsing import CALL_FORMATS, ActionParser, ParsedAction
from agentrl.envs.step_loop import CallResults, Grade
from agentrl.envs.tools import ToolResult, ToolSet

logger = logging.getLogger(__name__)

#: Upper bound on the length of one observation or action, in characters.
MAX_TEXT_LENGTH = 200_000

_SAMPLE_CHARSET = string.printable + "äéßøλπ中文…—“”"


class AnyText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that contains *any* string up to ``max_length`` characters.

    Gymnasium's ``Text`` checks every character against its charset (alphanumeric by default), so a real
    observation with ``:`` or a newline would be "outside" the space and the passive checker would warn on
    every step. Here ``contains`` accepts any ``str``; the charset only drives :meth:`sample`, which yields
    varied printable text (with tags, braces, quotes and some non-ASCII) for fuzzing. Sampled lengths are
    uniform up to ``sample_max_length`` (default 512) rather than ``max_length``, so fuzzing stays fast.
    """

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, sample_max_length: int = 512, seed=None):
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)
        self.sample_max_length = min(sample_max_length, max_length)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask=None, probability=None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(0, self.sample_max_length + 1))
        idx = self.np_random.integers(0, len(self.character_list), size=length)
        return "".join(self.character_list[i] for i in idx)

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"


@dataclass
class Budgets:
    """Per-episode limits. Running out of either ends the episode with ``truncated=True``."""

    max_turns: int = 6
    """Assistant replies per episode (tool calls and the answer all count)."""
    max_tool_calls: int = 4
    """Tool calls per episode; a call beyond this is not executed."""
    max_obs_chars: int = 4_000
    """Tool output beyond this is cut from the head (the end, where tracebacks and results are, survives)."""

    def __post_init__(self):
        for key, low in (("max_turns", 1), ("max_tool_calls", 0), ("max_obs_chars", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")


@dataclass
class Rewards:
    """The outcome reward levels (Search-R1's three levels by default)."""

    correct: float = 1.0
    wrong: float = 0.0
    invalid: float = -0.1
    """Invalid format, or no answer before a budget ran out."""


@dataclass
class EpisodeMetrics:
    """Counters of one episode; ``info["metrics"]`` is ``asdict`` of this plus an env's own keys."""

    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    invalid_calls: int = 0
    tool_latency_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float]:
        d = {
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "invalid_calls": self.invalid_calls,
            "tool_latency_s": self.tool_latency_s,
        }
        d.update(self.extra)
        return d


class TextEnv(gym.Env[str, str]):
    """Base class of every agentrl environment: one task per episode, text in, text out.

    A subclass passes its :class:`~agentrl.envs.tools.ToolSet` and
    :class:`~agentrl.envs.parsing.ActionParser` to ``__init__`` and overrides these hooks:

    * :meth:`sample_task` (required) — draw a task dict (must hold ``"id"``) with the given generator;
    * :meth:`score` (required) — ``(reward, correct)`` of a final answer;
    * :meth:`task_instructions` — what the agent must do (used by the default :meth:`system_prompt`);
    * :meth:`system_prompt` and :meth:`user_prompt` — the opening messages for a task;
    * :meth:`demo_actions` — the assistant replies of a correct solution, for SFT and tests;
    * :meth:`on_reset` — per-episode state, after a task is chosen (e.g. metric keys set to 0);
    * :meth:`call_reward` — a reward for a tool call that ran (partial credit; default 0, outcome reward only);
    * :meth:`extra_info` — env-specific keys merged into every step's ``info``;
    * :meth:`test_tasks` — ``n`` tasks of the env's test split for evaluation (the default: there is none);
    * :meth:`task_tools` and :meth:`run_task_tool` — the tools of one task (default: the row's ``"tools"``
      schemas when it has them) and how such a tool runs;
    * :meth:`grade_reply` — grade a reply as a whole instead of running its calls (a benchmark that grades the
      calls themselves, BFCL);
    * :meth:`user_turn` — end the agent's turn with the user's next message (a multi-turn benchmark);
    * :meth:`run_calls` — the call runner: how a reply's tool calls run (default: each through :meth:`run_tool`,
      within the budget; a benchmark adapter runs them through its own harness: τ², BFCL multi-turn);
    * :meth:`episode_over` — the grade of an episode the benchmark itself ended (τ²'s simulation stopped);
    * :meth:`opening_messages` — the messages an episode starts with (default: system prompt, user prompt);
    * :attr:`supports_text_only` — ``True`` when the constructor takes ``tools_enabled=False`` (no tools).

    A tool that needs env state or counts its own metrics is a bound method or closure passed to
    :func:`~agentrl.envs.tools.tool` that returns a :class:`~agentrl.envs.tools.ToolResult` with ``metrics``;
    :meth:`run_tool` adds them to ``info["metrics"]``. Everything else — budgets, metrics, messages, the
    never-raise guarantee — lives here and in the one step loop every env runs (:mod:`agentrl.envs.step_loop`).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    supports_text_only: ClassVar[bool] = False
    """Whether the constructor accepts ``tools_enabled=False``: the text-only baseline, with no tool offered."""
    grades_cut_replies: ClassVar[bool] = False
    """Whether a reply cut by the sampler's token budget still goes to :meth:`step` to be graded (a benchmark that
    grades whatever the model wrote: BFCL); otherwise a trainer ends that episode truncated, no-answer reward."""
    difficulty_knobs: ClassVar[dict[str, str]] = {}
    """The env's difficulty knobs: constructor keyword -> what turning it does (``agentrl-env list --knobs``)."""

    def __init__(
        self,
        *,
        tools: ToolSet,
        parser: ActionParser,
        budgets: Budgets | None = None,
        rewards: Rewards | None = None,
        tools_in_prompt: bool = True,
        render_mode: str | None = None,
    ):
        """
        Args:
            tools: the tools the agent may call.
            parser: reads an assistant reply as a tool call, an answer, or invalid.
            budgets: turn, tool-call and observation-length limits.
            rewards: the outcome reward levels.
            tools_in_prompt: describe the tools and the call format in the system prompt (set False when the
                chat template renders ``info["tools"]`` itself).
            render_mode: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).
        """
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.tools = tools
        self._episode_tools: ToolSet | None = None
        self.parser = parser
        self.budgets = budgets or Budgets()
        self.rewards = rewards or Rewards()
        self.tools_in_prompt = tools_in_prompt
        self.render_mode = render_mode
        self.observation_space = AnyText()
        self.action_space = AnyText()
        self.task: dict[str, Any] | None = None
        self.messages: list[dict[str, Any]] = []
        self.metrics = EpisodeMetrics()
        self._done = True

    @property
    def episode_tools(self) -> ToolSet:
        """The tools of the current episode: the task's own (:meth:`task_tools`) or, by default, :attr:`tools`."""
        return self.tools if self._episode_tools is None else self._episode_tools

    @episode_tools.setter
    def episode_tools(self, tools: ToolSet) -> None:  # reset sets it; a benchmark adds tools mid-episode (BFCL)
        self._episode_tools = None if tools is self.tools else tools

    # ------------------------------------------------------------------ hooks for subclasses
    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        """Draw a task (a dict with at least ``"id"``) using ``rng``; never the global ``random``."""
        raise NotImplementedError

    def system_prompt(self, task: dict[str, Any]) -> str:
        """The system message for ``task``. The default states the answer and tool-call formats."""
        parts = [self.task_instructions(task), self.parser.format_instructions()]
        if self.tools_in_prompt and len(self.episode_tools):
            parts.append(self.parser.describe_tools(self.episode_tools.schemas()))
        return "\n\n".join(p for p in parts if p)

    def task_instructions(self, task: dict[str, Any]) -> str:
        """One paragraph on what the agent must do; used by the default :meth:`system_prompt`."""
        return "You are a helpful assistant that solves tasks by calling tools."

    def user_prompt(self, task: dict[str, Any]) -> str:
        """The user message that opens the episode: the task's ``query``, else its ``question``."""
        return str(task["query"] if "query" in task else task["question"])

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        """``(reward, correct)`` for a final answer of ``task``. Every env implements it (there is no default)."""
        raise NotImplementedError

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """The assistant replies of a known-correct solution of ``task``, or ``None`` if none is known."""
        return None

    def on_reset(self, task: dict[str, Any]) -> None:
        """Called after a task is chosen, before the prompts are built (per-episode state goes here)."""

    def call_reward(self, name: str, arguments: dict[str, Any], task: dict[str, Any]) -> float:
        """A reward for one tool call that ran, added to the step's reward (partial credit for a step towards the
        answer, the per-turn reward of turn credit); default 0: outcome reward only."""
        return 0.0

    def opening_messages(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        """The messages ``task``'s episode starts with; the last one's content is the observation of ``reset``.
        Default: :meth:`system_prompt` then :meth:`user_prompt`."""
        return [{"role": "system", "content": self.system_prompt(task)},
                {"role": "user", "content": self.user_prompt(task)}]

    def task_tools(self, task: dict[str, Any]) -> ToolSet:
        """The tools of ``task``'s episode. Default: a row with ``"tools"`` (OpenAI function schemas or BFCL
        function docs, see :func:`~agentrl.envs.tools.function_schema`) gets exactly those, each call validated
        against its schema and run by :meth:`run_task_tool`; any other row, and every row of an env made with
        ``tools_enabled=False`` (the text-only baseline offers no tool), gets the env's :attr:`tools`.

        Raises:
            ValueError: the row's ``"tools"`` is malformed (the message names the task and the schema).
        """
        if task.get("tools") is None or getattr(self, "tools_enabled", True) is False:
            return self.tools
        return ToolSet.from_schemas(task["tools"], lambda name, args: self.run_task_tool(name, args, task),
                                    where=f"task {str(task.get('id', ''))!r} key 'tools'")

    def run_task_tool(self, name: str, arguments: dict[str, Any], task: dict[str, Any]) -> Any:
        """Run a call of a tool the task brought (its arguments already passed the schema); return a value or a
        :class:`~agentrl.envs.tools.ToolResult`. Default: the env's own tool of that name, else an
        ``Error: ...`` observation (error kind ``"not_executable"``)."""
        if name in self.tools:
            return self.tools.call(name, arguments)
        return ToolResult(f"Error: {name}() cannot be run in this environment (the task gives only its schema)",
                          "not_executable")

    def grade_reply(self, parsed: ParsedAction, task: dict[str, Any]) -> tuple[float, bool] | None:
        """``(reward, correct)`` to end the episode on this reply without running its calls, or ``None`` (the
        default) for the usual handling. An env whose benchmark grades the calls themselves (BFCL's AST checker)
        returns the grade here; the reply's calls still appear as ``tool_calls`` in ``info["messages"]``, and the
        termination is ``"invalid"`` for a reply the parser could not read, else ``"answered"``. (A string from
        here, the next user message before :meth:`user_turn` existed, still works, with a DeprecationWarning.)"""
        return None

    def user_turn(self, parsed: ParsedAction, task: dict[str, Any]) -> str | None:
        """The user's next message when this reply ends the agent's turn but not the episode, else ``None`` (the
        default: the reply is an answer, calls or invalid). Asked after :meth:`grade_reply`. The message is the
        observation (``obs_role`` "user", reward 0) and joins the messages (``""``: nothing was said, e.g. the
        user left; then :meth:`episode_over` ends the episode); a spent ``max_turns`` budget ends it there.
        BFCL's multi-turn entries bring their next question; τ² hands a text reply to its user simulator."""
        return None

    def run_calls(self, calls: list[dict[str, Any]]) -> CallResults:
        """The call runner: run a reply's tool calls (``{"name", "arguments", "id"}`` each, in order), add each
        result as a ``tool`` message naming its call, count them in :attr:`metrics`, and return the observation.
        Default: :func:`~agentrl.envs.step_loop.run_each`, each call through :meth:`run_tool` until the
        tool-call budget runs out. A benchmark adapter overrides it to run calls as its own harness does (τ²'s
        orchestrator; BFCL's executor, which checks no schema), keeping :attr:`episode_tools` its one tool list."""
        return step_loop.run_each(self, calls)

    def episode_over(self) -> Grade | tuple[float, bool] | None:
        """The grade of an episode the benchmark itself has ended (its own simulation stopped: τ²'s user said
        goodbye, the agent's stop, τ²'s step limit), else ``None`` (the default: only this env's rules end it).
        Asked before a reply is read and after each user turn and each batch of calls; a
        :class:`~agentrl.envs.step_loop.Grade` says the termination (``"answered"``, ``"invalid"``, ``"budget"``)
        and whether it is truncated."""
        return None

    def extra_info(self) -> dict[str, Any]:
        """Env-specific keys merged into the ``info`` of every step (default: none)."""
        return {}

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` tasks of the env's test split (never sampled in training), as a pure function of ``seed``.

        Raises:
            ValueError: the env has no test split (the default).
        """
        raise ValueError(f"{type(self).__name__} has no test split; evaluate it with "
                         "`agentrl eval --tasks-file file.jsonl`")

    def use_call_format(self, name: str) -> bool:
        """Read tool calls in the native format ``name`` (a key of :data:`~agentrl.envs.parsing.CALL_FORMATS`,
        e.g. the one the policy's chat template teaches). Only an env whose parser reads a native format switches;
        an env-chosen format (``<search>`` tags, fenced code) stays. Call it between episodes.

        Returns:
            whether the env now reads ``name``.

        Raises:
            ValueError: an unknown format name.
        """
        if name not in CALL_FORMATS:
            raise ValueError(f"call format must be one of {sorted(CALL_FORMATS)}, got {name!r}")
        calls = getattr(self.parser, "calls", None)
        if not isinstance(calls, tuple(CALL_FORMATS.get(n) for n in CALL_FORMATS)):  # tags, fenced code
            return False
        if type(calls) is not CALL_FORMATS.get(name):
            self.parser.calls = CALL_FORMATS.get(name)()
        return True

    def run_tool(self, parsed: ParsedAction) -> str:
        """Run a parsed tool call through :meth:`ToolSet.call`; count its errors and metrics; return the
        observation."""
        return step_loop.tally(self.metrics, self.episode_tools.call(parsed.name or "", parsed.arguments or {}))

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        task = options.get("task")
        if task is None:
            task = self.sample_task(self.np_random)
        elif not isinstance(task, dict):
            raise TypeError(f"options['task'] must be a dict, got {type(task).__name__}")
        self.task = task
        self.metrics = EpisodeMetrics()
        self._done = False
        self.episode_tools = self.task_tools(task)
        self.on_reset(task)
        self.messages = self.opening_messages(task)
        user = str(self.messages[-1]["content"])
        info = {"messages": list(self.messages), "tools": self.episode_tools.schemas(),
                "task_id": str(task.get("id", ""))}
        return user, info

    def step(self, action: str):
        if self._done:
            obs = "The episode has ended; call reset() to start a new one."
            info = self._info(ParsedAction(kind="invalid", error="step after end of episode"), "user")
            return obs, 0.0, True, False, info
        try:
            return self._step(action)
        except Exception:  # the last line of defence: an env bug must not kill a training run
            logger.exception("%s.step raised; ending the episode with termination='error'", type(self).__name__)
            self.metrics.extra["env_errors"] = self.metrics.extra.get("env_errors", 0) + 1
            return self._finish("Internal environment error; the episode has ended.",
                                ParsedAction(kind="invalid", error="environment error"), reward=0.0,
                                termination="error")

    def _step(self, action: str):
        return step_loop.step(self, action)  # the one step loop, its hooks above (envs/step_loop.py)

    def _finish(self, obs, parsed, *, reward, termination, truncated=False, correct=False, answer=None,
                format_ok=None, obs_role="user"):
        self._done = True
        info = self._info(parsed, obs_role)
        info.update(
            correct=bool(correct),
            format_ok=(termination == "answered") if format_ok is None else format_ok,
            answer=answer,
            termination=termination,
        )
        if self.render_mode == "human":
            print(self.render())
        return obs, float(reward), not truncated, truncated, info

    def _info(self, parsed: ParsedAction, obs_role: str) -> dict[str, Any]:
        info = {
            "parsed": parsed.as_dict(),
            "obs_role": obs_role,
            "metrics": self.metrics.as_dict(),
            "messages": list(self.messages),
            "tools": self.episode_tools.schemas(),
            "task_id": str(self.task.get("id", "")) if self.task else "",
        }
        info.update(self.extra_info())
        return info

    def close(self) -> None:
        """Release what the env holds: its tools' resources (e.g. an MCP session), then Gymnasium's own."""
        if self.episode_tools is not self.tools:
            self.episode_tools.close()
        self.tools.close()
        super().close()

    def render(self) -> str | None:
        text = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)
        if self.render_mode == "ansi":
            return text
        if self.render_mode == "human":
            print(text)
        return None

    # ------------------------------------------------------------------ demonstrations
    def demo(self, task: dict[str, Any]) -> dict[str, Any] | None:
        """Play :meth:`demo_actions` through a fresh episode of ``task``.

        Returns ``{"messages", "tools", "tools_in_prompt", "reward", "correct"}`` (the full transcript of a
        correct solution, ready for SFT; ``tools_in_prompt``: whether its system prompt lists the tools) or
        ``None`` when no solution is known. The episode runs in this env instance, so
        call it between episodes, not during one.
        """
        actions = self.demo_actions(task)
        if actions is None:
            return None
        _, info = self.reset(options={"task": task})
        reward, done = 0.0, False
        for a in actions:
            _, reward, term, trunc, info = self.step(a)
            done = term or trunc
            if done:
                break
        return {"messages": info["messages"], "tools": info["tools"], "tools_in_prompt": self.tools_in_prompt,
                "reward": reward,
                "correct": bool(info.get("correct", False))}

