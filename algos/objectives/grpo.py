"""GRPO: PPO's clipped surrogate with group-relative advantages and an optional k3 KL to the reference.

For a group of ``G`` trajectories sampled for one task, with outcome rewards ``R_1..R_G``::

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)     (std scaling optional: scale_std=False gives R_i - mean(R))
    r_t   = exp(log pi(a_t) - log pi_old(a_t))    pi_old = the sampler's logprobs recorded at rollout
    L_t   = -min(r_t * A_i, clip(r_t, 1 - eps_low, 1 + eps_high) * A_i)  +  beta * KL_t
    KL_t  = exp(q_t) - q_t - 1,   q_t = log pi_ref(a_t) - log pi(a_t)     (Schulman's k3, >= 0, unbiased)
    loss  = sum_t w_t * L_t       w_t: 1/N over all N action tokens of the batch ('token_mean'), or
                                       1/(S * n_i) per token of sequence i ('seq_mean', S sequences)

``pi_ref`` is the same model with the LoRA adapter disabled. A group whose rewards are all equal has
``A_i = 0`` for every member: it carries no signal, so it is dropped from the batch before the update (and
counted as ``train/skipped_groups``); a batch of only such groups makes no optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentrl.algos.objectives.base import Algorithm, RowGroup
from agentrl.algos.objectives.batching import all_equal, group_indices, policy_gradient_items
from agentrl.algos.objectives.ppo import clipped_surrogate, surrogate_stats


@dataclass
class GRPOConfig:
    """GRPO hyper-parameters (the group size is the trainer's ``group_size``)."""

    eps_low: float = 0.2
    """Lower clip: ratio clipped at 1 - eps_low for negative advantages."""
    eps_high: float = 0.28
    """Upper clip (clip-higher): ratio clipped at 1 + eps_high for positive advantages."""
    beta: float = 0.0
    """Coefficient of the k3 KL to the reference (adapter disabled); 0 skips the reference forward pass."""
    scale_std: bool = True
    """Divide group-centred rewards by the group's standard deviation (DeepSeek GRPO); False = Dr. GRPO."""
    epochs: int = 1
    """Optimizer steps on each rollout batch (pi_old stays the rollout policy); 1 = strictly on-policy."""
    aggregation: str = "token_mean"
    """'token_mean' (global mean over action tokens) or 'seq_mean' (mean over sequences of their token mean)."""


def group_advantages(rewards: Sequence[float], group_ids: Sequence[int], scale_std: bool = True,
                     eps: float = 1e-6) -> list[float]:
    """Group-relative advantages, computed over whole groups (inputs in any order).

    The standard deviation is the sample one (``n - 1``); a lone sample or a group of equal rewards gets 0.
    """
    adv = [0.0] * len(rewards)
    for members in group_indices(int(g) for g in group_ids):
        rs = [float(rewards[i]) for i in members]
        n = len(rs)
        if n < 2 or all_equal(rs):
            continue  # no signal (and no 1e-17 rounding residue posing as an advantage)
        mean = sum(rs) / n
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / (n - 1))
        for i, r in zip(members, rs, strict=True):
            a = r - mean
            adv[i] = a / (std + eps) if scale_std else a
    return adv


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref) on tokens sampled from pi: ``exp(q) - q - 1``, q = ref - pi."""
    q = ref_logprobs - logprobs
    return torch.exp(q) - q - 1.0


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, weights: torch.Tensor,
              config: GRPOConfig, ref_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss of the module docstring. ``ref_logprobs`` is required when ``config.beta > 0``.

    Returns ``(loss, stats)``; stats (clip fractions, ratio mean/max, ``kl``) are over tokens with weight > 0.
    """
    per_token, info = clipped_surrogate(logprobs, old_logprobs, advantages, config.eps_low, config.eps_high)
    stats = surrogate_stats(info, weights)
    if config.beta > 0:
        if ref_logprobs is None:
            raise ValueError("GRPO with beta > 0 needs ref_logprobs (the adapter-disabled model's logprobs)")
        kl = k3_kl(logprobs, ref_logprobs)
        per_token = per_token + config.beta * kl
        m = weights > 0
        stats["kl"] = float(kl.detach()[m].mean()) if m.any() else 0.0
    loss = (per_token * weights).sum()
    return loss, stats


class GRPO(Algorithm):
    """The GRPO update as the trainer drives it: ``prepare`` a rollout batch, then ``loss`` per micro-batch."""

    config_class = GRPOConfig
    min_group_size = 2
    token_level = True

    def __init__(self, config: GRPOConfig | None = None):
        super().__init__(config)
        self.needs_reference = self.config.beta > 0  # the reference pass only pays for the KL term

    def prepare(self, trajectories) -> tuple[list[RowGroup], dict[str, float]]:
        """Advantages over whole groups, zero-advantage groups dropped; one unit per trajectory."""
        adv = group_advantages([t.reward for t in trajectories], [t.group_id for t in trajectories],
                               self.config.scale_std)
        items, stats = policy_gradient_items(trajectories, adv, self.config.aggregation)
        return [[it] for it in items], stats

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        return grpo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["weights"], self.config,
                         ref_logprobs)
