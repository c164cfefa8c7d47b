"""Demonstration guidance for GRPO: an off-policy demonstration joins each group that no sample solved.

GRPO learns nothing from a group whose samples all fail: their rewards are equal, so every advantage is 0.
When the policy cannot yet sample a solution of a task (a three-call chain, say), RL alone never starts on it.
With ``grpo.guidance='luffy'`` (LUFFY, Yan et al. 2025, "Learning to Reason under Off-Policy Guidance") the
env's own demonstration of the task (``env.demo(task)``, the transcript of a correct solution, rendered token for
token as a rollout: :class:`~agentrl.algos.rollout.demonstrations.TaskDemonstrations`) is added to every group
whose best on-policy reward is below the demonstration's reward. It is one more member of the group::

    group      = G samples + 1 demonstration (reward R_d, the env's reward for it)
    A_i        = GRPO's group advantage over all G + 1 members (the demonstration's is > 0, the samples' < 0)

On-policy tokens keep GRPO's clipped surrogate. The demonstration's tokens have no ``pi_old`` (nobody sampled
them); LUFFY takes the ratio against a behaviour probability of 1 and shapes it, without clipping::

    L_t(demo) = -A_d * f(pi(a_t)),     f(p) = p / (p + gamma)        (gamma = grpo.guidance_gamma, 0.1)
    grad      = -A_d * gamma / (p + gamma)^2 * p * grad log p(a_t)

so a demonstration token the policy finds unlikely (small ``p``) gets a larger weight than plain
``p * grad log p`` would give it (which vanishes as ``p -> 0``), and a token it already predicts (``p -> 1``)
little. Token weights (the aggregation) are computed over all rows, demonstrations included; the KL term, when
``beta > 0``, applies to on-policy tokens only. A demonstration row is ``TrainRow.off_policy``: it is left out of
``train/logprob_gap`` and of the rollout correction (no policy sampled them).

With ``grpo.guidance='relift'`` (ReLIFT, Ma et al. 2025, "Learning What Reinforcement Learning Can't":
fine-tune on the questions RL fails, interleaved with RL) the same demonstrations are chosen the same way, but
they do not join their group: the samples keep plain GRPO (an all-failed group stays a group without signal
and is skipped), and the demonstrations add a supervised term, the mean negative log-likelihood of their
action tokens::

    loss = L_GRPO(samples)  +  c * ( -1/N_d * sum over demonstration tokens of log pi(a_t) )
           (c = grpo.guidance_coef, 1.0; N_d = the demonstration tokens of the batch)

so a task the policy cannot yet solve is imitated exactly as the cold start's SFT would, while the tasks it can
solve are reinforced. The GRPO term's token weights are computed over the samples only, so its scale does not
depend on how many demonstrations a batch holds.

Metrics: ``train/guided_groups`` (groups given a demonstration), ``train/demo_tokens``, ``train/demo_prob_mean``
(the policy's mean probability of the demonstration tokens: it rises as the policy learns them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentrl.algos.config import old_name_error
from agentrl.algos.objectives.base import LazyModule
from agentrl.algos.objectives.batching import TrainRow
from agentrl.algos.rollout.trajectory import Trajectory, group_indices

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # the config class is read without torch (TrainConfig's section)

GUIDANCE = ("none", "luffy", "relift")
"""The values of ``grpo.guidance``."""


def check_guidance(mode: str, gamma: float, coef: float = 1.0) -> None:
    """Raise ``ValueError`` naming the key for guidance settings that mean nothing (an old value: naming the
    new one, :func:`~agentrl.algos.config.old_name_error`)."""
    old = old_name_error("grpo.guidance", mode)
    if old is not None:
        raise old
    if mode not in GUIDANCE:
        raise ValueError(f"guidance must be one of {GUIDANCE}, got {mode!r}")
    if not gamma > 0:
        raise ValueError(f"guidance_gamma must be > 0 (LUFFY's shaping p / (p + gamma); 0.1 in the paper), "
                         f"got {gamma!r}")
    if not coef > 0:
        raise ValueError(f"guidance_coef must be > 0 (the weight of guidance='relift''s NLL term), "
                         f"got {coef!r}")


def add_demonstrations(trajectories: Sequence[Trajectory], demos) -> tuple[list[Trajectory], int]:
    """The trajectories plus one demonstration per group whose best reward is below the demonstration's.

    ``demos.get(task)`` gives ``(token_ids, loss_mask, reward)`` or None (no known solution). Env errors
    (``termination == "error"``) do not count as samples; a group of only errors gets no demonstration. The
    demonstrations come after the samples, as :class:`~agentrl.algos.rollout.trajectory.Trajectory` records with
    ``termination='demonstration'`` and zero logprobs. Returns ``(trajectories + demonstrations, groups guided)``.
    """
    out = list(trajectories)
    guided = 0
    for members in group_indices(int(t.group_id) for t in trajectories):
        samples = [trajectories[i] for i in members if trajectories[i].termination != "error"]
        if not samples:
            continue
        demo = demos.get(samples[0].task)
        if demo is None:
            continue
        ids, mask, reward = demo
        if max(t.reward for t in samples) >= reward:
            continue
        out.append(Trajectory(token_ids=list(ids), loss_mask=list(mask), logprobs=[0.0] * len(ids),
                              prompt_len=mask.index(1) if 1 in mask else len(ids), reward=float(reward),
                              group_id=samples[0].group_id, task=samples[0].task, termination="demonstration"))
        guided += 1
    return out, guided


def shaped_demo_loss(logprobs: torch.Tensor, advantages: torch.Tensor, gamma: float) -> torch.Tensor:
    """LUFFY's per-token loss on demonstration tokens, ``-A * p / (p + gamma)`` with ``p = exp(logprobs)``
    (``[B, T]``; ``advantages`` ``[B]`` or ``[B, T]``)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    p = torch.exp(logprobs)
    return -advantages * p / (p + gamma)


