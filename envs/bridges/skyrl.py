"""Our environments in SkyRL-gym's registry, so SkyRL's generator trains on them (docs/bridges/skyrl.md).

::

    from agentrl.envs.bridges.skyrl import register_skyrl_envs, skyrl_rows
    import skyrl_gym

    register_skyrl_envs()                       # every AgentRL/* id, and the ids added with register_env
    env = skyrl_gym.make("AgentRL/ToolUse-v0", env_config={"max_turns": 4}, extras=skyrl_rows(
        "AgentRL/ToolUse-v0", tasks)[0])        # the way SkyRL's generator makes an env for a dataset row
    chat, meta = env.init(prompt)               # the env's own system + user messages; meta["tools"]
    out = env.step(reply)                       # out["reward"], out["done"], out["observations"], out["metadata"]

How SkyRL's contract maps onto ours:

* **Names.** An env is registered in ``skyrl_gym`` under its gymnasium id (``"AgentRL/ToolUse-v0"``), the
  ``env_class`` a SkyRL dataset row names. SkyRL builds envs in its own worker processes, so call
  :func:`register_skyrl_envs` where those run (SkyRL's own examples register in their Ray entrypoint).
* **Construction.** ``skyrl_gym.make(id, env_config=..., extras=row)``: ``env_config`` (SkyRL's per-env config
  block, ``environment.skyrl_gym.<id>``) holds the ``gymnasium.make`` keyword arguments of our env; ``extras``
  is the dataset row (everything but ``prompt`` and ``env_class``).
* **The task.** The row pins our task with ``task`` (a dict, or the JSON text :func:`skyrl_rows` writes, since
  Parquet columns want one type), also read from ``extra_info.task``; without one the env draws a task seeded
  by ``seed`` (or ``extra_info.seed``). ``init`` ignores the row's ``prompt`` and returns the env's own system
  and user messages for that task: the env is the authority on its prompt (its tool descriptions included).
* **Steps.** ``step(reply)`` is our ``step``: the reward, ``done = terminated or truncated``, and as
  observations the messages our env appended after the reply (one ``tool`` message per call, with its
  ``name`` and ``tool_call_id``, so a chat template renders each as our own collector does); ``[]`` once done.
  ``metadata`` is our step ``info`` (``metrics``, ``parsed``, ``tools``, ``task_id``; at the end ``correct``,
  ``format_ok``, ``answer``, ``termination``) without the message list, plus ``obs``, ``terminated``,
  ``truncated``. Any reply text yields an observation: our ``step`` never raises.
* **Metrics.** :meth:`AgentRLSkyRLEnv.get_metrics` (what SkyRL logs per episode) is the episode's
  ``info["metrics"]`` plus ``correct`` and ``format_ok`` as 0/1; SkyRL averages them across episodes.

``skyrl_gym`` is imported when this module is, and nothing in :mod:`agentrl.envs` imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

try:
    import skyrl_gym
    from omegaconf import OmegaConf  # a dependency of skyrl-gym: its configs arrive as OmegaConf objects
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as e:  # pragma: no cover - the [skyrl] extra is part of the test install
    raise ImportError("agentrl.envs.bridges.skyrl needs SkyRL-gym: pip install skyrl-gym (in an "
                      "agentrl-gym checkout: pip install -e '.[skyrl]')") from e

import agentrl.envs
from agentrl.envs import make_text_env
from agentrl.envs.capabilities import capabilities
from agentrl.envs.core import TextEnv

__all__ = ["AgentRLSkyRLEnv", "register_skyrl_envs", "skyrl_rows"]

#: What :func:`register_skyrl_envs` registers: this class, by import path (SkyRL's workers import it).
ENTRY_POINT = f"{__name__}:AgentRLSkyRLEnv"


def _plain(value: Any) -> Any:
    """``value`` as plain dicts and lists (SkyRL hands over OmegaConf configs; ``gymnasium.make`` wants plain
    keyword arguments)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _row_task(extras: Mapping[str, Any]) -> dict[str, Any] | None:
    """The task a SkyRL row pins (``task``, else ``extra_info.task``), decoded from JSON text if need be."""
    extra_info = extras.get("extra_info") or {}
    task = extras.get("task")
    if task is None and isinstance(extra_info, Mapping):
        task = extra_info.get("task")
    if task is None:
        return None
    task = _plain(task)
    if isinstance(task, str):
        try:
            task = json.loads(task)
        except json.JSONDecodeError as e:
            raise ValueError(f"the row's task is not JSON ({e}); write rows with skyrl_rows()") from e
    if not isinstance(task, dict):
        raise TypeError(f"the row's task must be a dict or its JSON text, got {type(task).__name__}")
    return task


def _row_seed(extras: Mapping[str, Any]) -> int | None:
    extra_info = extras.get("extra_info") or {}
    seed = extras.get("seed", extra_info.get("seed") if isinstance(extra_info, Mapping) else None)
    return None if seed is None else int(seed)


