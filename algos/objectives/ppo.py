"""PPO with clip-higher, as ReTool trains: the clipped surrogate on trajectory-level, group-baselined advantages.

For each action token ``t`` of trajectory ``i`` (``pi_old`` = the sampler's logprobs recorded at rollout)::

    r_t   = exp(log pi(a_t) - log pi_old(a_t))
    A_i   = R_i - b_i                      b_i = mean reward of i's group (or of the others: leave-one-out)
    L_t   = -min(r_t * A_i, clip(r_t, 1 - eps_low, 1 + eps_high) * A_i)
    loss  = sum_t w_t * L_t                w_t from batching.token_weights (global token mean by default)

``eps_high > eps_low`` ("clip-higher", DAPO; ReTool's 0.8 / 1.28) lets unlikely tokens with positive advantage
grow faster than likely ones shrink, which keeps entropy from collapsing. There is no value network: the
group baseline replaces it (a learned value head with GAE is not implemented). :func:`clipped_surrogate` is
the one copy of the PPO objective; GRPO (:mod:`agentrl.algos.objectives.grpo`) adds its own advantage and a KL term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentrl.algos.objectives.base import Algorithm, RowGroup
from agentrl.algos.objectives.batching import all_equal, group_indices, policy_gradient_items


@dataclass
class PPOConfig:
    """PPO (ReTool flavour) hyper-parameters."""

    eps_low: float = 0.2
    """Lower clip: the ratio is clipped at 1 - eps_low (0.8) for negative advantages."""
    eps_high: float = 0.28
    """Upper clip: the ratio is clipped at 1 + eps_high (1.28) for positive advantages."""
    baseline: str = "group_mean"
    """'group_mean' (A = R - mean of the group) or 'leave_one_out' (A = R - mean of the other samples, RLOO)."""
    epochs: int = 1
    """Optimizer steps on each rollout batch (pi_old stays the rollout policy); 1 = strictly on-policy."""
    aggregation: str = "token_mean"
    """'token_mean' (every action token of the batch weighs the same) or 'seq_mean' (every trajectory does)."""


def baselined_advantages(rewards: Sequence[float], group_ids: Sequence[int], baseline: str = "group_mean") -> list[float]:
    """Trajectory-level advantages ``R_i - b_i`` computed over whole groups (any order of the inputs)."""
    if baseline not in ("group_mean", "leave_one_out"):
        raise ValueError(f"baseline must be 'group_mean' or 'leave_one_out', got {baseline!r}")
    adv = [0.0] * len(rewards)
    for members in group_indices(int(g) for g in group_ids):
        rs = [float(rewards[i]) for i in members]
        total, n = sum(rs), len(rs)
        if all_equal(rs):
            continue  # equal rewards (or a lone sample): no signal, exactly 0 (no rounding residue)
        for i, r in zip(members, rs, strict=True):
            if n == 1:
                adv[i] = 0.0
            elif baseline == "group_mean":
                adv[i] = r - total / n
            else:
                adv[i] = r - (total - r) / (n - 1)
    return adv


def clipped_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      eps_low: float, eps_high: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The PPO clipped objective per token, as a loss (to minimise).

    Args:
        logprobs: ``[B, T]`` current policy's logprobs of the taken tokens (differentiable).
        old_logprobs: ``[B, T]`` the sampler's logprobs (pi_old).
        advantages: ``[B, T]``, or ``[B]`` broadcast over each sequence.
        eps_low, eps_high: the clip range ``[1 - eps_low, 1 + eps_high]``.

    Returns:
        ``(per_token_loss [B, T], info)``; ``info`` holds ``ratio`` and the boolean ``clipped_low`` /
        ``clipped_high`` masks (tokens where the clipped term is the active one, so their gradient is 0).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    info = {
        "ratio": ratio.detach(),
        "clipped_low": ((ratio < 1.0 - eps_low) & (advantages < 0)).expand_as(ratio),
        "clipped_high": ((ratio > 1.0 + eps_high) & (advantages > 0)).expand_as(ratio),
    }
    return per_token, info


def surrogate_stats(info: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, float]:
    """Clip fractions and ratio statistics over the action tokens of ``mask``."""
    m = mask > 0
    n = int(m.sum())
    if n == 0:
        return {"loss_tokens": 0}
    ratio = info["ratio"][m]
    return {
        "clip_frac_low": float(info["clipped_low"][m].float().mean()),
        "clip_frac_high": float(info["clipped_high"][m].float().mean()),
        "ratio_mean": float(ratio.mean()),
        "ratio_max": float(ratio.max()),
        "loss_tokens": n,
    }


def ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, weights: torch.Tensor,
             config: PPOConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """``sum(weights * L_clip)`` (see the module docstring) and its statistics over tokens with weight > 0."""
    per_token, info = clipped_surrogate(logprobs, old_logprobs, advantages, config.eps_low, config.eps_high)
    loss = (per_token * weights).sum()
    return loss, surrogate_stats(info, weights)


class PPO(Algorithm):
    """The PPO update as the trainer drives it: ``prepare`` a rollout batch, then ``loss`` per micro-batch."""

    config_class = PPOConfig
    min_group_size = 2
    token_level = True

    def prepare(self, trajectories) -> tuple[list[RowGroup], dict[str, float]]:
        """Group-baselined trajectory advantages, zero-advantage groups dropped; one unit per trajectory."""
        adv = baselined_advantages([t.reward for t in trajectories], [t.group_id for t in trajectories],
                                   self.config.baseline)
        items, stats = policy_gradient_items(trajectories, adv, self.config.aggregation)
        return [[it] for it in items], stats

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        return ppo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["weights"], self.config)
