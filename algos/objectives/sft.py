"""SFT cold start (ReTool's stage one): cross-entropy on the action tokens of demonstration trajectories.

A 135M model does not produce a valid tool call zero-shot, so RL has nothing to reinforce; a few dozen
demonstrations teach the format first. Demonstrations come from the environment (``env.demo(task)`` plays a
known-correct solution and returns its messages) or from a JSONL file of conversations, one per line:
``{"messages": [...], "tools": [...]}`` or just the message list.

Conversations become ``(token_ids, loss_mask)`` rows as the collector renders a rollout
(:mod:`~agentrl.algos.rollout.demonstrations`): ``loss_mask`` is 1 on the assistant replies and their
end-of-turn tokens, 0 on everything else::

    loss = -sum_t w_t * log pi(x_t | x_<t)      w_t = 1/N on the N action tokens of the batch (token mean)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrl.algos.objectives.base import Algorithm, LazyModule, RowGroup
from agentrl.algos.objectives.batching import TrainRow, token_weights
from agentrl.algos.rollout.demonstrations import Demonstrations, load_conversations

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # the config class is read without torch (TrainConfig's section)

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


class SFT(Algorithm):
    """The SFT update as the trainer drives it: render conversations, then ``loss`` per micro-batch."""

    config_class = SFTConfig
    needs_rollouts = False

    def offline_data(self, tokenizer, tasks, env_id: str) -> Demonstrations:
        """``sft.data``'s conversations, else ``num_demos`` of the env's own demonstrations, rendered on use."""
        conversations = load_conversations(self.config.data) if self.config.data else None
        return Demonstrations(tokenizer, conversations=conversations, tasks=tasks, num_demos=self.config.num_demos,
                              env_id=env_id)

    def prepare(self, examples: list[tuple[list[int], list[int]]]) -> tuple[list[RowGroup], dict[str, float]]:
        """``examples``: ``(token_ids, loss_mask)`` pairs (:meth:`offline_data`'s); token-mean weights."""
        examples = [e for e in examples if sum(e[1])]
        weights = token_weights([m for _, m in examples], "token_mean") if examples else []
        units = [[TrainRow(list(ids), list(m), [0.0] * len(ids), w)]
                 for (ids, m), w in zip(examples, weights, strict=True)]
        return units, {"examples": len(units)}

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        m = batch["weights"] > 0
        n = int(m.sum())
        return sft_loss(logprobs, batch["weights"]), {
            "loss_tokens": n, "nll": float(-logprobs.detach()[m].mean()) if n else 0.0}
