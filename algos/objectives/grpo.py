"""GRPO: PPO's clipped surrogate with group-relative advantages and an optional k3 KL to the reference.

For a group of ``G`` trajectories sampled for one task, with outcome rewards ``R_1..R_G``::

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)     (std scaling optional: scale_std=False gives R_i - mean(R))
    r_t   = exp(log pi(a_t) - log pi_old(a_t))    pi_old = the rollout logprobs recorded at rollout, or with a
                                                  rollout correction the trainer's own (below)
    L_t   = -w_t * min(r_t * A_i, clip(r_t, 1 - eps_low, 1 + eps_high) * A_i)  +  beta * KL_t
            (dual clip and log-ratio clamp as in PPO: :func:`~agentrl.algos.objectives.ppo.clipped_surrogate`;
            w_t = 1 without a correction, the TIS/MIS weight of pi_old / pi_rollout with one:
            :func:`~agentrl.algos.objectives.ppo.importance_weights`; the KL term is not weighted)
    KL_t  = exp(q_t) - q_t - 1,   q_t = log pi_ref(a_t) - log pi(a_t)     (Schulman's k3, >= 0)
    loss  = sum_t w_t * L_t       w_t: 1/N over all N action tokens of the batch ('token_mean'), or
                                       1/(S * n_i) per token of sequence i ('seq_mean', S sequences), or
                                       1/(S * norm_tokens) ('seq_mean_token_sum_norm', Dr. GRPO)
                                  N and S count every sampled trajectory, dropped groups' too
                                  (loss_denominator='sampled', as TRL and verl; 'kept': the kept rows only)

``pi_ref`` is the policy as it was when the training stage started (:mod:`agentrl.algos.training.reference`).

k3 as a value and as a gradient. On a token ``a ~ pi`` (given its prefix), ``E[KL_t] = KL(pi || pi_ref)``
exactly: k3 is an unbiased, non-negative estimate of the reverse KL. Its gradient is another matter: the loss
differentiates ``KL_t`` through ``log pi(a_t)`` with the sampled tokens held fixed, and
``E_{a~pi}[d KL_t / d theta] = E_{a~pi}[(1 - pi_ref(a)/pi(a)) grad log pi(a)] = grad KL(pi_ref || pi)``: the
gradient of the *forward* KL, not of the reverse KL it estimates (the two agree to second order near
``pi = pi_ref``). ``tests/test_losses.py`` checks both identities exactly on a small categorical distribution.

Groups whose rewards are all equal have ``A_i = 0`` for every member. With ``beta = 0`` they carry no signal at
all and are dropped before the update (``train/skipped_groups``); a batch of only such groups makes no
optimizer step. Their tokens still count in the loss normaliser (``loss_denominator='sampled'``, the default),
so a kept token weighs what it would in TRL or verl, where those groups stay in the batch with advantage 0: the
step does not grow as more groups saturate. With ``beta > 0`` their tokens stay in the batch (advantage 0, KL
term only), as TRL and verl keep them, so every sampled token is pulled toward the reference and the token-mean
normaliser (hence the effective ``beta``) does not depend on how many groups happened to be degenerate.
Trajectories that ended with an env error (``termination == "error"``) are left out of the group statistics,
of training and of the normaliser (``train/env_error_trajectories``).

Two options extend the advantage: ``guidance='luffy'`` adds the env's demonstration to groups no sample solved
(``'relift'`` trains it with an NLL term instead: :mod:`~agentrl.algos.objectives.guidance`), and
``turn_weight > 0`` adds a turn-level advantage from states the samples share
(:mod:`~agentrl.algos.objectives.turn_credit`).

Dr. GRPO (Liu et al. 2025) changes two things: no std scaling (``scale_std=False``) and no per-sequence length
normalisation: each sequence's token sum divided by a constant (``aggregation='seq_mean_token_sum_norm'`` with
``norm_tokens``, TRL's ``loss_type="dr_grpo"``, which divides by ``max_completion_length``). Both together are
Dr. GRPO; either alone is not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrl.algos.objectives.base import Algorithm, LazyModule, RowGroup
from agentrl.algos.objectives.batching import advantages_without_errors, policy_gradient_rows
from agentrl.algos.objectives.guidance import (
    add_demonstrations,
    check_guidance,
    demo_loss,
    demo_stats,
    relift_demo_rows,
)
from agentrl.algos.objectives.ppo import check_denominator, clipped_surrogate, correction_of, surrogate_stats
from agentrl.algos.objectives.turn_credit import check_turn_credit, token_advantages, turn_advantages
from agentrl.algos.rollout.trajectory import all_equal, group_indices

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # the config class is read without torch (TrainConfig's section)


@dataclass
class GRPOConfig:
    """GRPO hyper-parameters (the group size is the trainer's ``group_size``)."""

    eps_low: float = 0.2
    """Lower clip: ratio clipped at 1 - eps_low for negative advantages."""
    eps_high: float = 0.28
    """Upper clip (clip-higher): ratio clipped at 1 + eps_high for positive advantages."""
    beta: float = 0.0
    """Coefficient of the k3 KL to the reference (the policy at the start of the stage); 0 skips the reference
    forward pass (and drops zero-advantage groups)."""
    scale_std: bool = True
    """Divide group-centred rewards by the group's standard deviation (DeepSeek GRPO); False = Dr. GRPO's
    advantage (Dr. GRPO also sets aggregation='seq_mean_token_sum_norm')."""
    epochs: int = 1
    """Optimizer steps on each rollout batch (pi_old stays the rollout policy); 1 = strictly on-policy."""
    aggregation: str = "token_mean"
    """'token_mean' (global mean over action tokens), 'seq_mean' (mean over sequences of their token mean) or
    'seq_mean_token_sum_norm' (Dr. GRPO: mean over sequences of their token sum / norm_tokens)."""
    norm_tokens: int = 1024
    """The constant length of 'seq_mean_token_sum_norm' (TRL's dr_grpo: max_completion_length)."""
    loss_denominator: str = "sampled"
    """What the aggregation divides by: 'sampled', every sampled trajectory's action tokens (or sequences) of the
    batch, those of the equal-reward groups dropped at beta=0 included (TRL's dapo/dr_grpo, verl's token-mean);
    'kept', only the rows that train (before issue 60: the step then grows with the share of dropped groups)."""
    clip_ratio_c: float = 3.0
    """Dual clip: for negative advantages the loss term is capped at clip_ratio_c * abs(A) (verl); 0 = off."""
    log_ratio_clamp: float = 20.0
    """The log-ratio log pi - log pi_old is clamped to [-c, c] before exp (verl: 20); 0 = off."""
    correction: str = "auto"
    """Rollout correction (docs/algorithms/grpo.md#rollout-correction): 'tis' weights each token's
    policy-gradient term by min(pi_old / pi_rollout, correction_cap), 'mis' by that ratio inside [1/cap, cap]
    and drops the token outside it, both with the PPO ratio taken against pi_old (the trainer's own logprobs
    before the update) instead of the rollout logprobs; 'none' keeps the rollout logprobs as pi_old; 'auto':
    'tis' when rollouts are sampled by a server (OpenAIPolicy), in bf16/fp16 or with top-k/top-p, else 'none'
    (in process in fp32 the policy is the model)."""
    correction_level: str = "token"
    """'token' (each token's own ratio) or 'sequence' (the product over the trajectory, on all its tokens)."""
    correction_cap: float = 2.0
    """C (> 1): 'tis' truncates the importance weight at C; 'mis' drops tokens whose ratio is outside [1/C, C]."""
    guidance: str = "none"
    """'luffy': a group whose best sample scores below the env's demonstration of its task gets that
    demonstration as one more member, trained with LUFFY's shaped off-policy loss; 'relift': that
    demonstration is trained with an NLL term beside the group's plain GRPO (ReLIFT); 'none': plain GRPO
    (:mod:`~agentrl.algos.objectives.guidance`, docs/algorithms/grpo.md#demonstration-guidance)."""
    guidance_gamma: float = 0.1
    """gamma (> 0) of the demonstration tokens' shaping p / (p + gamma) ('luffy'): smaller weighs unlikely
    tokens more."""
    guidance_coef: float = 1.0
    """c (> 0) of 'relift''s term: c times the mean NLL of the batch's demonstration tokens."""
    turn_weight: float = 0.0
    """w (>= 0) of the GiGPO-style turn advantage added to each reply's tokens (:mod:`~agentrl.algos.
    objectives.turn_credit`, docs/algorithms/grpo.md#turn-credit); 0: one advantage per trajectory."""
    turn_gamma: float = 0.95
    """Discount (0, 1] of the turn rewards in the turn-level returns."""


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
              config: GRPOConfig, ref_logprobs: torch.Tensor | None = None,
              is_weights: torch.Tensor | None = None,
              off_policy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss of the module docstring. ``ref_logprobs`` is required when ``config.beta > 0``;
    ``is_weights`` (the rollout correction's ``w_t``; None = 1) weighs the clipped term, not the KL.
    ``off_policy`` (``[B]``, 1 for a demonstration row; None = none) gives those rows the demonstration loss of
    :mod:`~agentrl.algos.objectives.guidance` instead of the clipped surrogate and the KL term.

    Returns ``(loss, stats)``; stats (clip fractions, ratio mean/max, ``kl``) are over the on-policy tokens with
    weight > 0, plus ``demo_tokens`` / ``demo_prob_mean`` when there are demonstration rows; ``loss_tokens``
    counts both.
    """
    demo = off_policy is not None and bool(off_policy.any())
    on_weights = weights * (1 - off_policy)[:, None] if demo else weights
    per_token, info = clipped_surrogate(logprobs, old_logprobs, advantages, config.eps_low, config.eps_high,
                                        config.clip_ratio_c, config.log_ratio_clamp)
    if is_weights is not None:
        per_token = per_token * is_weights
    stats = surrogate_stats(info, on_weights)
    if config.beta > 0:
        if ref_logprobs is None:
            raise ValueError("GRPO with beta > 0 needs ref_logprobs (the reference policy's logprobs)")
        kl = k3_kl(logprobs, ref_logprobs)
        per_token = per_token + config.beta * kl
        m = on_weights > 0
        stats["kl"] = float(kl.detach()[m].mean()) if m.any() else 0.0
    loss = (per_token * on_weights).sum()
    if demo:
        off_weights = weights * off_policy[:, None]
        loss = loss + (demo_loss(config.guidance, logprobs, advantages, config.guidance_gamma) * off_weights).sum()
        stats.update(demo_stats(logprobs, off_weights > 0))
        # every token the loss trains on (the weight of this micro-batch's averaged statistics)
        stats["loss_tokens"] = stats.get("loss_tokens", 0) + stats["demo_tokens"]
    return loss, stats


class GRPO(Algorithm):
    """The GRPO update as the trainer drives it: ``prepare`` a rollout batch, then ``loss`` per micro-batch."""

    config_class = GRPOConfig
    min_group_size = 2
    token_level = True
    summed_stats = ("loss_tokens", "demo_tokens")

    def __init__(self, config: GRPOConfig | None = None):
        super().__init__(config)
        correction_of(self.config)
        check_denominator(self.config)
        check_guidance(self.config.guidance, self.config.guidance_gamma, self.config.guidance_coef)
        check_turn_credit(self.config.turn_weight, self.config.turn_gamma)
        self.needs_reference = self.config.beta > 0  # the reference pass only pays for the KL term
        self.demos = None

    @property
    def uses_demonstrations(self) -> bool:
        return self.config.guidance != "none"

    def offline_data(self, tokenizer, tasks, env_id: str):
        """With ``guidance`` set: the env's demonstrations by task, consulted by :meth:`prepare`."""
        from agentrl.algos.rollout.demonstrations import TaskDemonstrations

        self.demos = TaskDemonstrations(tokenizer, tasks, env_id)
        return self.demos

    def prepare(self, trajectories) -> tuple[list[RowGroup], dict[str, float]]:
        """Advantages over whole groups (env errors left out); zero-advantage groups dropped when
        ``beta = 0``, kept for their KL term otherwise; one unit per trajectory. With ``guidance='luffy'`` a
        demonstration first joins each group no sample solved
        (:func:`~agentrl.algos.objectives.guidance.add_demonstrations`); with ``'relift'`` it becomes an NLL
        row of its own (:func:`~agentrl.algos.objectives.guidance.relift_demo_rows`)."""
        n, guided, mode = len(trajectories), None, self.config.guidance
        if mode != "none":
            if self.demos is None:
                raise RuntimeError(f"grpo.guidance={mode!r} needs the env's demonstrations: the trainer calls "
                                   "offline_data(tokenizer, tasks, env_id) when uses_demonstrations is true")
            trajectories, guided = add_demonstrations(trajectories, self.demos)
        grouped = trajectories[:n] if mode == "relift" else trajectories  # relift's demos join no group
        adv, errors = advantages_without_errors(
            grouped, lambda rewards, groups: group_advantages(rewards, groups, self.config.scale_std))
        rows, stats = policy_gradient_rows(grouped, adv, self.config.aggregation,
                                             keep_zero_groups=self.config.beta > 0,
                                             norm_tokens=self.config.norm_tokens,
                                             denominator=self.config.loss_denominator)
        if mode == "relift":
            rows += relift_demo_rows(trajectories[n:], n, self.config.guidance_coef)
        extra = {} if guided is None else {"guided_groups": guided}
        if self.config.turn_weight > 0:
            turn_adv, turn_stats = turn_advantages(grouped, self.config.turn_gamma, self.config.scale_std)
            extra.update(turn_stats)
        for row in rows:
            i = row.meta["index"]
            row.off_policy = i >= n
            if self.config.turn_weight > 0 and i < len(grouped) and trajectories[i].turns:
                row.token_advantages = token_advantages(trajectories[i], row.advantage, turn_adv[i],
                                                        self.config.turn_weight)
        return [[row] for row in rows], {**stats, "env_error_trajectories": errors, **extra}

    def loss(self, logprobs, ref_logprobs, batch) -> tuple[torch.Tensor, dict[str, float]]:
        return grpo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["weights"], self.config,
                         ref_logprobs, batch.get("is_weights"), batch.get("off_policy"))
