"""PPO with clip-higher, as ReTool trains: the clipped surrogate on trajectory-level, group-baselined advantages.

For each action token ``t`` of trajectory ``i`` (``pi_old`` = the sampler's logprobs recorded at rollout)::

    r_t   = exp(clamp(log pi(a_t) - log pi_old(a_t), -log_ratio_clamp, log_ratio_clamp))
    A_i   = R_i - b_i                      b_i = mean reward of i's group (or of the others: leave-one-out)
    L_t   = -min(r_t * A_i, clip(r_t, 1 - eps_low, 1 + eps_high) * A_i)
    L_t   = min(L_t, -clip_ratio_c * A_i)  where A_i < 0 (dual clip)
    loss  = sum_t w_t * L_t                w_t from batching.token_weights (global token mean by default)

Off-policy hardening (verl's defaults). For a negative advantage the clipped surrogate does not bound the
ratio from above: a token whose probability grew ``r``-fold since sampling adds ``r * |A|`` to the loss, so one
such token of a stale batch (asynchronous training, ``epochs > 1``) can outweigh the rest. The dual clip caps
that term at ``clip_ratio_c * |A|`` (Ye et al. 2020; verl's ``clip_ratio_c``, default 3), with zero gradient
beyond the cap; the clamp of the log-ratio before ``exp`` keeps a huge ratio finite, so the capped term's
gradient is exactly 0 instead of ``0 * inf = NaN``. On-policy (the first epoch of a synchronous step) every
ratio is 1 up to the sampler's numerics, so neither ever acts there: both are on by default; 0 turns each off.
Trajectories that ended with an env error are left out of the baselines and of training
(``train/env_error_trajectories``).

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
from agentrl.algos.objectives.batching import advantages_without_errors, policy_gradient_rows
from agentrl.algos.rollout.trajectory import all_equal, group_indices


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
    clip_ratio_c: float = 3.0
    """Dual clip: for negative advantages the loss term is capped at clip_ratio_c * abs(A) (verl); 0 = off."""
    log_ratio_clamp: float = 20.0
    """The log-ratio log pi - log pi_old is clamped to [-c, c] before exp (verl: 20); 0 = off."""


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
                      eps_low: float, eps_high: float, clip_ratio_c: float = 0.0,
                      log_ratio_clamp: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The PPO clipped objective per token, as a loss (to minimise).

    Args:
        logprobs: ``[B, T]`` current policy's logprobs of the taken tokens (differentiable).
        old_logprobs: ``[B, T]`` the sampler's logprobs (pi_old).
        advantages: ``[B, T]``, or ``[B]`` broadcast over each sequence.
        eps_low, eps_high: the clip range ``[1 - eps_low, 1 + eps_high]``.
        clip_ratio_c: the dual clip (> 1): for ``A < 0`` the loss is at most ``clip_ratio_c * |A|``; 0 = off.
        log_ratio_clamp: ``log pi - log pi_old`` is clamped to ``[-c, c]`` before ``exp``; 0 = off.

    Returns:
        ``(per_token_loss [B, T], info)``; ``info`` holds ``ratio`` and the boolean ``clipped_low`` /
        ``clipped_high`` / ``clipped_dual`` masks (tokens where a clipped term is the active one, so their
        gradient is 0).
    """
    if clip_ratio_c and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (or 0 = off), got {clip_ratio_c}")
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    log_ratio = logprobs - old_logprobs
    if log_ratio_clamp:
        log_ratio = torch.clamp(log_ratio, -log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    negative = (advantages < 0).expand_as(ratio)
    if clip_ratio_c:
        cap = -clip_ratio_c * advantages
        dual = negative & (per_token > cap)
        per_token = torch.where(negative, torch.minimum(per_token, cap.expand_as(per_token)), per_token)
    else:
        dual = torch.zeros_like(negative)
    info = {
        "ratio": ratio.detach(),
        "clipped_low": ((ratio < 1.0 - eps_low) & (advantages < 0)).expand_as(ratio),
        "clipped_high": ((ratio > 1.0 + eps_high) & (advantages > 0)).expand_as(ratio),
        "clipped_dual": dual.detach(),
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
        "clip_frac_dual": float(info["clipped_dual"][m].float().mean()),
        "clip_frac_high": float(info["clipped_high"][m].float().mean()),
        "ratio_mean": float(ratio.mean()),
        "ratio_max": float(ratio.max()),
        "loss_tokens": n,
    }


def ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, weights: torch.Tensor,
             config: PPOConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """``sum(weights * L_clip)`` (see the module docstring) and its statistics over tokens with weight > 0."""
    per_token, info = clipped_surrogate(logprobs, old_logprobs, advantages, config.eps_low, config.eps_high,
                                        config.clip_ratio_c, config.log_ratio_clamp)
    loss = (per_token * weights).sum()
    return loss, surrogate_stats(info, weights)


class PPO(Algorithm):
    """The PPO update as the trainer drives it: ``prepare`` a rollout batch, then ``loss`` per micro-batch."""

    config_class = PPOConfig
    min_group_size = 2
    token_level = True

    def prepare(self, trajectories) -> tuple[list[RowGroup], dict[str, float]]:
        """Group-baselined trajectory advantages (env errors left out), zero-advantage groups dropped; one unit
        per trajectory."""
        adv, errors = advantages_without_errors(
            trajectories, lambda rewards, groups: baselined_advantages(rewards, groups, self.config.baseline))
        rows, stats = policy_gradient_rows(trajectories, adv, self.config.aggregation)
        return [[row] for row in rows], {**stats, "env_error_trajectories": errors}

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        return ppo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["weights"], self.config)