#: The most a ReLIFT demonstration token may pull against a GRPO token (weight times advantage) before a run is
#: refused: at the main job's settings (groups of 8, guidance_coef 1) it is 16x, and the committed ``relift``
#: runs measured SFT on a few demonstrations per step rather than RL (docs/algorithms/grpo.md).
RELIFT_MAX_RATIO = 10.0
#: The mean |advantage| of a group of 0/1 rewards is 2p(1-p) <= 0.5 (Dr. GRPO: rewards minus the group mean).
MAX_MEAN_ADVANTAGE = 0.5


def max_mean_advantage(scale_std: bool, group_size: int) -> float:
    """The largest mean |advantage| of a group of ``group_size`` 0/1 rewards (``p`` of them 1): without std scaling
    ``2p(1-p) <= 0.5`` (:data:`MAX_MEAN_ADVANTAGE`); divided by the group's sample std (``scale_std``, GRPO's
    default) ``2 sqrt(p(1-p)) sqrt((G-1)/G) <= sqrt((G-1)/G)``, both at ``p = 1/2`` (0.935 at G = 8)."""
    if not scale_std:
        return MAX_MEAN_ADVANTAGE
    return math.sqrt((group_size - 1) / group_size) if group_size > 1 else MAX_MEAN_ADVANTAGE


def relift_weight_ratio(grpo: Any, group_size: int, reply_tokens: int) -> float:
    """The least ratio of a ReLIFT demonstration token's pull to a GRPO token's in one step, in the case most
    favourable to GRPO: every group unsolved (one demonstration per task, as long as a sample) and the largest mean
    advantage of 0/1 rewards (:func:`max_mean_advantage`: 0.5, or ``sqrt((G-1)/G)`` with ``scale_std``). A GRPO
    token weighs ``|A| / (S L)`` (``token_mean``, ``S`` samples of ``L`` tokens; ``seq_mean`` the same for equal
    lengths) or ``|A| / (S norm_tokens)`` (``seq_mean_token_sum_norm``); a demonstration token ``c / (T L)`` with
    ``T = S / group_size`` demonstrations (:func:`relift_demo_rows`). The ratio does not depend on the learning
    rate: both terms are scaled by it, and Adam normalises their sum, so the larger term sets the direction at any
    rate. With fewer unsolved groups it is larger (``group_size`` times at one unsolved group of
    ``tasks_per_step``)."""
    ratio = grpo.guidance_coef * group_size / max_mean_advantage(grpo.scale_std, group_size)
    if grpo.aggregation == "seq_mean_token_sum_norm":
        ratio *= grpo.norm_tokens / max(1, reply_tokens)
    return ratio


