"""Online DPO (as ToolBrain builds it): chosen / rejected pairs from a group of trajectories, ranked by reward.

For each group of ``G`` trajectories of one task: sort by reward (best first), take ``k = G // 2``; the ``i``-th
best is *chosen* against the ``(i + k)``-th best *rejected*, for ``i < k``; a pair whose rewards are equal is
dropped (no preference). With ``log pi(y)`` the sum of the policy's logprobs over the action tokens of ``y``
(``loss_mask`` = 1: tool output and template markup excluded) and ``pi_ref`` the policy as it was when the
training stage started (:mod:`agentrl.algos.training.reference`)::

    h     = beta * [ (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)) ]
    L     = -log sigmoid(h)                 averaged over the P pairs of the batch (weight 1/P each)

Both logprobs are of the model's own distribution (temperature 1, ``uses_rollout_temperature = False``),
whatever the rollout temperature: the implicit reward ``beta * log(pi / pi_ref)`` is defined on the policy
itself, as in TRL's online DPO. Trajectories that ended with an env error (``termination == "error"``) never
enter a pair (``train/env_error_trajectories``).

Metrics: ``dpo_accuracy`` (fraction of pairs with h > 0) and ``dpo_margin`` (mean h / beta), averaged over
pairs across micro-batches (``mean_weight = "pairs"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrl.algos.objectives.base import Algorithm, LazyModule, RowGroup
from agentrl.algos.objectives.batching import TrainRow, env_errors
from agentrl.algos.rollout.trajectory import group_indices

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = LazyModule("torch")  # the config class is read without torch (TrainConfig's section)
    F = LazyModule("torch.nn.functional")


@dataclass
class DPOConfig:
    """Online DPO hyper-parameters."""

    beta: float = 0.1
    """Inverse temperature of the implicit reward: larger = stay closer to the reference."""
    epochs: int = 1
    """Optimizer steps on each batch of pairs."""


def make_pairs(rewards: Sequence[float], group_ids: Sequence[int]) -> list[tuple[int, int]]:
    """``(chosen, rejected)`` index pairs: within each group, rank ``i`` vs rank ``i + G//2`` (equal rewards never
    pair).

    Sorting is stable (ties keep input order), so the pairing is deterministic.
    """
    pairs = []
    for members in group_indices(int(g) for g in group_ids):
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
    h = h.detach()
    stats = {"dpo_accuracy": float((h > 0).float().mean()), "dpo_margin": float((h / beta).mean()),
             "pairs": int(h.numel())}
    return loss, stats


class DPO(Algorithm):
    """The online-DPO update as the trainer drives it: pairs from each group, then ``loss`` per micro-batch."""

    config_class = DPOConfig
    needs_reference = True
    min_group_size = 2
    uses_rollout_temperature = False
    mean_weight = "pairs"
    summed_stats = ("loss_tokens", "pairs")

    def prepare(self, trajectories) -> tuple[list[RowGroup], dict[str, float]]:
        """One unit per pair, ``[chosen, rejected]``, each row carrying the pair weight 1/P (env errors never pair)."""
        errors = env_errors(trajectories)
        ok = [i for i in range(len(trajectories)) if i not in errors]
        pairs = [(ok[c], ok[r]) for c, r in make_pairs([trajectories[i].reward for i in ok],
                                                       [trajectories[i].group_id for i in ok])
                 if sum(trajectories[ok[c]].loss_mask) and sum(trajectories[ok[r]].loss_mask)]
        units = []
        for c, r in pairs:
            unit = []
            for i in (c, r):
                t = trajectories[i]
                unit.append(TrainRow(list(t.token_ids), list(t.loss_mask), list(t.logprobs),
                                    [float(m) for m in t.loss_mask], seq_weight=1.0 / len(pairs), meta={"index": i}))
            units.append(unit)
        groups = len({t.group_id for t in trajectories})
        return units, {"pairs": len(pairs), "groups": groups,
                       "skipped_groups": groups - len({trajectories[c].group_id for c, _ in pairs}),
                       "env_error_trajectories": len(errors)}

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Rows alternate chosen, rejected (as :meth:`prepare` built the units)."""
        mask = batch["loss_mask"]
        seq = sequence_logprob(logprobs, mask)
        ref = sequence_logprob(ref_logprobs, mask)
        loss, stats = dpo_loss(seq[0::2], seq[1::2], ref[0::2], ref[1::2], self.config.beta,
                               batch["seq_weights"][0::2])
        stats["loss_tokens"] = int(mask.sum())
        return loss, stats
