"""Train on agentrl envs with TRL's ``GRPOTrainer`` through its ``environment_factory`` API.

TRL (>= 1.x, ``trl/trainer/grpo_trainer.py``) documents ``GRPOTrainer(environment_factory=...)`` for agent
training: the factory returns an object whose public methods are the tools (TRL renders their type hints and
Google-style docstrings into the chat template's tool block, parses the model's tool calls with the template's
response parser, and calls the methods), whose ``reset(**row)`` is called with the dataset row before each rollout
and returns text appended to the last user message. This module builds such objects for any registered agentrl
env::

    from trl import GRPOConfig, GRPOTrainer
    from agentrl.algos.integrations.trl_env import tasks_dataset, environment_factory, env_reward_func
    from agentrl.envs.tool_use.env import make_tasks

    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer,            # a chat template that supports tool calling
        reward_funcs=env_reward_func,                    # the env's outcome reward
        train_dataset=tasks_dataset(make_tasks(64, "train")),
        environment_factory=environment_factory("AgentRL/ToolUse-v0"),
        args=GRPOConfig(num_generations=4, ...),
    )

How agentrl's rules carry over:

* **Tools.** Every tool of the env's :class:`~agentrl.envs.tools.ToolSet` becomes a method with the tool's name,
  a signature typed from its JSON schema and a Google-style docstring from its descriptions, so TRL (through
  ``transformers.utils.get_json_schema``) shows the model the env's own schemas. A call is rendered in the env's
  call format and played through ``env.step``: budgets, metrics, output clipping and the never-raise rule are the
  env's. Unknown or malformed arguments reach the env too (the methods take ``**kwargs``) and come back as its
  ``Error: ...`` observation, counted as invalid calls. Each tool call TRL makes is one env step.
* **Prompt.** ``reset`` returns the env's task instructions, its answer-format sentence and the user prompt; the
  tool-call format is the chat template's (TRL parses calls with it), so the env's own call-format text is left out.
* **Reward.** TRL's ``get_reward()`` takes no argument and cannot see the final reply, so the outcome reward comes
  from the reward function :func:`env_reward_func`: it steps each rollout's env with the last assistant
  message's text (the final answer) and returns the env's reward. A rollout that ends without an answer (TRL's
  ``max_tool_calling_iterations`` or ``max_completion_length`` ran out) is stepped with an empty reply, which the
  env scores as invalid. An episode the env already ended (a budget, an env error) keeps its reward.
* **Tasks.** :func:`tasks_dataset` gives one row per task (``task`` column: the task as JSON; TRL repeats a
  row ``num_generations`` times, so a group shares its task). Without a ``task`` in the row (no ``train_dataset``:
  TRL then feeds placeholder rows), the factory draws task ``k`` with ``np.random.default_rng([seed, k])`` and
  hands it to ``group_size`` consecutive resets, so pass ``group_size=num_generations`` (one process only).
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from agentrl.envs import register_env_ref
from agentrl.envs.core import TextEnv

__all__ = ["AgentRLEnvironment", "env_correct_func", "tasks_dataset", "environment_factory",
           "env_reward_func", "tool_method"]

_RESERVED = ("reset", "get_reward")
_JSON_HINTS: dict[str, Any] = {"integer": int, "number": float, "string": str, "boolean": bool, "object": dict}


# ============================================================================================ schemas -> methods


def _hint(schema: dict[str, Any], where: str) -> Any:
    """The Python type hint that ``transformers.utils.get_json_schema`` turns back into ``schema``."""
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        parts = [_hint({**schema, "type": k}, where) for k in kind if k != "null"]
        if not parts:
            raise TypeError(f"{where}: a JSON schema of type {kind!r} has no non-null type")
        hint = parts[0]
        for p in parts[1:]:
            hint = hint | p
        return hint | None if "null" in kind else hint
    if kind == "array":
        items = schema.get("items")
        return list[_hint(items, f"{where}[]")] if isinstance(items, dict) and items else list
    if kind in _JSON_HINTS:
        return _JSON_HINTS[kind]
    raise TypeError(f"{where}: cannot express the JSON schema {json.dumps(schema)[:120]} as a Python type hint "
                    "for TRL's tool rendering")


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """A method ``(self, **arguments) -> str`` whose signature, annotations and docstring describe ``schema`` (an
    OpenAI-format tool schema) to ``transformers.utils.get_json_schema``; calling it runs the tool through the env
    (``self._call``).

    Raises:
        TypeError: a parameter type that has no Python type hint equivalent.
        ValueError: a tool name TRL cannot expose (``reset``, ``get_reward`` or one starting with ``_``).
    """
    fn_schema = schema.get("function", schema)
    name = fn_schema["name"]
    if name in _RESERVED or name.startswith("_") or not name.isidentifier():
        raise ValueError(f"tool {name!r} cannot be a TRL environment method: the name must be a Python identifier "
                         f"other than {_RESERVED} and must not start with '_'")
    params = fn_schema.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    signature_params, annotations, arg_lines = [self_param], {}, []
    for pname, pschema in sorted(props.items(), key=lambda kv: kv[0] not in required):
        hint = _hint(pschema, f"tool {name}, argument {pname}")
        default = inspect.Parameter.empty if pname in required else None
        signature_params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default,
                                                  annotation=hint))
        annotations[pname] = hint
        arg_lines.append(f"    {pname}: {_one_line(pschema.get('description') or pname)}")

    def method(self, **arguments):
        return self._call(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(signature_params)
    method.__annotations__ = annotations
    doc = _one_line(fn_schema.get("description") or name)
    method.__doc__ = f"{doc}\n\nArgs:\n" + "\n".join(arg_lines) if arg_lines else doc
    return method


# ============================================================================================ the environment


class _TaskStream:
    """Task ``k`` drawn with ``np.random.default_rng([seed, k])``, handed out ``group_size`` times in a row."""

    def __init__(self, seed: int, group_size: int):
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self.seed, self.group_size, self.served = int(seed), int(group_size), 0
        self.current: dict[str, Any] | None = None
        self.lock = threading.Lock()

    def next(self, env: TextEnv) -> dict[str, Any]:
        with self.lock:
            k, r = divmod(self.served, self.group_size)
            if r == 0:
                self.current = env.sample_task(np.random.default_rng([self.seed, k]))
            self.served += 1
            return dict(self.current)


class AgentRLEnvironment:
    """One agentrl env as a TRL environment: ``reset(**row)`` plus one method per tool (added by
    :func:`environment_factory` on a subclass per env). Public state after an episode: ``reward``, ``done``,
    ``info`` (the last step's info: ``termination``, ``correct``, ``metrics``, ``messages``, ...)."""

    def __init__(self, env: TextEnv, stream: _TaskStream):
        self._env = env
        self._stream = stream
        self.reward = 0.0
        self.done = True
        self.info: dict[str, Any] = {}

    @property
    def env(self) -> TextEnv:
        return self._env

    def reset(self, **row: Any) -> str:
        """Start an episode on ``row["task"]`` (a dict or its JSON), or on the factory's next task when the row has
        none; returns the text TRL appends to the last user message (instructions, answer format, user prompt).

        Raises:
            ValueError: a ``task`` that is not a JSON object, or one that brings its own tools (TRL offers the
                env class's tools, read once).
        """
        task = row.get("task")
        if isinstance(task, str):
            try:
                task = json.loads(task)
            except json.JSONDecodeError as e:
                raise ValueError(f"row 'task' is not JSON ({e}): {task[:80]!r}") from e
        if task is not None and not isinstance(task, dict):
            raise ValueError(f"row 'task' must be a JSON object, got {type(task).__name__}")
        if task is None:
            task = self._stream.next(self._env)
        user, _ = self._env.reset(options={"task": task})
        if self._env.episode_tools is not self._env.tools:
            raise ValueError(f"task {str(task.get('id', ''))!r} brings its own tools ('tools' key), but TRL's "
                             "environment_factory offers the tools of the env class, read once: train such tasks "
                             "with the rollout_func bridge (agentrl.algos.integrations.trl) or agentrl train")
        self.reward, self.done, self.info = 0.0, False, {}
        parts = [self._env.task_instructions(task), self._env.parser.answer_instructions(), user]
        return "\n\n".join(p for p in parts if p)

    def _step(self, action: str) -> str:
        obs, reward, terminated, truncated, info = self._env.step(action)
        self.info = info
        if terminated or truncated:
            self.done, self.reward = True, float(reward)
        return obs

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """Play one tool call as an env step in the env's call format; the observation (never an exception)."""
        if self.done:
            return self._step("")  # the env's "episode has ended" observation
        try:
            action = self._env.parser.render_call(name, arguments)
        except Exception as e:  # noqa: BLE001  (arguments the call format cannot render: the agent's error)
            action = f"<tool_call>{name}: {e}</tool_call>"
        return self._step(action)

    def _answer(self, text: str) -> float:
        """End the episode with the final reply ``text`` (unless the env already ended it); the env's reward."""
        if not self.done:
            self._step(text)
        return self.reward


#: The names an :class:`AgentRLEnvironment` uses itself (TRL reads ``reward``, ``done`` and ``info``): no tool may
#: take them.
RESERVED = frozenset({"reset", "get_reward", "reward", "done", "info", "env"})


def environment_factory(env: str | Callable[[], Any], *, group_size: int = 1, seed: int = 0,
                        **env_kwargs: Any) -> Callable[[], AgentRLEnvironment]:
    """A zero-argument callable for ``GRPOTrainer(environment_factory=...)`` making a fresh
    :class:`AgentRLEnvironment` over ``gymnasium.make(env, **env_kwargs)`` (or ``env()``) per call.

    Args:
        env: a registered env id, or a factory returning a (possibly wrapped) :class:`~agentrl.envs.core.TextEnv`.
        group_size: how many consecutive resets without a ``task`` share one drawn task (``num_generations``).
        seed: the seed of those drawn tasks.
        env_kwargs: keyword arguments for ``gymnasium.make``.

    Raises:
        TypeError: the env is not a TextEnv, or a tool schema has no Python type hint equivalent.
        ValueError: a tool is named like an attribute of the environment object (:data:`RESERVED`).
    """
    stream = _TaskStream(seed, group_size)
    classes: dict[type, type] = {}

    def make() -> AgentRLEnvironment:
        made = gym.make(register_env_ref(env), **env_kwargs) if isinstance(env, str) else env()
        text_env = getattr(made, "unwrapped", made)
        if not isinstance(text_env, TextEnv):
            raise TypeError(f"environment_factory needs an agentrl TextEnv, {env!r} made a {type(text_env).__name__}")
        cls = classes.get(type(text_env))
        if cls is None:
            taken = sorted(set(text_env.tools.names) & RESERVED)
            if taken:
                raise ValueError(f"{type(text_env).__name__}'s tool(s) {taken} would hide the attributes TRL's "
                                 f"environment object keeps ({', '.join(sorted(RESERVED))}): train this env with the "
                                 "rollout_func bridge (agentrl.algos.integrations.trl) or agentrl train")
            methods = {s["function"]["name"]: tool_method(s) for s in text_env.tools.schemas()}
            cls = classes[type(text_env)] = type(f"{type(text_env).__name__}Environment", (AgentRLEnvironment,),
                                                 {**methods, "__module__": __name__})
        return cls(text_env, stream)

    return make


# ============================================================================================ data and rewards


def tasks_dataset(tasks: Sequence[dict[str, Any]]):
    """A ``datasets.Dataset`` for ``GRPOTrainer(train_dataset=...)`` with :func:`environment_factory`: one row
    per task; ``prompt`` is an empty user message (``reset`` fills it), ``task`` the task as JSON, ``task_id``
    ``str(task.get("id", index))``."""
    from datasets import Dataset

    if not tasks:
        raise ValueError("tasks_dataset needs at least one task")
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            raise TypeError(f"task {i} is a {type(t).__name__}, not a dict")
    return Dataset.from_dict({
        "prompt": [[{"role": "user", "content": ""}] for _ in tasks],
        "task": [json.dumps(t, sort_keys=True, ensure_ascii=False) for t in tasks],
        "task_id": [str(t.get("id", i)) for i, t in enumerate(tasks)],
    })


def _final_text(completion: Any) -> str:
    """The text of the completion's last message when it is an assistant reply without tool calls, else ``""``."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    last = completion[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return ""
    content = last.get("content") or ""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _environments(environments: Any) -> list:
    if environments is None:
        raise ValueError("this reward function needs the rollouts' environments: pass environment_factory="
                         "agentrl.algos.integrations.trl_env.environment_factory(env_id) to GRPOTrainer")
    return list(environments)


def env_reward_func(completions: list, environments: Sequence[Any] | None = None, **kwargs: Any
                       ) -> list[float | None]:
    """TRL reward function: the env's outcome reward of each rollout (``None`` for a rollout of another env)."""
    return [e._answer(_final_text(c)) if isinstance(e, AgentRLEnvironment) else None
            for c, e in zip(completions, _environments(environments), strict=True)]


def env_correct_func(completions: list, environments: Sequence[Any] | None = None, **kwargs: Any
                        ) -> list[float | None]:
    """TRL reward function (for logging with weight 0): 1.0 when the env judged the answer correct, else 0.0."""
    out: list[float | None] = []
    for c, e in zip(completions, _environments(environments), strict=True):
        if isinstance(e, AgentRLEnvironment):
            e._answer(_final_text(c))
            out.append(float(bool(e.info.get("correct", False))))
        else:
            out.append(None)
    return out
