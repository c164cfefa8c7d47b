"""OpenEnv both ways: any registered env served as an OpenEnv server, and any OpenEnv server played as a text env.

OpenEnv (``openenv-core``) is the Gym-style reset/step interface over WebSocket that TRL, SkyRL, ART and Unsloth
consume. The bridge needs it (``pip install -e '.[openenv]'`` in a checkout); ``import agentrl.envs`` never imports it.

**Export (this module).** :func:`make_app` builds OpenEnv's own server app (``create_app``) around
:class:`TextEnvironment`, an OpenEnv ``Environment`` holding one ``gymnasium.make(env_id, **env_kwargs)`` per
session (concurrent sessions allowed); :func:`serve` runs it with uvicorn (``agentrl-env serve AgentRL/ToolUse-v0
--openenv --port 8000``). The action is :class:`TextAction` (``text``: the assistant's whole reply); the observation,
:class:`TextObservation`, carries the observation text, ``reward``, ``done`` and the env's ``info`` as typed fields
(OpenEnv sends no ``metadata`` over the wire). ``reset`` takes ``seed``, ``episode_id``, a pinned ``task`` (or
``options={"task": ...}``), ``tools_in_prompt`` and ``call_format``. A step never becomes a server error: any
``text`` gets an observation.

**Import** (:mod:`agentrl.envs.bridges.openenv_client`). ``gymnasium.make("AgentRL/OpenEnv-v0", url=...)`` plays a
remote OpenEnv server through OpenEnv's ``GenericEnvClient``: one of ours (the remote env parses the reply), an
``MCPEnvironment`` (tool calls parsed here become ``CallToolAction``), or an env whose action is one string field.
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from dataclasses import asdict, is_dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agentrl.envs.capabilities import capabilities
from agentrl.envs.parsing import ParsedAction

try:
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
    from pydantic import Field, field_validator
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the OpenEnv bridge needs openenv-core: pip install openenv-core (in an agentrl-gym "
                      "checkout: pip install -e '.[openenv]')") from e

__all__ = ["AGENTRL_FIELDS", "TextAction", "TextEnvironment", "TextObservation", "make_app", "serve",
           "wait_until_serving"]

logger = logging.getLogger(__name__)

#: Keys of a step's ``info`` that have a typed field of their own in :class:`TextObservation`.
_INFO_FIELDS = ("messages", "tools", "task_id", "metrics", "parsed", "obs_role", "termination", "correct",
                "format_ok", "answer")
#: Observation fields that mark a server made by :func:`make_app` (what the importing side looks for).
AGENTRL_FIELDS = frozenset({"text", "messages", "tools", "task_id", "metrics", "termination"})


class TextAction(Action):
    """One assistant reply, whole: the env parses it (tool calls, a final answer, or invalid)."""

    text: str = Field(default="", description="the assistant's whole reply")

    @field_validator("text", mode="before")
    @classmethod
    def _any_text(cls, value: Any) -> str:
        """Any JSON value is text to the env (it reads it as an invalid reply), never a validation error."""
        return "" if value is None else value if isinstance(value, str) else json.dumps(value, default=str)


class TextObservation(Observation):
    """What the env said back, with the ``info`` of its ``reset``/``step`` as typed fields."""

    text: str = Field(default="", description="the observation: user prompt after reset, tool output or feedback")
    truncated: bool = Field(default=False, description="a budget ended the episode (done is also true)")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI-style messages so far")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="the tools' OpenAI function schemas")
    task_id: str = ""
    metrics: dict[str, int | float] = Field(default_factory=dict, description="the episode's counters so far")
    parsed: dict[str, Any] = Field(default_factory=dict, description="how the reply was read")
    obs_role: str = Field(default="user", description='"tool" when the text is tool output')
    termination: str | None = Field(default=None, description="answered | invalid | budget | error, at the end")
    correct: bool | None = None
    format_ok: bool | None = None
    answer: str | None = None
    rewards: dict[str, float] = Field(default_factory=dict, description="the env's reward levels")
    capabilities: dict[str, bool] = Field(default_factory=dict, description="what the env declares "
                                          "(agentrl.envs.capabilities.CAPABILITIES: grades_cut_replies, ...)")
    extra: dict[str, Any] = Field(default_factory=dict, description="the env's own info keys")


class TextEnvironment(Environment):
    """An OpenEnv ``Environment`` around ``gymnasium.make(env_id, **env_kwargs)``; one per session."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session gets its own env instance; envs share no state

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None):
        super().__init__()
        self.env_id = env_id
        self.env = gym.make(env_id, **(env_kwargs or {}))
        self._state = State(episode_id=None, step_count=0)
        self._started = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None,
              task: dict[str, Any] | None = None, tools_in_prompt: bool | None = None,
              call_format: str | None = None, **kwargs: Any) -> TextObservation:
        """Start an episode: ``task`` (or ``options["task"]``) pins one, else the env draws one with ``seed``.

        Raises:
            ValueError: an argument this reset does not take, or an unknown ``call_format``.
        """
        if kwargs:
            raise ValueError(f"reset() got unknown arguments {sorted(kwargs)}; it takes seed, episode_id, task "
                             "(or options={'task': ...}), tools_in_prompt, call_format")
        env = self.env.unwrapped
        if tools_in_prompt is not None and hasattr(env, "tools_in_prompt"):
            env.tools_in_prompt = bool(tools_in_prompt)
        if call_format is not None and hasattr(env, "use_call_format"):
            env.use_call_format(call_format)
        options = dict(options or {})
        if task is not None:
            options["task"] = task
        text, info = self.env.reset(seed=seed, options=options or None)
        self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
        self._started = True
        return self._observation(text, None, False, False, info)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        """Play one reply; whatever it says (and whatever the env does), the answer is an observation."""
        if not self._started:
            return TextObservation(text="No episode is running; call reset() first.", done=True, reward=0.0,
                                   termination="error", parsed=ParsedAction("invalid", error="no episode").as_dict())
        try:
            obs, reward, terminated, truncated, info = self.env.step(action.text)
        except Exception as e:  # an env outside the TextEnv contract raised: still an observation
            logger.exception("%s.step raised; ending the episode with termination='error'", self.env_id)
            obs, reward, terminated, truncated = f"Internal environment error ({type(e).__name__}).", 0.0, True, False
            info = {"termination": "error", "parsed": ParsedAction("invalid", error="environment error").as_dict()}
        self._state.step_count += 1
        return self._observation(obs, reward, terminated, truncated, info)

    def _observation(self, text, reward, terminated, truncated, info: dict[str, Any]) -> TextObservation:
        info = _jsonable(info)
        rewards = getattr(self.env.unwrapped, "rewards", None)
        return TextObservation(
            text=str(text), reward=None if reward is None else float(reward), done=bool(terminated or truncated),
            truncated=bool(truncated), messages=info.get("messages") or [], tools=info.get("tools") or [],
            task_id=str(info.get("task_id", "")), metrics=info.get("metrics") or {}, parsed=info.get("parsed") or {},
            obs_role=str(info.get("obs_role", "user")), termination=info.get("termination"),
            correct=info.get("correct"), format_ok=info.get("format_ok"), answer=info.get("answer"),
            rewards=asdict(rewards) if is_dataclass(rewards) else {}, capabilities=capabilities(self.env),
            extra={k: v for k, v in info.items() if k not in _INFO_FIELDS})

    @property
    def state(self) -> State:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        import agentrl.envs

        table = {**agentrl.envs.ENVS, **agentrl.envs._ADDED}
        description = table.get(self.env_id, ("", ""))[1] or f"{self.env_id} (agentrl-gym text env)"
        return EnvironmentMetadata(name=self.env_id, description=description, version=_version())

    def close(self) -> None:
        self.env.close()


