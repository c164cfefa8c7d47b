"""Online DPO (as ToolBrain builds it): chosen / rejected pairs from a group of trajectories, ranked by reward.

For each group of ``G`` trajectories of one task: sort by reward (best first), take ``k = G // 2``; the ``i``-th
best is *chosen* against the ``(i + k)``-th best *rejected*, for ``i < k``; a pair whose rewards are equal is
dropped (no preference). With ``log pi(y)`` the sum of the policy's logprobs over the action tokens of ``y``
(``loss_mask`` = 1: tool output and template markup excluded) and ``pi_ref`` the same model with its LoRA
adapter disabled::

    h     = beta * [ (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)) ]
    L     = -log sigmoid(h)                 averaged over the P pairs of the batch (weight 1/P each)

Metrics: ``dpo/accuracy`` (fraction of pairs with h > 0) and ``dpo/margin`` (mean h / beta).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class DPOConfig:
    """Online DPO hyper-parameters."""

    beta: float = 0.1
    """Inverse temperature of the implicit reward: larger = stay closer to the reference."""
    epochs: int = 1
    """Optimizer steps on each batch of pairs."""


def make_pairs(rewards: Sequence[float], group_ids: Sequence[int]) -> list[tuple[int, int]]:
    """``(chosen, rejected)`` index pairs: within each group, rank ``i`` vs rank ``i + G//2`` (equal rewards never pair).

    Sorting is stable (ties keep input order), so the pairing is deterministic.
    """
    groups: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        groups[int(g)].append(i)
    pairs = []
    for members in groups.values():
        ranked = sorted(members, key=lambda i: -float(rewards[i]))
        k = len(ranked) // 2
        for i in range(k):
            w, lose = ranked[i], ranked[i + k]
            if float(rewards[w]) > float(rewards[lose]):
                pairs.append((w, lose))
    return pairs


def sequence_logprob(token_logprobs: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Sum of the per-token logprobs over the action tokens: ``[B, T] -> [B]``."""
    return (token_logprobs * loss_mask).sum(-1)


def dpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
             beta: float, pair_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO sigmoid loss on sequence logprobs (all ``[P]``); ``pair_weights`` default to ``1/P`` each."""
    h = beta * ((chosen - ref_chosen) - (rejected - ref_rejected))
    if pair_weights is None:
        pair_weights = torch.full_like(h, 1.0 / h.numel())
    loss = (-F.logsigmoid(h) * pair_weights).sum()
    stats = {"dpo/accuracy": float((h > 0).float().mean()), "dpo/margin": float((h / beta).mean()),
             "pairs": int(h.numel())}
    return loss, stats
