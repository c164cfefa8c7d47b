"""A remote OpenEnv env played as a text env: ``gymnasium.make("AgentRL/OpenEnv-v0", url=...)``.

:class:`OpenEnvTextEnv` talks to the server through OpenEnv's own ``GenericEnvClient`` (one WebSocket session per
env, opened at the first ``reset``); the serving side, and the overview of both directions, is
:mod:`agentrl.envs.bridges.openenv`. It needs ``openenv-core`` (``pip install -e '.[openenv]'`` in a checkout).

The server's ``/schema`` decides the mode:

* ``"agentrl"`` — a server made by :func:`~agentrl.envs.bridges.openenv.make_app`: the remote env parses the reply;
  reward, ``info`` and messages come back as the remote env made them.
* ``"mcp"`` — an OpenEnv ``MCPEnvironment`` (action ``CallToolAction``): the tools it lists are ``info["tools"]``;
  the reply is parsed here (:class:`~agentrl.envs.parsing.ActionParser`) and each tool call is a ``CallToolAction``
  whose reward and ``done`` the server decides; a final answer goes to ``answer_tool`` when one is named (its reward;
  ``correct`` when positive), else ends the episode with reward 0; an unreadable reply or a spent budget adds
  ``rewards.invalid``, as in any agentrl env.
* ``"text"`` — an env whose action has one string field (OpenEnv's echo template): the whole reply is that field,
  the server's reward and ``done`` are the step's; ``correct`` is a positive final reward.

Tasks: ``{"seed": s}`` (what :meth:`OpenEnvTextEnv.sample_task` draws, so ``agentrl train`` runs on any server)
resets the remote with ``seed=s``, and ``"reset_kwargs"`` adds arguments of the remote ``reset``; an agentrl server
also takes a whole task of its env, pinned remotely. A step never raises: a server that fails or goes away ends the
episode with ``termination="error"`` (and the next ``reset`` reconnects).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import gymnasium as gym
import numpy as np
import requests

from agentrl.envs.bridges.openenv import AGENTRL_FIELDS
from agentrl.envs.capabilities import CAPABILITIES
from agentrl.envs.core import Budgets, EpisodeMetrics, Rewards, TextEnv
from agentrl.envs.mcp_tools import MCPTool
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.tools import ToolResult, ToolSet, format_value

try:
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
    from openenv.core.generic_client import GenericEnvClient
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the OpenEnv bridge needs openenv-core: pip install openenv-core (in an agentrl-gym "
                      "checkout: pip install -e '.[openenv]')") from e

__all__ = ["MODES", "OpenEnvTextEnv"]

logger = logging.getLogger(__name__)

#: Keys of a task that mean "reset the remote with this seed and these arguments".
_SEED_TASK_KEYS = {"id", "seed", "reset_kwargs"}
MODES = ("auto", "agentrl", "mcp", "text")


class OpenEnvTextEnv(TextEnv):
    """A remote OpenEnv env as a text env (``AgentRL/OpenEnv-v0``); the module docstring has the three modes.

    Args:
        url: the server, e.g. ``http://127.0.0.1:8000``.
        mode: ``"auto"`` (read from the server's ``/schema``), ``"agentrl"``, ``"mcp"`` or ``"text"``.
        action_field: text mode: the action field that takes the reply (default: its only string field).
        obs_field: the observation field that is the text (default: its only string field, else the observation
            as JSON).
        instructions: mcp and text modes: what the system prompt says the task is.
        answer_tool: mcp mode: the tool a final answer is sent to (its one required argument gets the answer).
        parser: mcp mode: the reply format (default: Hermes calls, ``Answer: ...``).
        budgets, rewards: mcp and text modes (an agentrl server applies its env's own).
        tools_in_prompt: list the tools in the system prompt (an agentrl server: ``None`` keeps its setting).
        timeout_s: how long one step may take before it ends the episode with ``termination="error"``.
        connect_timeout_s: how long reaching the server may take.

    Raises:
        ValueError: no ``url``, or a server whose action the reply cannot be mapped onto.
        ConnectionError: no OpenEnv server answers at ``url``.
    """

    def __init__(self, url: str | None = None, *, mode: str = "auto", action_field: str | None = None,
                 obs_field: str | None = None, instructions: str | None = None, answer_tool: str | None = None,
                 parser: ActionParser | None = None, budgets: Budgets | None = None, rewards: Rewards | None = None,
                 tools_in_prompt: bool | None = None, timeout_s: float = 60.0, connect_timeout_s: float = 10.0,
                 render_mode: str | None = None):
        if not url:
            raise ValueError("AgentRL/OpenEnv-v0 plays a running OpenEnv server: pass url=..., e.g. "
                             "gym.make('AgentRL/OpenEnv-v0', url='http://127.0.0.1:8000') (serve one of ours with "
                             "`agentrl-env serve AgentRL/ToolUse-v0 --openenv --port 8000`)")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        super().__init__(tools=ToolSet(), parser=parser or ActionParser(), budgets=budgets, rewards=rewards,
                         tools_in_prompt=True, render_mode=render_mode)
        self.url = url.rstrip("/")
        self.obs_field, self.instructions, self.answer_tool = obs_field, instructions, answer_tool
        self.timeout_s, self.connect_timeout_s = float(timeout_s), float(connect_timeout_s)
        self.mode, self.action_field = self._detect(mode, action_field)
        self.tools_in_prompt = tools_in_prompt if self.mode == "agentrl" or tools_in_prompt is not None else True
        self._client: Any = None
        self._broken = False
        self._call_format: str | None = None
        self._remote_tools: list[dict[str, Any]] = []
        self._pending, self._remote_done = 0.0, False

    # ------------------------------------------------------------------ the connection
    def _detect(self, mode: str, action_field: str | None) -> tuple[str, str | None]:
        """The mode and the reply's action field, from the server's ``/schema``."""
        try:
            reply = requests.get(f"{self.url}/schema", timeout=self.connect_timeout_s)
            reply.raise_for_status()
            schema = reply.json()
        except Exception as e:
            raise ConnectionError(f"no OpenEnv server answers at {self.url} ({type(e).__name__}: {e}); start one, "
                                  "e.g. `agentrl-env serve AgentRL/ToolUse-v0 --openenv --port 8000`") from e
        action = schema.get("action") or {}
        props = {k: v for k, v in (action.get("properties") or {}).items() if k != "metadata"}
        if mode == "auto":
            observed = set((schema.get("observation") or {}).get("properties") or {})
            mode = "agentrl" if AGENTRL_FIELDS <= observed else "mcp" if "tool_name" in props or not props else "text"
        if mode != "text":
            return mode, "text" if mode == "agentrl" else None
        strings = sorted(k for k, v in props.items() if v.get("type") == "string")
        field = action_field or (strings[0] if len(strings) == 1 else None)
        others = set(action.get("required") or []) - {field}
        if field not in props or others:
            raise ValueError(f"cannot put a reply into the action {action.get('title', '?')} of {self.url}: its "
                             f"string fields are {strings}, its required fields {sorted(action.get('required') or [])}"
                             "; pass action_field= (one string field, the only required one)")
        return mode, field

    def _connect(self):
        if self._broken:
            self._disconnect()
        if self._client is None:
            client = GenericEnvClient(base_url=self.url, connect_timeout_s=self.connect_timeout_s,
                                      message_timeout_s=self.timeout_s).sync()
            try:
                client.connect()
            except Exception as e:
                client.close()
                raise ConnectionError(f"cannot open an OpenEnv session at {self.url}: {e}") from e
            self._client = client
            if self.mode == "mcp" and not len(self.tools):
                self._list_tools()
        return self._client

    def _disconnect(self) -> None:
        client, self._client, self._broken = self._client, None, False
        if client is not None:
            try:
                client.close()
            except Exception:  # closing is best effort: the server may be gone
                logger.debug("closing the OpenEnv session failed", exc_info=True)

    def _list_tools(self) -> None:
        try:
            listed = self._client.step(ListToolsAction()).observation.get("tools")
        except Exception as e:
            raise ValueError(f"{self.url} lists no MCP tools ({e}); its action takes no reply text either") from e
        tools = ToolSet([MCPTool(name=t["name"], description=t.get("description") or t["name"],
                                 parameters=t.get("input_schema") or {"type": "object", "properties": {}},
                                 fn=self._remote_tool(t["name"])) for t in listed or []])
        if self.answer_tool is not None and self.answer_tool not in tools:
            raise ValueError(f"answer_tool {self.answer_tool!r} is not a tool of {self.url}: {tools.names}")
        self.tools = tools

    def _remote_tool(self, name: str):
        def call(**arguments: Any) -> ToolResult:
            if self._remote_done:
                return ToolResult(f"Error: {name}() not run: the environment has ended the episode", "openenv_done")
            try:
                result = self._client.step(CallToolAction(tool_name=name, arguments=arguments))
            except Exception as e:
                self._broken = True
                return ToolResult(f"Error: {name}() failed: the OpenEnv server did not answer ({type(e).__name__}: "
                                  f"{e})", "openenv_disconnected", {"openenv_errors": 1})
            self._pending += float(result.reward or 0.0)
            self._remote_done = self._remote_done or bool(result.done)
            return _tool_result(name, result.observation, self.obs_field)

        return call

    def close(self) -> None:
        self._disconnect()
        super().close()

    # ------------------------------------------------------------------ tasks and prompts
    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        """A seed for the remote ``reset`` (the remote env draws its own task from it)."""
        seed = int(rng.integers(0, 2**31 - 1))
        return {"id": f"seed-{seed}", "seed": seed}

    def task_instructions(self, task: dict[str, Any]) -> str:
        return self.instructions or super().task_instructions(task)

    def system_prompt(self, task: dict[str, Any]) -> str:
        if self.mode == "text":
            return self.instructions or "Your whole reply is sent to the environment as your action."
        return super().system_prompt(task)

    def use_call_format(self, name: str) -> bool:
        """Read tool calls in the native format ``name`` here (mcp mode), or ask an agentrl server to at the next
        reset (returns True: its env keeps a format of its own choosing, as :meth:`TextEnv.use_call_format`)."""
        switched = super().use_call_format(name)
        if self.mode == "agentrl":
            self._call_format = name
            return True
        return switched

    def _reset_kwargs(self, seed: int | None, task: dict[str, Any] | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        # a seed task: only its seed and reset arguments travel (an agentrl server takes a row of just an id, such as
        # HumanEval-v0's, as the task itself)
        if task is not None and set(task) <= _SEED_TASK_KEYS and (self.mode != "agentrl" or set(task) - {"id"}):
            seed = task["seed"] if task.get("seed") is not None else seed
            kwargs.update(task.get("reset_kwargs") or {})
        elif task is not None:
            if self.mode != "agentrl":
                raise ValueError(f"a task of {self.url} (an OpenEnv env not served by agentrl) holds only "
                                 f"{sorted(_SEED_TASK_KEYS)}: the seed and arguments of its reset; got {sorted(task)}")
            kwargs["task"] = task
        if seed is not None:
            kwargs["seed"] = int(seed)
        if self.mode == "agentrl":
            if self.tools_in_prompt is not None:
                kwargs["tools_in_prompt"] = bool(self.tools_in_prompt)
            if self._call_format is not None:
                kwargs["call_format"] = self._call_format
        return kwargs

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        gym.Env.reset(self, seed=seed)
        task = (options or {}).get("task")
        if task is not None and not isinstance(task, dict):
            raise TypeError(f"options['task'] must be a dict, got {type(task).__name__}")
        kwargs = self._reset_kwargs(seed, task)
        client = self._connect()
        try:
            obs = client.reset(**kwargs).observation
        except Exception as e:
            self._broken = True
            raise ConnectionError(f"the OpenEnv server at {self.url} failed to reset ({e})") from e
        self.metrics, self._done, self._pending, self._remote_done = EpisodeMetrics(), False, 0.0, False
        if self.mode == "agentrl":
            self.task = {**(task or {}), "id": obs.get("task_id", "")}
            self.messages, self._remote_tools = list(obs.get("messages") or []), list(obs.get("tools") or [])
            if set(obs.get("rewards") or {}) == {"correct", "wrong", "invalid"}:
                self.rewards = Rewards(**obs["rewards"])
            for name, value in (obs.get("capabilities") or {}).items():  # the served env's, e.g. grades_cut_replies
                if name in CAPABILITIES:
                    setattr(self, name, bool(value))
            return str(obs.get("text", "")), {"messages": list(self.messages), "tools": self._remote_tools,
                                              "task_id": str(obs.get("task_id", ""))}
        self.task = {"id": (task or {}).get("id") or (f"seed-{kwargs['seed']}" if "seed" in kwargs else ""),
                     **(task or {})}
        user = _observation_text(obs, self.obs_field)
        self.messages = [{"role": "system", "content": self.system_prompt(self.task)},
                         {"role": "user", "content": user}]
        return user, {"messages": list(self.messages), "tools": self.tools.schemas(), "task_id": str(self.task["id"])}

    def step(self, action: str):
        if self.mode != "agentrl" or self._client is None:
            return super().step(action)  # the base class's guard, then _step below
        action = action if isinstance(action, str) else "" if action is None else str(action)
        try:
            result = self._client.step({"text": action})
        except Exception as e:
            self._broken = True
            metrics = {**self.metrics.as_dict(), "openenv_errors": 1}
            info = {"parsed": ParsedAction("invalid", error="OpenEnv server error").as_dict(), "obs_role": "user",
                    "metrics": metrics, "messages": list(self.messages), "tools": self._remote_tools,
                    "task_id": str(self.task.get("id", "")) if self.task else "", "correct": False,
                    "format_ok": False, "answer": None, "termination": "error"}
            return _lost_text(self.url, e), 0.0, True, False, info
        o = result.observation
        info = {"parsed": o.get("parsed") or {}, "obs_role": o.get("obs_role", "user"),
                "metrics": o.get("metrics") or {},
                "messages": o.get("messages") or [], "tools": o.get("tools") or [], "task_id": o.get("task_id", ""),
                **(o.get("extra") or {})}
        if o.get("termination") is not None:
            info.update({k: o.get(k) for k in ("correct", "format_ok", "answer", "termination")})
        self.messages = list(info["messages"])
        self.metrics = _metrics(info["metrics"])
        truncated = bool(o.get("truncated"))
        return str(o.get("text", "")), float(result.reward or 0.0), bool(result.done) and not truncated, truncated, info

    def _step(self, action: str):
        if self._client is None or self._broken:
            return self._finish(_lost_text(self.url, ConnectionError("the session was lost")),
                                ParsedAction("invalid", error="OpenEnv server error"), reward=0.0, termination="error")
        if self.mode == "text":
            return self._text_step(action if isinstance(action, str) else "" if action is None else str(action))
        self._pending, self._remote_done = 0.0, False
        obs, reward, terminated, truncated, info = super()._step(action)  # parse; tools run remotely; score answers
        if terminated or truncated:
            return obs, reward + self._pending, terminated, truncated, info
        if self._remote_done:  # the server ended the episode after a tool call (a submit tool, its own budget)
            return self._finish(obs, ParsedAction(**info["parsed"]), reward=self._pending, termination="answered",
                                correct=self._pending > 0, obs_role="tool")
        return obs, self._pending, False, False, info

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        """The reward the server gives ``answer`` through ``answer_tool``; 0 (not correct) without one."""
        if self.answer_tool is None:
            return 0.0, False
        params = self.tools[self.answer_tool].parameters
        names = list(params.get("required") or params.get("properties") or ["answer"])
        result = self.tools.call(self.answer_tool, {names[0]: answer})
        reward, self._pending = self._pending, 0.0
        return reward, result.ok and reward > 0

    def _text_step(self, action: str):
        self.metrics.turns += 1
        self.messages.append({"role": "assistant", "content": action})
        parsed = ParsedAction("answer", answer=action)
        try:
            result = self._client.step({self.action_field: action})
        except Exception as e:
            self._broken = True
            self.metrics.extra["openenv_errors"] = self.metrics.extra.get("openenv_errors", 0) + 1
            return self._finish(_lost_text(self.url, e), parsed, reward=0.0, termination="error")
        obs, reward = _observation_text(result.observation, self.obs_field), float(result.reward or 0.0)
        if obs:
            self.messages.append({"role": "user", "content": obs})
        if result.done:
            return self._finish(obs, parsed, reward=reward, termination="answered", correct=reward > 0, answer=action)
        if self.metrics.turns >= self.budgets.max_turns:
            return self._finish(obs, parsed, reward=reward, termination="budget", truncated=True)
        return obs, reward, False, False, self._info(parsed, "user")


# ============================================================================================ helpers


def _metrics(d: dict[str, Any]) -> EpisodeMetrics:
    base = {k: d[k] for k in ("turns", "tool_calls", "tool_errors", "invalid_calls", "tool_latency_s") if k in d}
    return EpisodeMetrics(**base, extra={k: v for k, v in d.items() if k not in base})


def _observation_text(obs: dict[str, Any], field: str | None) -> str:
    """The text of a remote observation: ``field``, else its one string field, else the whole of it as JSON."""
    if field is not None:
        value = obs.get(field, "")
        return value if isinstance(value, str) else format_value(value)
    strings = [v for v in obs.values() if isinstance(v, str)]
    if len(strings) == 1:
        return strings[0]
    return json.dumps(obs, ensure_ascii=False, sort_keys=True, default=str) if obs else ""


def _tool_result(name: str, obs: dict[str, Any], field: str | None) -> ToolResult:
    """A ``CallToolObservation`` (as JSON) as a tool result: its error, its text blocks, or its data."""
    if "tool_name" not in obs:  # the env answered with an observation of its own
        return ToolResult(_observation_text(obs, field))
    error = obs.get("error")
    if error:
        kind = f"openenv_{error.get('error_type', 'error')}"
        return ToolResult(f"Error: {name}() failed: {error.get('message', '')}", kind, {"openenv_tool_errors": 1})
    result = obs.get("result")
    if isinstance(result, dict):
        texts = [b.get("text", "") for b in result.get("content") or [] if isinstance(b, dict) and "text" in b]
        text = "\n".join(texts) if texts else format_value(result.get("data", result.get("structured_content")))
        if result.get("is_error") or result.get("isError"):
            return ToolResult(f"Error: {name}() failed: {text}", "openenv_tool_error", {"openenv_tool_errors": 1})
        return ToolResult(text)
    return ToolResult("" if result is None else format_value(result))


def _lost_text(url: str, e: BaseException) -> str:
    return f"The OpenEnv server at {url} did not answer ({type(e).__name__}: {e}); the episode has ended."
