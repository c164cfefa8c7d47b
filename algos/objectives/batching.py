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
each put in the first micro-batch whose padded cost ``rows x longest`` stays within the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.algos.rollout.trajectory import all_equal, group_indices

__all__ = ["AGGREGATIONS", "SeqItem", "all_equal", "collate", "group_indices", "pack_microbatches",
           "policy_gradient_items", "token_weights"]

AGGREGATIONS = ("token_mean", "seq_mean")


def token_weights(masks: Sequence[Sequence[int]], mode: str = "token_mean") -> list[list[float]]:
    """Per-token loss weights over a whole batch; the weighted sum of per-token losses is the batch loss.

    ``token_mean``: every action token of the batch weighs ``1 / (total action tokens)`` (long answers count
    per token — DAPO's global token mean). ``seq_mean``: each sequence's action tokens share ``1 / S`` equally,
    ``S`` = sequences with at least one action token (GRPO's original sample-level mean). Non-action tokens
    get 0. Sequences without action tokens get all zeros.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")
    counts = [sum(1 for m in mask if m) for mask in masks]
    if mode == "token_mean":
        total = sum(counts)
        return [[(1.0 / total if m else 0.0) for m in mask] for mask in masks]
    n_seqs = sum(1 for c in counts if c)
    return [[(1.0 / (c * n_seqs) if m else 0.0) for m in mask] for mask, c in zip(masks, counts, strict=True)]


def pack_microbatches(lengths: Sequence[int], token_budget: int, rows: Sequence[int] | None = None) -> list[list[int]]:
    """First-fit-decreasing packing of items into micro-batches of at most ``token_budget`` padded tokens.

    Args:
        lengths: each item's length in tokens (its longest sequence, for a multi-row item such as a DPO pair).
        token_budget: the limit on ``rows x max length`` per micro-batch. An item alone over the budget gets
            a micro-batch of its own (it is never cut).
        rows: sequences per item (default 1 each; 2 for a chosen/rejected pair).

    Returns:
        Lists of item indices; every index appears exactly once; within a micro-batch, longest first.
    """
    if token_budget <= 0:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    rows = list(rows) if rows is not None else [1] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    bin_rows: list[int] = []
    for i in order:
        for b, members in enumerate(bins):
            longest = lengths[members[0]]  # sorted decreasing: the first member is the longest
            if (bin_rows[b] + rows[i]) * longest <= token_budget:
                members.append(i)
                bin_rows[b] += rows[i]
                break
        else:
            bins.append([i])
            bin_rows.append(rows[i])
    return bins


@dataclass
class SeqItem:
    """One training sequence with everything a loss needs, aligned token by token."""

    token_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    """The sampler's logprobs (pi_old); zeros when the algorithm has none (SFT)."""
    weights: list[float]
    """Per-token loss weights over the whole logical batch (:func:`token_weights`)."""
    advantage: float = 0.0
    """Trajectory-level advantage, broadcast over its action tokens."""
    seq_weight: float = 0.0
    """Weight of a sequence-level loss term (a DPO pair's 1/P, on both of its rows)."""
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.token_ids)


def collate(items: Sequence[SeqItem], pad_id: int, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Right-pad ``items`` into tensors: ``input_ids``, ``attention_mask``, ``loss_mask``, ``old_logprobs``,
    ``weights`` (all ``[B, T]``), ``advantages`` and ``seq_weights`` (``[B]``). Padding has mask and weight 0."""
    width = max(len(it) for it in items)
    n = len(items)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.float32)
    old = torch.zeros((n, width), dtype=torch.float32)
    weights = torch.zeros((n, width), dtype=torch.float32)
    for r, it in enumerate(items):
        k = len(it)
        input_ids[r, :k] = torch.tensor(it.token_ids, dtype=torch.long)
        attention[r, :k] = 1
        loss_mask[r, :k] = torch.tensor(it.loss_mask, dtype=torch.float32)
        old[r, :k] = torch.tensor(it.old_logprobs, dtype=torch.float32)
        weights[r, :k] = torch.tensor(it.weights, dtype=torch.float32)
    adv = torch.tensor([it.advantage for it in items], dtype=torch.float32)
    seq_w = torch.tensor([it.seq_weight for it in items], dtype=torch.float32)
    out = {"input_ids": input_ids, "attention_mask": attention, "loss_mask": loss_mask,
           "old_logprobs": old, "weights": weights, "advantages": adv, "seq_weights": seq_w}
    return {k: v.to(device) for k, v in out.items()}


def policy_gradient_items(trajectories: Sequence[Any], advantages: Sequence[float],
                          aggregation: str = "token_mean") -> tuple[list[SeqItem], dict[str, float]]:
    """Training items for GRPO/PPO: one per trajectory, its advantage broadcast over its action tokens.

    Groups (``group_id``) whose advantages are all zero carry no signal and are left out; so are trajectories
    without action tokens. Token weights (:func:`token_weights`) are computed over the items kept, so the
    aggregation is a mean over what actually trains. Returns ``(items, stats)`` with ``skipped_groups``.
    """
    groups = group_indices(int(t.group_id) for t in trajectories)
    keep, skipped = [], 0
    for members in groups:
        if all(advantages[i] == 0 for i in members):
            skipped += 1
            continue
        keep.extend(i for i in members if sum(trajectories[i].loss_mask) > 0)
    keep.sort()
    weights = token_weights([trajectories[i].loss_mask for i in keep], aggregation) if keep else []
    items = [SeqItem(list(trajectories[i].token_ids), list(trajectories[i].loss_mask),
                     list(trajectories[i].logprobs), w, float(advantages[i]), meta={"index": i})
             for i, w in zip(keep, weights, strict=True)]
    return items, {"skipped_groups": skipped, "groups": len(groups)}