def make_app(env_id: str, env_kwargs: dict[str, Any] | None = None, *, max_sessions: int = 64):
    """OpenEnv's server app (``create_app``: ``/ws`` sessions, ``/reset``, ``/step``, ``/schema``, ``/health``) for
    ``gymnasium.make(env_id, **env_kwargs)``; up to ``max_sessions`` concurrent WebSocket sessions, one env each.

    Raises:
        gymnasium.error.Error, TypeError, ValueError: the env cannot be made with these arguments (checked now,
            not at the first session).
    """
    from agentrl.envs import register_env_ref

    gym.make(register_env_ref(env_id), **(env_kwargs or {})).close()
    factory = functools.partial(TextEnvironment, env_id, dict(env_kwargs or {}))
    app = create_app(factory, TextAction, TextObservation, env_name=env_id.replace("/", "_"),
                     max_concurrent_envs=max_sessions)
    app.add_middleware(_QuietClose)
    return app


def serve(env_id: str, env_kwargs: dict[str, Any] | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          max_sessions: int = 64, log_level: str = "info") -> None:
    """Serve :func:`make_app` with uvicorn until interrupted (``agentrl-env serve ID --openenv``)."""
    import uvicorn

    uvicorn.run(make_app(env_id, env_kwargs, max_sessions=max_sessions), host=host, port=port, log_level=log_level)


def wait_until_serving(url: str, proc=None, *, timeout_s: float = 120.0) -> None:
    """Return once ``url/health`` answers 200 (an OpenEnv server, ours or another, started elsewhere).

    Raises:
        RuntimeError: ``proc`` (a ``subprocess.Popen``, when given) exited first, or ``timeout_s`` passed.
    """
    import time

    import requests

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if requests.get(f"{url}/health", timeout=1).ok:
                return
        except requests.ConnectionError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with code {proc.returncode} before serving")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}/health did not answer within {timeout_s:.0f} s")
        time.sleep(0.2)


# ============================================================================================ helpers


class _QuietClose:
    """ASGI middleware: a WebSocket session whose client has already gone ends quietly.

    OpenEnv's ``/ws`` handler closes the socket after the client's ``close`` message and lets the
    ``WebSocketDisconnect`` of that late close escape, which uvicorn logs as a traceback for every session that
    ends normally. Nothing is lost by dropping it: the session's env was already closed.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            logger.debug("OpenEnv session closed by its client")


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (numpy scalars and arrays included; anything else as its ``str``)."""
    def default(o: Any) -> Any:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, (np.ndarray, set, frozenset)):
            return list(o.tolist() if isinstance(o, np.ndarray) else o)
        return str(o)

    return json.loads(json.dumps(value, default=default))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentrl-gym")
    except PackageNotFoundError:  # a source checkout that is not installed
        return "0"
