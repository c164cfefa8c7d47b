"""PPO with clip-higher, as ReTool trains: the clipped surrogate on trajectory-level, group-baselined advantages.

For each action token ``t`` of trajectory ``i`` (``pi_old`` = the rollout logprobs recorded at rollout)::

    r_t   = exp(clamp(log pi(a_t) - log pi_old(a_t), -log_ratio_clamp, log_ratio_clamp))
    A_i   = R_i - b_i                      b_i = mean reward of i's group (or of the others: leave-one-out)
    L_t   = -min(r_t * A_i, clip(r_t, 1 - eps_low, 1 + eps_high) * A_i)
    L_t   = min(L_t, -clip_ratio_c * A_i)  where A_i < 0 (dual clip)
    loss  = sum_t w_t * L_t                w_t from batching.token_weights (global token mean by default)

Off-policy hardening (verl's defaults). For a negative advantage the clipped surrogate does not bound the
ratio from above: a token whose probability grew ``r``-fold since sampling adds ``r * |A|`` to the loss, so
one such token of a stale batch (asynchronous training, ``epochs > 1``) can outweigh the rest. The dual clip
caps that term at ``clip_ratio_c * |A|`` (Ye et al. 2020; verl's ``clip_ratio_c``, default 3), with zero
gradient beyond the cap; the clamp of the log-ratio before ``exp`` keeps a huge ratio finite, so the capped
term's gradient is exactly 0 instead of ``0 * inf = NaN``. On-policy (the first epoch of a synchronous step)
every ratio is 1 up to the policy backend's numerics, so neither ever acts there: both are on by default; 0
turns each off. Trajectories that ended with an env error are left out of the baselines and of training
(``train/env_error_trajectories``).

Rollout correction (``correction``, shared with GRPO; docs/algorithms/grpo.md). When the policy that samples
is not the trained model itself (an inference server, top-k/top-p truncation), its logprobs ``pi_rollout``
differ from the trainer's own ``pi_old`` (the logprobs of the weights the rollout was sampled with, recomputed
by the trainer: the first epoch's forward pass, kept for the later epochs). The ratio is then taken against
``pi_old`` (so it is exactly 1 on the first epoch) and each token's policy-gradient term is weighted by
:func:`importance_weights` of ``rho_t = pi_old(a_t) / pi_rollout(a_t)``::

    tis:  w_t = min(rho_t, C)                          truncated importance sampling
    mis:  w_t = rho_t if 1/C <= rho_t <= C else 0      masked importance sampling (the token is dropped)
    level='sequence': rho_t = prod over the trajectory's action tokens of rho (the same w on all of them)

``eps_high > eps_low`` ("clip-higher", DAPO; ReTool's 0.8 / 1.28) lets unlikely tokens with positive advantage
grow faster than likely ones shrink, which keeps entropy from collapsing. There is no value network: the
group baseline replaces it (a learned value head with GAE is not implemented). :func:`clipped_surrogate` is
the one copy of the PPO objective; GRPO (:mod:`agentrl.algos.objectives.grpo`) adds its own advantage and a KL term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrl.algos.objectives.base import Algorithm, LazyModule, RowGroup
from agentrl.algos.objectives.batching import LOSS_DENOMINATORS, advantages_without_errors, policy_gradient_rows
from agentrl.algos.rollout.trajectory import all_equal, group_indices

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # the config class is read without torch (TrainConfig's section)

CORRECTIONS = ("auto", "none", "tis", "mis")
"""The values of ``correction`` (GRPO, PPO)."""
CORRECTION_LEVELS = ("token", "sequence")


@dataclass(frozen=True)
class RolloutCorrection:
    """A resolved rollout correction (never 'auto' or 'none': those resolve to this or to None)."""

    mode: str
    """'tis' (truncate the importance weight at ``cap``) or 'mis' (drop tokens outside ``[1/cap, cap]``)."""
    level: str = "token"
    """'token' or 'sequence' (one ratio per trajectory: the product of its tokens' ratios)."""
    cap: float = 2.0

    def __post_init__(self):
        check_correction(self.mode, self.level, self.cap)
        if self.mode in ("auto", "none"):
            raise ValueError(f"RolloutCorrection is a resolved correction: 'tis' or 'mis', not {self.mode!r}")


def check_correction(mode: str, level: str, cap: float) -> None:
    """Raise ``ValueError`` for correction settings that mean nothing (the config keys ``correction``,
    ``correction_level``, ``correction_cap``)."""
    if mode not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got {mode!r}")
    if level not in CORRECTION_LEVELS:
        raise ValueError(f"correction_level must be one of {CORRECTION_LEVELS}, got {level!r}")
    if not cap > 1.0:
        raise ValueError(f"correction_cap must be > 1 (the weight's upper bound, and 1/cap its lower one for "
                         f"'mis'), got {cap!r}")


def importance_weights(train_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor,
                       correction: RolloutCorrection) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token weights correcting a policy-gradient loss for tokens the policy backend drew, not ``pi_old``.

    Args:
        train_logprobs: ``[B, T]`` the trainer's logprobs of the sampled tokens under the weights that sampled
            them (``pi_old``; no gradient).
        rollout_logprobs: ``[B, T]`` the rollout logprobs of the same tokens (what the rollout recorded).
        mask: ``[B, T]`` the action tokens (> 0); the weight is 1 elsewhere.
        correction: what to do with the ratio ``rho = exp(train - rollout)`` (per token, or per row's product
            for ``level='sequence'``): 'tis' ``min(rho, cap)``, 'mis' ``rho`` inside ``[1/cap, cap]`` and 0 outside.

    Returns:
        ``(weights [B, T], stats)``: ``is_weight_mean`` over the action tokens, and ``is_clipped_frac`` ('tis':
        tokens whose ratio was truncated) or ``is_masked_frac`` ('mis': tokens dropped); no stats without
        action tokens.
    """
    m = mask > 0
    log_rho = torch.where(m, train_logprobs.detach().float() - rollout_logprobs.float(), 0.0)
    if correction.level == "sequence":
        log_rho = torch.where(m, log_rho.sum(dim=-1, keepdim=True), 0.0)
    rho = torch.exp(log_rho)  # inf where a sequence's log-ratio overflows: truncated or masked below
    if correction.mode == "tis":
        out = rho > correction.cap
        weights = torch.clamp(rho, max=correction.cap)
    else:
        out = (rho > correction.cap) | (rho < 1.0 / correction.cap)
        weights = torch.where(out, 0.0, rho)
    weights = torch.where(m, weights, 1.0)
    if not m.any():
        return weights, {}
    frac_key = "is_clipped_frac" if correction.mode == "tis" else "is_masked_frac"
    return weights, {"is_weight_mean": float(weights[m].mean()), frac_key: float(out[m].float().mean())}


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
    loss_denominator: str = "sampled"
    """What the aggregation divides by: 'sampled', every sampled trajectory's action tokens (or sequences), the
    dropped equal-reward groups' included (TRL, verl); 'kept', only the rows that train (as grpo.loss_denominator)."""
    clip_ratio_c: float = 3.0
    """Dual clip: for negative advantages the loss term is capped at clip_ratio_c * abs(A) (verl); 0 = off."""
    log_ratio_clamp: float = 20.0
    """The log-ratio log pi - log pi_old is clamped to [-c, c] before exp (verl: 20); 0 = off."""
    correction: str = "auto"
    """Rollout correction, as grpo.correction (docs/algorithms/grpo.md#rollout-correction):
    'tis', 'mis', 'none' or 'auto' ('tis' when rollouts are sampled by a server, in bf16/fp16 or with
    top-k/top-p)."""
    correction_level: str = "token"
    """'token' (each token's own ratio) or 'sequence' (the product over the trajectory, on all its tokens)."""
    correction_cap: float = 2.0
    """C (> 1): 'tis' truncates the importance weight at C; 'mis' drops tokens whose ratio is outside [1/C, C]."""


def baselined_advantages(
    rewards: Sequence[float], group_ids: Sequence[int], baseline: str = "group_mean"
) -> list[float]:
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
        old_logprobs: ``[B, T]`` the rollout logprobs (pi_old).
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
             config: PPOConfig, is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """``sum(weights * is_weights * L_clip)`` (see the module docstring) and its statistics over tokens with
    weight > 0. ``is_weights``: the rollout correction's per-token weights (:func:`importance_weights`;
    None = 1)."""
    per_token, info = clipped_surrogate(logprobs, old_logprobs, advantages, config.eps_low, config.eps_high,
                                        config.clip_ratio_c, config.log_ratio_clamp)
    if is_weights is not None:
        per_token = per_token * is_weights
    loss = (per_token * weights).sum()
    return loss, surrogate_stats(info, weights)


def check_denominator(config) -> None:
    """Refuse an unknown ``loss_denominator`` before any model loads (ValueError naming the key)."""
    if config.loss_denominator not in LOSS_DENOMINATORS:
        raise ValueError(f"loss_denominator must be one of {', '.join(LOSS_DENOMINATORS)}, got "
                         f"{config.loss_denominator!r}")


def correction_of(config) -> str:
    """Check an algorithm config's correction keys (``correction``, ``correction_level``, ``correction_cap``)
    and return its ``correction``."""
    check_correction(config.correction, config.correction_level, config.correction_cap)
    return config.correction


class PPO(Algorithm):
    """The PPO update as the trainer drives it: ``prepare`` a rollout batch, then ``loss`` per micro-batch."""

    config_class = PPOConfig
    min_group_size = 2
    token_level = True

    def __init__(self, config: PPOConfig | None = None):
        super().__init__(config)
        correction_of(self.config)
        check_denominator(self.config)

    def prepare(self, trajectories) -> tuple[list[RowGroup], dict[str, float]]:
        """Group-baselined trajectory advantages (env errors left out), zero-advantage groups dropped; one unit
        per trajectory."""
        adv, errors = advantages_without_errors(
            trajectories, lambda rewards, groups: baselined_advantages(rewards, groups, self.config.baseline))
        rows, stats = policy_gradient_rows(trajectories, adv, self.config.aggregation,
                                           denominator=self.config.loss_denominator)
        return [[row] for row in rows], {**stats, "env_error_trajectories": errors}

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        return ppo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["weights"], self.config,
                        batch.get("is_weights"))
