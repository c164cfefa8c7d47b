"""Demonstrations as training rows: an env's ``demo(task)`` or a JSONL conversation, rendered token-exactly.

A conversation is rendered to tokens **exactly as the collector renders a rollout** (the same
:class:`~agentrl.algos.rollout.chat.ChatFormat`: the opening prompt, each assistant reply followed by the end-of-turn
token the policy would sample, then the template's glue up to the next assistant header), so what an offline
algorithm (SFT) teaches is token for token what the policy later produces. The tool schemas follow the
collector's one rule (:func:`~agentrl.algos.rollout.chat.prompt_tools`), and :func:`demonstration` plays an
env's demo with the env set up as the collector sets up the envs it makes, so a demo lists its tools once, where
a rollout lists them. ``loss_mask`` is 1 on the assistant replies and their end-of-turn tokens, 0 elsewhere.
:class:`Demonstrations` is what the trainer hands an offline algorithm: example ``k`` of the run, cached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl.algos.rollout.chat import prompt_tools


def demonstration(env, task: dict[str, Any], fmt) -> dict[str, Any] | None:
    """``env.demo(task)`` with ``env`` set up as the collector sets up the envs it makes for ``fmt``'s
    template: ``tools_in_prompt`` off when the template renders the tools itself, and the template's tool-call
    format (:func:`~agentrl.algos.rollout.env_factory.configure_chat_env`). ``None`` when the env knows no
    solution."""
    from agentrl.algos.rollout.env_factory import configure_chat_env

    configure_chat_env(env, template_tools=fmt.supports_tools, call_format=fmt.call_format)
    return env.demo(task)


def render_conversation(fmt, messages: list[dict[str, Any]], tools: list[dict] | None = None, *,
                        tools_in_prompt: bool = False) -> tuple[list[int], list[int]]:
    """``(token_ids, loss_mask)`` of a conversation, rendered as the collector renders a rollout.

    Args:
        fmt: a :class:`~agentrl.algos.rollout.chat.ChatFormat` for the tokenizer.
        messages: system/user opening messages, then assistant replies, each followed by its observation
            messages (tool or user; one per call of a reply with several) except the last.
        tools: the tool schemas.
        tools_in_prompt: the system prompt lists the tools already (a demo's ``tools_in_prompt``); the template
            then gets none (:func:`~agentrl.algos.rollout.chat.prompt_tools`).

    Raises:
        ValueError: no assistant message, two assistant messages in a row, or an opening that is not followed
            by an assistant message.
    """
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        raise ValueError("a demonstration needs at least one assistant message")
    conv = fmt.start(messages[:first], prompt_tools(fmt.supports_tools, tools, tools_in_prompt))
    ids = list(conv.prompt_ids)
    mask = [0] * len(ids)
    stop = fmt.stop_token_ids[0]
    k = first
    while k < len(messages):
        reply = messages[k]
        completion = fmt.encode(reply["content"]) + [stop]
        ids += completion
        mask += [1] * len(completion)
        end = k + 1
        while end < len(messages) and messages[end]["role"] != "assistant":
            end += 1
        if end < len(messages) and end == k + 1:
            raise ValueError(f"two assistant messages in a row at position {k + 1}")
        if end > k + 1:
            glue = conv.glue(completion, [dict(m) for m in messages[k + 1:end]])
            ids += glue
            mask += [0] * len(glue)
        k = end
    return ids, mask


def load_conversations(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL of conversations: each line ``{"messages": [...], "tools": [...]}`` or a bare message list."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON ({e})") from None
            if isinstance(row, list):
                row = {"messages": row}
            if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
                raise ValueError(f"{path}:{lineno}: expected a message list or an object with 'messages'")
            out.append({"messages": row["messages"], "tools": row.get("tools"),
                        "tools_in_prompt": bool(row.get("tools_in_prompt", False))})
    if not out:
        raise ValueError(f"{path}: no conversations")
    return out


class Demonstrations:
    """Example ``k`` of an offline run: demonstration ``k mod n`` as ``(token_ids, loss_mask)`` (rendered once).

    Args:
        tokenizer: the trained model's tokenizer (its chat template renders the conversations).
        conversations: :func:`load_conversations`' rows to cycle over; None: the env's own demonstrations.
        tasks: the run's task source (``.env``, ``.task(k)``), for env demonstrations.
        num_demos: distinct env demonstrations to cycle over.
        env_id: named in errors.
    """

    def __init__(self, tokenizer, *, conversations: list[dict[str, Any]] | None = None, tasks=None,
                 num_demos: int = 32, env_id: str = ""):
        self.tokenizer, self.conversations, self.tasks = tokenizer, conversations, tasks
        self.num_demos, self.env_id = num_demos, env_id
        self._fmt = None
        self._cache: dict[int, tuple[list[int], list[int]]] = {}

    def __len__(self) -> int:
        return len(self.conversations) if self.conversations is not None else self.num_demos

    def __getitem__(self, k: int) -> tuple[list[int], list[int]]:
        i = k % len(self)
        if i not in self._cache:
            if self._fmt is None:
                from agentrl.algos.rollout.chat import ChatFormat

                self._fmt = ChatFormat(self.tokenizer)
            conv = self.conversations[i] if self.conversations is not None else self._demo(i)
            self._cache[i] = render_conversation(self._fmt, conv["messages"], conv.get("tools"),
                                                 tools_in_prompt=conv.get("tools_in_prompt", False))
        return self._cache[i]

    def _demo(self, i: int) -> dict[str, Any]:
        env = self.tasks.env if self.tasks is not None else None
        if env is None or not hasattr(env, "demo"):
            raise ValueError(f"{self.env_id} cannot produce demonstrations; pass sft.data=conversations.jsonl")
        # Scan forward from task i for one with a known solution (deterministic: the same i, the same demo).
        for k in range(i, i + 1000 * self.num_demos, self.num_demos):
            demo = demonstration(env, self.tasks.task(k), self._fmt)  # set up as the collector would
            if demo is not None and demo.get("correct", True):
                return demo
        raise ValueError(f"{self.env_id} produced no correct demonstration; pass sft.data=conversations.jsonl")


class TaskDemonstrations:
    """The demonstration of a given task, for a rollout algorithm that consults them (GRPO's ``guidance``).

    ``get(task)`` plays the env's ``demo(task)`` (set up as the collector sets up its envs, so the opening prompt
    is token for token the rollouts') and returns ``(token_ids, loss_mask, reward)``, or None when the env knows
    no correct solution of the task. Results are cached per task.

    Args:
        tokenizer: the trained model's tokenizer.
        tasks: the run's task source; its ``.env`` plays the demonstrations.
        env_id: named in errors.
    """

    def __init__(self, tokenizer, tasks, env_id: str = ""):
        env = getattr(tasks, "env", None)
        if env is None or not hasattr(env, "demo"):
            raise ValueError(f"{env_id or 'this run'} cannot produce demonstrations (an env mixture, a task file "
                             "without an env, or an env without demo()): demonstration guidance needs one env "
                             "with demo(); set grpo.guidance=none")
        self.tokenizer, self.env, self.env_id = tokenizer, env, env_id
        self._fmt = None
        self._cache: dict[str, tuple[list[int], list[int], float] | None] = {}

    def get(self, task: dict[str, Any]) -> tuple[list[int], list[int], float] | None:
        key = json.dumps(task, sort_keys=True, default=str)
        if key not in self._cache:
            if self._fmt is None:
                from agentrl.algos.rollout.chat import ChatFormat

                self._fmt = ChatFormat(self.tokenizer)
            demo = demonstration(self.env, task, self._fmt)
            if demo is None or not demo.get("correct", True):
                self._cache[key] = None
            else:
                ids, mask = render_conversation(self._fmt, demo["messages"], demo.get("tools"),
                                                tools_in_prompt=demo.get("tools_in_prompt", False))
                self._cache[key] = (ids, mask, float(demo["reward"]))
        return self._cache[key]


DEMO_SEEDS = 64
"""Tasks :func:`check_demonstrations` draws, looking for one the env can demonstrate."""


def check_demonstrations(env_id: str, env_kwargs: dict[str, Any], fix: str) -> None:
    """Refuse, before any model loads, an SFT cold start on an env that demonstrates none of its first
    :data:`DEMO_SEEDS` tasks (your own dataset rows without ``calls``, or an env without ``demo``); the message
    names ``fix``, the other way to a cold start. Raises ``ValueError``."""
    import gymnasium as gym

    env = gym.make(env_id, **dict(env_kwargs or {}))
    try:
        base = env.unwrapped
        if not callable(getattr(base, "demo", None)):
            raise ValueError(f"{env_id} cannot produce demonstrations (no demo(task)); the SFT cold start needs "
                             f"them: pass {fix}")
        for seed in range(DEMO_SEEDS):
            env.reset(seed=seed)
            if base.demo(base.task) is not None:
                return
    finally:
        env.close()
    raise ValueError(f"{env_id} demonstrated none of {DEMO_SEEDS} tasks: the SFT cold start needs dataset rows "
                     f"with 'calls' (the tool calls that solve them, [[name, arguments], ...]; docs/own-tools.md), "
                     f"or {fix}")
