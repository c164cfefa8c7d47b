"""Turn credit for GRPO: a GiGPO-style turn advantage from states that several samples of a group share.

GRPO gives every token of a trajectory the same advantage, so in a multi-turn episode the reply that made the
right tool call and the reply that then botched the answer are credited alike. GiGPO (Feng et al. 2025,
"Group-in-Group Policy Optimization for LLM Agent Training") adds a turn advantage (its "step-level" one)
without a critic: the samples of a group start from one task, so many of them pass through *the same
intermediate state* (here: the same observations so far, i.e. the same tool results), and the replies made
from one such anchor state can be compared with each other, like a group.

With ``grpo.turn_weight = w > 0`` (``grpo.turn_gamma = g``), for trajectory ``i`` and its turn ``k``::

    s_ik   = (o_i0, ..., o_i(k-1))               the anchor state: the observations before reply k (k = 0: the task)
    G_ik   = sum_{j >= k} g^(j - k) r_ij          the discounted return from turn k (r_ij: Turn.reward, the env's
                                                  step reward; an outcome-only env rewards the last turn)
    A_ik^S = G_ik - mean{G_jl : s_jl = s_ik}      over the turns of the group at that state (/ their std with
                                                  scale_std); 0 for a state only one turn reached
    A_t    = A_i + w * A_ik^S                     for every token t of reply k (A_i: GRPO's episode advantage)

Turn 0's anchor is the task itself, shared by the whole group, so ``A_i0^S`` is a discounted episode advantage
(shorter successes score higher); later anchors compare continuations from the same tool results: the credit
of the reply *after* a given call. Observations stand for the env's state (equal tool results, equal state),
which holds for envs whose answers depend on the call only. Groups whose episode rewards are all equal are still
dropped before the update when ``beta = 0`` (as plain GRPO drops them); demonstrations (guidance) have no turns
and keep their episode advantage. Metrics: ``train/turn_anchor_turns`` (turns whose anchor state at least one
other turn of the group shares) and ``train/turn_adv_abs_mean``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentrl.algos.rollout.trajectory import Trajectory, group_indices


def check_turn_credit(weight: float, gamma: float) -> None:
    """Raise ``ValueError`` naming the key for turn-credit settings that mean nothing."""
    if weight < 0:
        raise ValueError(f"turn_weight must be >= 0 (0 = episode advantages only), got {weight!r}")
    if not 0 < gamma <= 1:
        raise ValueError(f"turn_gamma must be in (0, 1], got {gamma!r}")


def turn_returns(trajectory: Trajectory, gamma: float) -> list[float]:
    """``G_k`` for each turn: the discounted sum of the turn rewards from turn ``k`` on."""
    out, g = [], 0.0
    for turn in reversed(trajectory.turns):
        g = float(turn.reward) + gamma * g
        out.append(g)
    return out[::-1]


def anchor_state(trajectory: Trajectory, k: int) -> tuple[str, ...]:
    """The state before reply ``k``: the observations of the turns before it (``()`` for the first reply)."""
    return tuple(t.observation for t in trajectory.turns[:k])


def turn_advantages(trajectories: Sequence[Trajectory], gamma: float, scale_std: bool = False,
                    eps: float = 1e-6) -> tuple[list[list[float]], dict[str, float]]:
    """``A^S`` per trajectory and turn (see the module docstring), over the anchor states of each group; env
    errors (``termination == 'error'``) take no part. Returns ``(advantages, stats)``."""
    adv = [[0.0] * len(t.turns) for t in trajectories]
    shared = total = 0
    for members in group_indices(int(t.group_id) for t in trajectories):
        buckets: dict[tuple[str, ...], list[tuple[int, int, float]]] = {}
        for i in members:
            t = trajectories[i]
            if t.termination == "error":
                continue
            for k, g in enumerate(turn_returns(t, gamma)):
                buckets.setdefault(anchor_state(t, k), []).append((i, k, g))
        for turns in buckets.values():
            total += len(turns)
            if len(turns) < 2:
                continue
            shared += len(turns)
            values = [g for _, _, g in turns]
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            for i, k, g in turns:
                a = g - mean
                adv[i][k] = (a / (std + eps) if std > 0 else 0.0) if scale_std else a
    flat = [abs(a) for row in adv for a in row]
    stats = {"turn_anchor_turns": shared, "turn_adv_abs_mean": sum(flat) / len(flat) if flat else 0.0}
    return adv, stats


def token_advantages(trajectory: Trajectory, episode_advantage: float, per_turn: Sequence[float],
                     weight: float) -> list[float]:
    """Per token: ``A_i + weight * A_ik^S`` (``per_turn[k]``) on the tokens of reply ``k``, ``A_i`` on other
    action tokens, 0 on the rest (prompt, observations, template)."""
    out = [episode_advantage if m else 0.0 for m in trajectory.loss_mask]
    for k, turn in enumerate(trajectory.turns):
        extra = weight * per_turn[k]
        for p in range(turn.prompt_len, turn.prompt_len + turn.completion_len):
            if trajectory.loss_mask[p]:
                out[p] += extra
    return out


__all__ = ["anchor_state", "check_turn_credit", "turn_advantages", "token_advantages", "turn_returns"]
