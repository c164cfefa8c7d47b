"""Micro-batches packed by a token budget, weighted so accumulated gradients equal the global-mean loss.

A logical training step sees a whole batch of trajectories (all groups of one rollout) but memory only allows a
few thousand tokens per forward pass. The batch is split into micro-batches, each one's loss is backpropagated
and the gradients accumulate; then one optimizer step. Done naively (mean loss per micro-batch, averaged over
micro-batches), a micro-batch of three short answers weighs as much as one of thirty long ones and the gradient
depends on how the batch happened to be cut. Here every action token carries a **weight fixed on the whole
batch before it is cut** (:func:`token_weights`), and a micro-batch's loss is ``sum(weight * per_token_loss)``;
summing those over micro-batches gives exactly the global loss, so the accumulated gradient is the full-batch
gradient whatever the packing.

Packing (:func:`pack_microbatches`) is first-fit-decreasing on padded size: sequences sorted longest first,
each put in the first micro-batch whose padded cost ``rows x longest`` stays within the budget. When every row
opens with the same ``shared`` tokens (the system prompt and tools), the forward pass runs them once per
micro-batch (:mod:`~agentrl.algos.objectives.logprobs`), so the cost counted is ``shared + rows x (longest -
shared)``: the tokens actually computed, not the padded rectangle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrl.algos.objectives.base import LazyModule
from agentrl.algos.rollout.trajectory import group_indices

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # the config class is read without torch (TrainConfig's section)

__all__ = ["AGGREGATIONS", "LOSS_DENOMINATORS", "TrainRow", "advantages_without_errors", "collate", "env_errors",
           "pack_microbatches", "policy_gradient_rows", "token_weights"]

AGGREGATIONS = ("token_mean", "seq_mean", "seq_mean_token_sum_norm")
#: What the loss normaliser counts (:func:`policy_gradient_rows`): ``sampled``, every sampled trajectory (or
#: its tokens) of the batch, the groups dropped for a zero advantage included, as TRL's ``dapo``/``dr_grpo`` and
#: verl's ``token-mean`` do; ``kept``, only the rows that train (this project's behaviour before issue 60: the
#: step grows with the share of groups whose rewards are all equal).
LOSS_DENOMINATORS = ("sampled", "kept")


def token_weights(masks: Sequence[Sequence[int]], mode: str = "token_mean",
                  norm_tokens: int | None = None) -> list[list[float]]:
    """Per-token loss weights over a whole batch; the weighted sum of per-token losses is the batch loss.

    ``token_mean``: every action token of the batch weighs ``1 / (total action tokens)`` (long answers count
    per token — DAPO's global token mean). ``seq_mean``: each sequence's action tokens share ``1 / S`` equally,
    ``S`` = sequences with at least one action token (GRPO's original sample-level mean).
    ``seq_mean_token_sum_norm``: every action token weighs ``1 / (S * norm_tokens)``, a constant per token
    (Dr. GRPO: each sequence's token *sum* divided by a fixed length instead of its own length; TRL's
    ``loss_type="dr_grpo"`` divides by ``max_completion_length``, verl's mode of this name by a constant).
    Non-action tokens get 0. Sequences without action tokens get all zeros.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")
    counts = [sum(1 for m in mask if m) for mask in masks]
    if mode == "token_mean":
        total = sum(counts)
        return [[(1.0 / total if m else 0.0) for m in mask] for mask in masks]
    n_seqs = sum(1 for c in counts if c)
    if mode == "seq_mean_token_sum_norm":
        if not norm_tokens or norm_tokens <= 0:
            raise ValueError(f"aggregation 'seq_mean_token_sum_norm' needs norm_tokens > 0, got {norm_tokens!r}")
        w = 1.0 / (n_seqs * norm_tokens) if n_seqs else 0.0
        return [[(w if m else 0.0) for m in mask] for mask in masks]
    return [[(1.0 / (c * n_seqs) if m else 0.0) for m in mask] for mask, c in zip(masks, counts, strict=True)]


def pack_microbatches(lengths: Sequence[int], token_budget: int, rows: Sequence[int] | None = None,
                      shared: int = 0) -> list[list[int]]:
    """First-fit-decreasing packing of items into micro-batches of at most ``token_budget`` computed tokens.

    Args:
        lengths: each item's length in tokens (its longest sequence, for a multi-row item such as a DPO pair).
        token_budget: the limit on ``shared + rows x (max length - shared)`` per micro-batch (``rows x max
            length`` when nothing is shared). An item alone over the budget gets a micro-batch of its own (it
            is never cut).
        rows: sequences per item (default 1 each; 2 for a chosen/rejected pair).
        shared: leading tokens common to every item's rows, held once per micro-batch (0: none); at most
            the shortest length.

    Returns:
        Lists of item indices; every index appears exactly once; within a micro-batch, longest first.
    """
    if token_budget <= 0:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    rows = list(rows) if rows is not None else [1] * len(lengths)
    if shared < 0 or (lengths and shared > min(lengths)):
        raise ValueError(f"shared must be in [0, shortest length], got {shared}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    bin_rows: list[int] = []
    for i in order:
        for b, members in enumerate(bins):
            longest = lengths[members[0]]  # sorted decreasing: the first member is the longest
            if shared + (bin_rows[b] + rows[i]) * (longest - shared) <= token_budget:
                members.append(i)
                bin_rows[b] += rows[i]
                break
        else:
            bins.append([i])
            bin_rows.append(rows[i])
    return bins


@dataclass
class TrainRow:
    """One training row: a token sequence with everything a loss needs, aligned token by token."""

    token_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    """The rollout logprobs (pi_old); zeros when the algorithm has none (SFT)."""
    weights: list[float]
    """Per-token loss weights over the whole logical batch (:func:`token_weights`)."""
    advantage: float = 0.0
    """Trajectory-level advantage, broadcast over its action tokens."""
    token_advantages: list[float] | None = None
    """Per-token advantages (turn credit, :mod:`~agentrl.algos.objectives.turn_credit`); None: ``advantage``
    on every token."""
    seq_weight: float = 0.0
    """Weight of a sequence-level loss term (a DPO pair's 1/P, on both of its rows)."""
    off_policy: bool = False
    """The tokens were not sampled by the policy (a demonstration, :mod:`~agentrl.algos.objectives.guidance`):
    ``old_logprobs`` are zeros, and ``logprob_gap`` and the rollout correction leave the row out."""
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.token_ids)


def collate(rows: Sequence[TrainRow], pad_id: int, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Right-pad ``rows`` into tensors: ``input_ids``, ``attention_mask``, ``loss_mask``, ``old_logprobs``,
    ``weights`` (all ``[B, T]``), ``advantages`` (``[B]``, or ``[B, T]`` when a row has
    :attr:`TrainRow.token_advantages`), ``seq_weights`` and ``off_policy`` (1.0 for a :attr:`TrainRow.off_policy`
    row; ``[B]``). Padding has mask and weight 0."""
    width = max(len(row) for row in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.float32)
    old = torch.zeros((n, width), dtype=torch.float32)
    weights = torch.zeros((n, width), dtype=torch.float32)
    for r, it in enumerate(rows):
        k = len(it)
        input_ids[r, :k] = torch.tensor(it.token_ids, dtype=torch.long)
        attention[r, :k] = 1
        loss_mask[r, :k] = torch.tensor(it.loss_mask, dtype=torch.float32)
        old[r, :k] = torch.tensor(it.old_logprobs, dtype=torch.float32)
        weights[r, :k] = torch.tensor(it.weights, dtype=torch.float32)
    if any(row.token_advantages is not None for row in rows):  # [B, T]: rows without their own broadcast theirs
        adv = torch.zeros((n, width), dtype=torch.float32)
        for r, it in enumerate(rows):
            adv[r, :len(it)] = (torch.tensor(it.token_advantages, dtype=torch.float32)
                                if it.token_advantages is not None else it.advantage)
    else:
        adv = torch.tensor([row.advantage for row in rows], dtype=torch.float32)
    seq_w = torch.tensor([row.seq_weight for row in rows], dtype=torch.float32)
    off = torch.tensor([float(row.off_policy) for row in rows], dtype=torch.float32)
    out = {"input_ids": input_ids, "attention_mask": attention, "loss_mask": loss_mask,
           "old_logprobs": old, "weights": weights, "advantages": adv, "seq_weights": seq_w, "off_policy": off}
    return {k: v.to(device) for k, v in out.items()}


def env_errors(trajectories: Sequence[Any]) -> set[int]:
    """Indices of the trajectories that ended with ``termination == "error"`` (an env bug, not the policy's doing).

    They are no training signal: an algorithm leaves them out of its groups, baselines and pairs, and counts
    them (``train/env_error_trajectories``).
    """
    return {i for i, t in enumerate(trajectories) if getattr(t, "termination", None) == "error"}


def advantages_without_errors(trajectories: Sequence[Any], advantage_fn) -> tuple[list[float | None], int]:
    """``advantage_fn(rewards, group_ids)`` over the trajectories that are not env errors.

    Returns ``(advantages, errors)``: one entry per trajectory, ``None`` for an env error (left out of its
    group's baseline and of training), and the number of such trajectories.
    """
    errors = env_errors(trajectories)
    ok = [i for i in range(len(trajectories)) if i not in errors]
    adv_ok = advantage_fn([trajectories[i].reward for i in ok], [trajectories[i].group_id for i in ok])
    adv: list[float | None] = [None] * len(trajectories)
    for i, a in zip(ok, adv_ok, strict=True):
        adv[i] = a
    return adv, len(errors)


def policy_gradient_rows(trajectories: Sequence[Any], advantages: Sequence[float | None],
                          aggregation: str = "token_mean", *, keep_zero_groups: bool = False,
                          norm_tokens: int | None = None,
                          denominator: str = "sampled") -> tuple[list[TrainRow], dict[str, float]]:
    """Training rows for GRPO/PPO: one per trajectory, its advantage broadcast over its action tokens.

    A trajectory whose advantage is ``None`` (an env error, see :func:`advantages_without_errors`) is left out,
    and so are trajectories without action tokens. Groups (``group_id``) whose advantages are all zero carry no
    policy-gradient signal and are left out too, unless ``keep_zero_groups`` (a loss with a per-token term
    besides the advantage, GRPO's KL, needs their tokens). Token weights (:func:`token_weights`) are computed
    over ``denominator`` (:data:`LOSS_DENOMINATORS`): ``sampled`` (default) counts every trajectory with action
    tokens, those of dropped groups included (env errors aside), so a token weighs the same whatever share of
    the groups had equal rewards, as in TRL and verl, and dropping a zero-advantage group changes nothing but
    the work; ``kept`` counts only the rows kept, a mean over what trains. Returns ``(rows, stats)`` with
    ``skipped_groups`` (groups with nothing kept) and ``groups``.
    """
    if denominator not in LOSS_DENOMINATORS:
        raise ValueError(f"loss_denominator must be one of {LOSS_DENOMINATORS}, got {denominator!r}")
    groups = group_indices(int(t.group_id) for t in trajectories)
    keep, sampled, skipped = [], [], 0
    for members in groups:
        usable = [i for i in members if advantages[i] is not None and sum(trajectories[i].loss_mask) > 0]
        sampled.extend(usable)
        if not usable or (not keep_zero_groups and all(advantages[i] == 0 for i in usable)):
            skipped += 1
            continue
        keep.extend(usable)
    keep.sort()
    basis = sorted(sampled) if denominator == "sampled" else keep
    by_index = dict(zip(basis, token_weights([trajectories[i].loss_mask for i in basis], aggregation, norm_tokens),
                        strict=True)) if keep else {}
    weights = [by_index[i] for i in keep]
    rows = [TrainRow(list(trajectories[i].token_ids), list(trajectories[i].loss_mask),
                    list(trajectories[i].logprobs), w, float(advantages[i]), meta={"index": i})
            for i, w in zip(keep, weights, strict=True)]
    return rows, {"skipped_groups": skipped, "groups": len(groups)}