def check_relift_balance(grpo: Any, group_size: int, reply_tokens: int) -> None:
    """Refuse ``grpo.guidance='relift'`` whose demonstration term would outweigh the GRPO term by more than
    :data:`RELIFT_MAX_RATIO` (ValueError, one line naming the ``guidance_coef`` that keeps it within);
    ``reply_tokens``: the most action tokens an episode samples (``max_new_tokens`` x ``max_turns``)."""
    if grpo.guidance != "relift":
        return
    ratio = relift_weight_ratio(grpo, group_size, reply_tokens)
    if ratio > RELIFT_MAX_RATIO:
        coef = grpo.guidance_coef * RELIFT_MAX_RATIO / ratio
        step = 10 ** (math.floor(math.log10(coef)) - 1)
        coef = math.floor(coef / step + 1e-9) * step  # two digits, rounded down: the value named must fit
        raise ValueError(
            f"grpo.guidance=relift: each demonstration token would pull at least {ratio:.0f}x as hard as a GRPO token "
            f"(guidance_coef {grpo.guidance_coef:g}, groups of {group_size}, {grpo.aggregation}; more when fewer "
            f"groups are unsolved), at any learning rate: set grpo.guidance_coef <= {coef:.2g} or use "
            "grpo.guidance=luffy")


def relift_demo_rows(demonstrations: Sequence[Trajectory], first_index: int, coef: float) -> list[TrainRow]:
    """``guidance='relift'``'s rows: each demonstration as an off-policy
    :class:`~agentrl.algos.objectives.batching. TrainRow` whose action tokens weigh ``coef / N_d`` (``N_d``:
    the action tokens of all of them), so the loss term ``sum w_t * -log p_t`` is ``coef`` times their mean
    NLL. ``meta["index"]`` counts on from ``first_index``."""
    total = sum(sum(d.loss_mask) for d in demonstrations)
    return [TrainRow(list(d.token_ids), list(d.loss_mask), [0.0] * len(d.token_ids),
                     [coef / total if m else 0.0 for m in d.loss_mask], 0.0, off_policy=True,
                     meta={"index": first_index + k})
            for k, d in enumerate(demonstrations) if sum(d.loss_mask)]


def demo_loss(mode: str, logprobs: torch.Tensor, advantages: torch.Tensor, gamma: float) -> torch.Tensor:
    """The per-token loss of demonstration tokens: LUFFY's shaped term (``'luffy'``) or the NLL
    (``'relift'``)."""
    return -logprobs if mode == "relift" else shaped_demo_loss(logprobs, advantages, gamma)


def demo_stats(logprobs: torch.Tensor, off_mask: torch.Tensor) -> dict[str, Any]:
    """``demo_tokens`` and ``demo_prob_mean`` over the demonstration tokens ``off_mask`` (bool ``[B, T]``)."""
    n = int(off_mask.sum())
    if not n:
        return {"demo_tokens": 0}
    return {"demo_tokens": n, "demo_prob_mean": float(torch.exp(logprobs.detach()[off_mask]).mean())}


__all__ = ["GUIDANCE", "MAX_MEAN_ADVANTAGE", "RELIFT_MAX_RATIO", "add_demonstrations", "check_guidance",
           "check_relift_balance", "demo_loss", "demo_stats", "relift_demo_rows", "relift_weight_ratio",
           "shaped_demo_loss"]
