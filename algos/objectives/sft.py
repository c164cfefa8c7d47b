"""SFT cold start (ReTool's stage one): cross-entropy on the action tokens of demonstration trajectories.

A 135M model does not produce a valid tool call zero-shot, so RL has nothing to reinforce; a few dozen
demonstrations teach the format first. Demonstrations come from the environment (``env.demo(task)`` plays a
known-correct solution and returns its messages) or from a JSONL file of conversations, one per line:
``{"messages": [...], "tools": [...]}`` or just the message list.

A conversation is rendered to tokens **exactly as the collector renders a rollout** (the same
:class:`~agentrl.algos.rollout.chat.ChatFormat`: the opening prompt, each assistant reply followed by the end-of-turn
token the policy would sample, then the template's glue up to the next assistant header), so what SFT teaches
is token for token what the policy later produces. The tool schemas follow the collector's one rule
(:func:`~agentrl.algos.rollout.chat.prompt_tools`): they go to a tool-aware template only when the conversation's
system prompt does not list them already, and :func:`demonstration` plays an env's demo with the env set up as
the collector sets up the envs it makes (``tools_in_prompt`` and the call format of the chat template), so a
demo lists its tools once, where a rollout lists them. ``loss_mask`` is 1 on the assistant replies and their
end-of-turn tokens, 0 on everything else::

    loss = -sum_t w_t * log pi(x_t | x_<t)      w_t = 1/N on the N action tokens of the batch (token mean)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.algos.objectives.base import Algorithm, RowGroup
from agentrl.algos.objectives.batching import SeqItem, token_weights
from agentrl.algos.rollout.chat import prompt_tools

logger = logging.getLogger(__name__)


@dataclass
class SFTConfig:
    """SFT cold-start settings (the optimizer settings are the trainer's)."""

    batch_size: int = 8
    """Demonstrations per optimizer step."""
    num_demos: int = 32
    """Distinct demonstrations; training cycles over them (steps x batch_size / num_demos epochs)."""
    data: str | None = None
    """JSONL of conversations to train on instead of env demonstrations (one per line: {"messages", "tools"})."""


def sft_loss(logprobs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted negative log-likelihood: ``-sum(weights * logprobs)`` (weights zero off the action tokens)."""
    return -(logprobs * weights).sum()


def demonstration(env, task: dict[str, Any], fmt) -> dict[str, Any] | None:
    """``env.demo(task)`` with ``env`` set up as the collector sets up the envs it makes for ``fmt``'s template:
    ``tools_in_prompt`` off when the template renders the tools itself, and the template's tool-call format
    (:func:`~agentrl.algos.rollout.envs.configure_text_env`). ``None`` when the env knows no solution."""
    from agentrl.algos.rollout.envs import configure_text_env

    configure_text_env(env, template_tools=fmt.supports_tools, call_format=fmt.call_format)
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


class SFT(Algorithm):
    """The SFT update as the trainer drives it: render conversations, then ``loss`` per micro-batch."""

    config_class = SFTConfig
    needs_rollouts = False

    def prepare(self, examples: list[tuple[list[int], list[int]]]) -> tuple[list[RowGroup], dict[str, float]]:
        """``examples``: ``(token_ids, loss_mask)`` pairs (:func:`render_conversation`); token-mean weights."""
        examples = [e for e in examples if sum(e[1])]
        weights = token_weights([m for _, m in examples], "token_mean") if examples else []
        units = [[SeqItem(list(ids), list(m), [0.0] * len(ids), w)] for (ids, m), w in zip(examples, weights, strict=True)]
        return units, {"examples": len(units)}

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        m = batch["weights"] > 0
        n = int(m.sum())
        return sft_loss(logprobs, batch["weights"]), {
            "loss_tokens": n, "nll": float(-logprobs.detach()[m].mean()) if n else 0.0}