class AgentRLSkyRLEnv(BaseTextEnv):
    """A SkyRL-gym text env that hosts one of our registered envs for one episode (see the module docstring).

    Args:
        env_config: SkyRL's per-env config: the ``gymnasium.make`` keyword arguments of the env.
        extras: the SkyRL dataset row (``task`` or ``extra_info.task`` pins a task; ``seed`` seeds an
            unpinned draw).
        env_id: the gymnasium id of the hosted env (set by :func:`register_skyrl_envs`).
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, *,
                 env_id: str = "AgentRL/ToolUse-v0"):
        super().__init__()
        extras = dict(_plain(extras) or {})
        kwargs = dict(_plain(env_config) or {})
        self.env_id = env_id
        self.env: TextEnv = make_text_env(env_id, kwargs)  # bare: its step never raises, even before init
        self.task = _row_task(extras)
        self.seed = _row_seed(extras)
        self.max_turns = self.env.budgets.max_turns
        self._info: dict[str, Any] = {}
        self._seen = 0  # messages of our env already in SkyRL's chat history
        for name, value in capabilities(self.env).items():  # the hosted env's (agentrl.envs.capabilities.CAPABILITIES)
            setattr(self, name, value)

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset our env on the row's task; return its system and user messages (the row's ``prompt`` is
        replaced) and ``{"tools", "task_id", "task", "capabilities"}`` (the hosted env's declared capabilities,
        also attributes of this env: ``grades_cut_replies``, ...)."""
        options = {"task": self.task} if self.task is not None else None
        _, info = self.env.reset(seed=self.seed, options=options)
        self.turns = 0
        self._info = info
        self._seen = len(info["messages"])
        metadata = {"tools": info["tools"], "task_id": info["task_id"], "task": self.env.task,
                    "capabilities": capabilities(self.env)}
        return [dict(m) for m in info["messages"]], metadata

    def step(self, action: str) -> BaseTextEnvStepOutput:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self._info = info
        done = bool(terminated or truncated)
        messages = info.get("messages") or []
        # What our env appended after the assistant turn SkyRL already holds: the tool results.
        new = [dict(m) for m in messages[self._seen + 1:]] if len(messages) > self._seen else []
        self._seen = len(messages)
        if done:
            observations: list[dict[str, Any]] = []
        elif new:
            observations = new
        else:
            observations = [{"role": info.get("obs_role", "user"), "content": obs}]
        metadata = {k: v for k, v in info.items() if k != "messages"}
        metadata.update(obs=obs, terminated=bool(terminated), truncated=bool(truncated))
        return BaseTextEnvStepOutput(observations=observations, reward=float(reward), done=done,
                                     metadata=metadata, postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        """The episode's counters (``info["metrics"]``) plus ``correct`` and ``format_ok`` as 0/1."""
        metrics = {k: float(v) for k, v in (self._info.get("metrics") or {}).items()
                   if isinstance(v, (int, float))}
        metrics["correct"] = float(bool(self._info.get("correct", False)))
        metrics["format_ok"] = float(bool(self._info.get("format_ok", False)))
        return metrics

    def close(self) -> None:
        self.env.close()


def _our_ids() -> list[str]:
    """The built-in ids, then those added with ``register_env`` or an entry point (``agentrl-env list``)."""
    return list({**agentrl.envs.ENVS, **agentrl.envs._ADDED})


def register_skyrl_envs(ids: Iterable[str] | None = None) -> list[str]:
    """Register envs in ``skyrl_gym``'s registry under their gymnasium ids; return the ids registered.

    Args:
        ids: which gymnasium ids (default: every ``AgentRL/*`` id and every id added with
            :func:`~agentrl.envs.register_env` or the ``agentrl.envs`` entry point).

    Calling it again is harmless (an id already registered by this bridge is skipped).

    Raises:
        gymnasium.error.Error: an id gymnasium does not know.
        ValueError: ``skyrl_gym`` already has a different env under one of the ids.
    """
    chosen = _our_ids() if ids is None else list(ids)
    for env_id in chosen:
        gym.spec(env_id)  # an unknown id fails here, with gymnasium's message, not at SkyRL's first make
        spec = skyrl_gym.registry.get(env_id)
        if spec is not None:
            if spec.entry_point in (ENTRY_POINT, AgentRLSkyRLEnv) and spec.kwargs.get("env_id") == env_id:
                continue
            raise ValueError(f"skyrl_gym already registers another env as {env_id!r} ({spec.entry_point}); "
                             "deregister it first (skyrl_gym.envs.registration.deregister)")
        skyrl_gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"env_id": env_id})
    return chosen


def skyrl_rows(env_id: str, tasks: Sequence[dict[str, Any]], env_kwargs: Mapping[str, Any] | None = None, *,
               data_source: str = "agentrl") -> list[dict[str, Any]]:
    """SkyRL dataset rows (``prompt``, ``env_class``, ``task``, ``reward_spec``, ``extra_info``, ``data_source``)
    that pin ``tasks`` of ``env_id``; write them to Parquet for SkyRL's ``data.train_data``.

    ``prompt`` is the env's own opening messages for each task (what ``init`` returns), ``task`` the task as
    JSON text, ``reward_spec`` ``{"method": "env", "ground_truth": <the answer, as text>}`` (for reading: the env
    scores).
    """
    env = make_text_env(env_id, dict(env_kwargs or {}))
    try:
        rows = []
        for i, task in enumerate(tasks):
            if not isinstance(task, dict):
                raise TypeError(f"task {i} is a {type(task).__name__}, not a dict")
            _, info = env.reset(options={"task": task})
            answer = task.get("answer")
            rows.append({
                "data_source": data_source,
                "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
                "env_class": env_id,
                "task": json.dumps(task, ensure_ascii=False, default=_json_default),
                "reward_spec": {"method": "env", "ground_truth": answer if answer is None or isinstance(answer, str)
                                else json.dumps(answer, default=_json_default)},
                "extra_info": {"task_id": info["task_id"], "index": i},
            })
        return rows
    finally:
        env.close()


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays in a task as plain JSON values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"a task value of type {type(value).__name__} is not JSON-serialisable")
