"""One update: ``algo.epochs`` optimizer steps over prepared row groups, micro-batched by a token budget.

Row groups are packed into micro-batches (:func:`~agentrl.algos.objectives.batching.pack_microbatches`); each
micro-batch's loss is backpropagated and the gradients accumulate; then the gradient is clipped and the
optimizer steps once per epoch. Token weights were fixed on the whole batch by ``algo.prepare``, so the
accumulated gradient is the full-batch gradient whatever the packing. The rows' common prefix (the system prompt
and tools) runs through the decoder once per epoch, not once per micro-batch (:func:`update_prefix`; the
micro-batches' gradients reach it through :class:`~agentrl.algos.objectives.logprobs.PrefixPass`); the
reference policy's logprobs are computed once, before the first epoch. :class:`StepStats` gathers what the
micro-batches report into the step's ``train/*`` metrics. The policy's passes run PEFT's plain LoRA layers as one
autograd function each (:func:`~agentrl.algos.training.fused_lora.fused_lora`: no float32 copies of the
activations on a bf16 model).

Rollout correction (:func:`resolve_correction`, the ``correction`` keys of GRPO and PPO): the first epoch's
forward pass gives the trainer's own logprobs of the sampled tokens under the weights that sampled them
(``pi_old``; dropout is off for rollout algorithms, so the same numbers a separate no-gradient pass would
give, at no extra cost); they replace the rollout logprobs as the ratio's denominator, are kept for the later
epochs, and :func:`~agentrl.algos.objectives.ppo.importance_weights` of ``pi_old / pi_rollout`` weighs each
token's policy-gradient term (``train/is_weight_mean``, ``train/is_clipped_frac`` or
``train/is_masked_frac``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from agentrl.algos.objectives.base import Algorithm, RowGroup
from agentrl.algos.objectives.batching import TrainRow, collate, pack_microbatches
from agentrl.algos.objectives.logprobs import MIN_SHARED_PREFIX, prefix_pass, token_logprobs
from agentrl.algos.objectives.ppo import RolloutCorrection, importance_weights
from agentrl.algos.rollout.trajectory import shared_prefix_len
from agentrl.algos.training.compiled import compiled_passes
from agentrl.algos.training.distributed import Ranks, all_reduce_gradients, gather_objects
from agentrl.algos.training.fused_lora import fused_lora
from agentrl.algos.training.memory_plan import (
    DEFAULT_BUDGET_GB,
    checkpointed_layers,
    checkpointing_layers,
    memory_plan,
    trim_heap,
)
from agentrl.algos.training.reference import Reference

logger = logging.getLogger(__name__)


class StepStats:
    """The statistics of one update, accumulated micro-batch by micro-batch.

    Per-micro-batch loss statistics are combined as :meth:`Algorithm.loss` documents: the ``summed`` counts
    summed (first epoch), ``*_max`` maximised, the rest averaged with each micro-batch's
    ``stats[mean_weight]`` as its weight (:attr:`Algorithm.mean_weight`, :attr:`Algorithm.summed_stats`).
    Entropy is a token mean over action tokens; ``logprob_gap`` (trainer vs rollout logprobs of the sampled
    tokens, first epoch) measures how far the policy backend's numerics are from the trainer's.
    """

    def __init__(self, lr: float, mean_weight: str = "loss_tokens", summed: Sequence[str] = ("loss_tokens",)):
        self.mean_weight = mean_weight
        self.summed = tuple(summed)
        self.out: dict[str, Any] = {"train/loss_tokens": 0, "train/padded_tokens": 0, "train/real_tokens": 0,
                                    "train/optimizer_steps": 0, "train/lr": lr}
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)
        self.maxes: dict[str, float] = {}
        self.entropy = [0.0, 0]
        self.gap = [0.0, 0, 0.0]  # sum, count, max
        self.losses: list[float] = []
        self.grad_norms: list[float] = []

    def add(self, epoch: int, batch: dict[str, torch.Tensor], logprobs: torch.Tensor, entropy: torch.Tensor,
            stats: dict[str, float], *, sampled: bool) -> None:
        """Record one micro-batch (``sampled``: its rows carry the rollout logprobs)."""
        m = batch["loss_mask"] > 0
        n_tok = int(m.sum())
        self.entropy[0] += float(entropy[m].sum())
        self.entropy[1] += n_tok
        if epoch == 0:
            self.out["train/padded_tokens"] += batch["input_ids"].numel()
            self.out["train/real_tokens"] += int(batch["attention_mask"].sum())
            if sampled:  # against the rollout logprobs (a correction moved them to "rollout_logprobs")
                m = m & (batch["off_policy"] == 0)[:, None]  # demonstrations have no rollout logprobs
                gap = (logprobs.detach() - batch.get("rollout_logprobs", batch["old_logprobs"])).abs()[m]
                if gap.numel():
                    self.gap[0] += float(gap.sum())
                    self.gap[1] += gap.numel()
                    self.gap[2] = max(self.gap[2], float(gap.max()))
        w = stats[self.mean_weight] if self.mean_weight in stats else n_tok
        for k, v in stats.items():
            if k in self.summed:
                if epoch == 0:
                    self.sums[k] += v
            elif k.endswith("_max"):
                self.maxes[k] = max(self.maxes.get(k, float("-inf")), v)
            else:
                self.sums[k] += v * w
                self.counts[k] += w

    def optimizer_step(self, loss: float, grad_norm: float) -> None:
        self.losses.append(loss)
        self.grad_norms.append(grad_norm)
        self.out["train/optimizer_steps"] += 1

    def merge(self, others: Sequence[StepStats]) -> None:
        """Fold in the statistics of the other ranks of a data-parallel step (same optimizer steps, their own
        micro-batches): counts and sums add, maxima take the maximum, epoch losses add (each rank's loss is its
        share of the batch loss); the gradient norm, taken after the all-reduce, is the same on every rank."""
        for o in others:
            for k in ("train/loss_tokens", "train/padded_tokens", "train/real_tokens"):
                self.out[k] += o.out[k]
            for k, v in o.sums.items():
                self.sums[k] += v
            for k, v in o.counts.items():
                self.counts[k] += v
            for k, v in o.maxes.items():
                self.maxes[k] = max(self.maxes.get(k, float("-inf")), v)
            self.entropy = [self.entropy[0] + o.entropy[0], self.entropy[1] + o.entropy[1]]
            self.gap = [self.gap[0] + o.gap[0], self.gap[1] + o.gap[1], max(self.gap[2], o.gap[2])]
            self.losses = [a + b for a, b in zip(self.losses, o.losses, strict=True)]

    def result(self) -> dict[str, Any]:
        out = dict(self.out)
        if not self.losses:
            return out
        out["train/loss"] = sum(self.losses) / len(self.losses)
        out["train/grad_norm"] = sum(self.grad_norms) / len(self.grad_norms)
        out["train/entropy"] = self.entropy[0] / self.entropy[1] if self.entropy[1] else 0.0
        if self.gap[1]:
            out["train/logprob_gap"] = self.gap[0] / self.gap[1]
            out["train/logprob_gap_max"] = self.gap[2]
        for k, v in self.sums.items():
            out[f"train/{k}"] = v / self.counts[k] if k in self.counts else v
        out.update({f"train/{k}": v for k, v in self.maxes.items()})
        return out


def forward_shared_prefix_len(rows: Sequence[TrainRow], min_prefix: int = MIN_SHARED_PREFIX) -> int:
    """The rows' :func:`~agentrl.algos.rollout.trajectory.shared_prefix_len` as the forward pass shares it: 0
    for one row or under ``min_prefix`` tokens (the forward pass then does not share them, see
    :mod:`~agentrl.algos.objectives.logprobs`)."""
    if len(rows) < 2:
        return 0
    n = shared_prefix_len([r.token_ids for r in rows])
    return n if n >= min_prefix else 0


def micro_batches(row_groups: Sequence[RowGroup], token_budget: int) -> list[list[TrainRow]]:
    """The rows of each micro-batch: row groups packed first-fit-decreasing within ``token_budget`` tokens held
    (the rows' common prefix counted once per micro-batch: computed once per update, see :func:`update_prefix`,
    its activations are held under each)."""
    lengths = [max(len(row) for row in g) for g in row_groups]
    shared = forward_shared_prefix_len([row for g in row_groups for row in g])
    bins = pack_microbatches(lengths, token_budget, [len(g) for g in row_groups], shared=shared)
    return [[row for i in b for row in row_groups[i]] for b in bins]


def update_prefix(batches: Sequence[Sequence[TrainRow]]) -> int:
    """Tokens that every row of several micro-batches opens with, run once for all of them
    (:class:`~agentrl.algos.objectives.logprobs.PrefixPass`) instead of once per micro-batch; 0 for a single
    micro-batch (its forward pass shares its prefix itself) or a prefix under ``MIN_SHARED_PREFIX``. At least one
    token of every row comes after it."""
    if len(batches) < 2:
        return 0
    rows = [row for b in batches for row in b]
    n = min(forward_shared_prefix_len(rows), min(len(row) for row in rows) - 1)
    return n if n >= MIN_SHARED_PREFIX else 0


def resolve_correction(algo: Algorithm, policy, sampling) -> RolloutCorrection | None:
    """The rollout correction a run applies: None, or the algorithm's ``correction`` resolved.

    Only per-token policy-gradient algorithms (:attr:`Algorithm.token_level`: GRPO, PPO) with a ``correction``
    key have one. ``'auto'`` means ``'tis'`` unless the rollout logprobs are the trainer's own: ``policy`` (a
    wrapper's ``inner`` policy) is an in-process :class:`~agentrl.algos.policy.hf.HFPolicy` sampling in fp32
    (its ``dtype``: the trained weights, a copy merged in fp32 or the model itself, with the logits the trainer
    recomputes), and ``sampling`` (``CollectorConfig`` or ``SamplingParams``: ``temperature``, ``top_k``,
    ``top_p``) truncates nothing, so ``pi_rollout == pi_old`` up to the rounding of a batched decode (1e-4 in
    fp32) and a correction would only cost. A server (vLLM, SGLang: other kernels, other numerics), an
    in-process policy in bf16 or fp16 (the cached batched decode and the training forward round differently,
    by up to nats on a token: without a correction the PPO clip zeroes such tokens on-policy) or top-k/top-p
    (whose logprobs are renormalised over the kept tokens, while the trainer's are over the whole vocabulary)
    turns it on.
    """
    config = algo.config
    mode = getattr(config, "correction", "none")
    if not algo.token_level or mode == "none":
        return None
    if mode == "auto":
        while hasattr(policy, "inner"):
            policy = policy.inner
        from agentrl.algos.policy.hf import HFPolicy

        truncated = sampling.temperature > 0 and ((sampling.top_k or 0) > 0 or sampling.top_p < 1)
        full_precision = getattr(policy, "dtype", None) in (torch.float32, torch.float64)
        if isinstance(policy, HFPolicy) and full_precision and not truncated:
            return None
        mode = "tis"
    return RolloutCorrection(mode, config.correction_level, config.correction_cap)


def apply_update(model, optimizer, algo: Algorithm, row_groups: Sequence[RowGroup], *, lr: float,
                 temperature: float, pad_id: int, micro_batch_tokens: int | str, logprob_chunk: int,
                 max_grad_norm: float, reference: Reference | None = None, sampled: bool | None = None,
                 after_step: Callable[[], None] | None = None, ranks: Ranks | None = None,
                 trim: bool = False, correction: RolloutCorrection | None = None,
                 compile_mode: str = "off") -> dict[str, Any]:
    """``algo.epochs`` optimizer steps over ``row_groups``; returns the ``train/*`` metrics.

    ``temperature`` divides the logits of the loss's logprobs (the rollout temperature, or 1 when
    :attr:`Algorithm.uses_rollout_temperature` is False: the trainer decides). ``reference`` gives the
    reference logprobs when ``algo.needs_reference``. ``sampled`` (default ``algo.needs_rollouts``): the rows'
    old logprobs are the rollout's at this temperature, so ``logprob_gap`` is measured. The forward passes run
    in eval mode (dropout off) unless :attr:`Algorithm.dropout`; the reference pass always does.
    ``after_step`` runs after every optimizer step (the trainer publishes the new weights to the policy
    there).
    ``trim``: give glibc's free heap pages back to the OS after every micro-batch (:func:`trim_heap`), so what one
    micro-batch freed in small blocks does not stay in the RSS under the next one's (the trainer's
    ``malloc_mmap_threshold_mb`` setting turns it on).
    ``micro_batch_tokens='auto'``: :func:`~agentrl.algos.training.memory_plan.memory_plan` at
    :data:`DEFAULT_BUDGET_GB` (the trainer passes the size it resolved from its config). Decoder layers that
    checkpoint (:func:`~agentrl.algos.training.memory_plan.set_gradient_checkpointing`) do so in these forward
    passes, eval mode or not (:func:`checkpointed_layers`).

    With ``ranks`` of a data-parallel run (:mod:`~agentrl.algos.training.distributed`), ``row_groups`` is the
    whole batch, identical on every rank: each rank backpropagates its share, the gradients are summed over the
    ranks before clipping, and the returned statistics are those of the whole batch on every rank.

    ``correction`` (:func:`resolve_correction`; only when ``sampled`` and ``algo.token_level``): the loss gets
    ``batch["old_logprobs"]`` = the first epoch's own logprobs (``pi_old``), ``batch["rollout_logprobs"]`` =
    the rows' recorded ones, and ``batch["is_weights"]`` (see the module docstring).

    ``compile_mode`` (TrainConfig ``compile``): the passes run :func:`~agentrl.algos.training.compiled.compiled_passes`
    (compiled decoder-layer MLPs and norms, eager where compiling fails); the seconds spent compiling in this call
    are returned as ``time/compile``.
    """
    if algo.needs_reference and reference is None:
        raise ValueError(f"{type(algo).__name__} needs a reference policy: pass reference=Reference(model) "
                         "(built when the training stage starts)")
    sampled = algo.needs_rollouts if sampled is None else sampled
    ranks = ranks or Ranks()
    stats = StepStats(lr, algo.mean_weight, algo.summed_stats)
    if not row_groups:
        return stats.result()
    for g in optimizer.param_groups:
        g["lr"] = lr
    params = [p for g in optimizer.param_groups for p in g["params"]]
    device = next(model.parameters()).device
    if micro_batch_tokens == "auto":
        micro_batch_tokens = memory_plan(model, gradient_checkpointing=bool(checkpointing_layers(model)),
                                         micro_batch_tokens="auto", memory_budget_gb=DEFAULT_BUDGET_GB)[1]
    batches = micro_batches(ranks.shard(row_groups), micro_batch_tokens)
    prefix_len = update_prefix(batches)
    correct = correction is not None and sampled and algo.token_level
    kept: dict[int, tuple[torch.Tensor, torch.Tensor, dict[str, float]]] = {}  # micro-batch -> pi_old, weights
    refs = None
    if algo.needs_reference:  # before any policy pass: switching adapters must not happen under a pending graph
        refs = []
        for rows in batches:
            batch = collate(rows, pad_id, device)
            refs.append(reference.logprobs(batch["input_ids"], batch["attention_mask"], temperature=temperature,
                                           chunk_size=logprob_chunk, positions=batch["loss_mask"]))
    passes = contextlib.ExitStack()  # the policy's forward and backward passes run PEFT's LoRA layers fused
    passes.enter_context(fused_lora(model))
    clock = passes.enter_context(compiled_passes(model, compile_mode))
    try:
        for epoch in range(algo.epochs):
            optimizer.zero_grad(set_to_none=True)
            epoch_loss = 0.0
            prefix = None
            for i, rows in enumerate(batches):
                batch = collate(rows, pad_id, device)
                ref = refs[i] if refs is not None else None
                model.train(algo.dropout)
                with checkpointed_layers(model):
                    if prefix is None and prefix_len:
                        prefix = prefix_pass(model, batch["input_ids"][0, :prefix_len])
                    lp, ent = token_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                             temperature=temperature, chunk_size=logprob_chunk, return_entropy=True,
                                             positions=batch["loss_mask"], prefix=prefix)
                if correct:
                    if epoch == 0:  # the weights that sampled these rows: pi_old
                        pi_old = lp.detach().float()
                        sampled_mask = batch["loss_mask"] * (1 - batch["off_policy"])[:, None]  # not demonstrations
                        w, is_stats = importance_weights(pi_old, batch["old_logprobs"], sampled_mask, correction)
                        if algo.epochs > 1:
                            kept[i] = (pi_old, w, is_stats)
                    else:
                        pi_old, w, is_stats = kept[i]
                    batch["rollout_logprobs"] = batch["old_logprobs"]
                    batch["old_logprobs"] = pi_old
                    batch["is_weights"] = w
                loss, loss_stats = algo.loss(lp, ref, batch)
                if correct:
                    loss_stats = {**loss_stats, **is_stats}
                loss.backward()
                epoch_loss += loss.item()
                stats.add(epoch, batch, lp, ent, loss_stats, sampled=sampled)
                if trim:
                    del batch, ref, lp, ent, loss
                    trim_heap()
            if prefix is not None:
                prefix.backward()
                del prefix
            all_reduce_gradients(params, ranks)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if after_step is not None:
                after_step()
            stats.optimizer_step(epoch_loss, float(grad_norm))
    finally:
        passes.close()
        model.eval()
    if ranks.distributed:
        everyone = gather_objects(stats, ranks)
        stats.merge(everyone[: ranks.rank] + everyone[ranks.rank + 1:])
    out = stats.result()
    if clock is not None:
        out["time/compile"] = clock.seconds
    return out


@torch.no_grad()
def rows_logprobs(model, rows: Sequence[TrainRow], *, temperature: float, pad_id: int,
                  micro_batch_tokens: int | str, logprob_chunk: int) -> list[list[float]]:
    """The model's logprobs of each row's action tokens (0 elsewhere), micro-batched, without gradients
    (``micro_batch_tokens='auto'``: :func:`~agentrl.algos.training.memory_plan.memory_plan` at
    :data:`DEFAULT_BUDGET_GB` without checkpointing)."""
    device = next(model.parameters()).device
    if micro_batch_tokens == "auto":  # no gradients: nothing is saved, so the training estimate is conservative
        micro_batch_tokens = memory_plan(model, gradient_checkpointing=False, micro_batch_tokens="auto",
                                         memory_budget_gb=DEFAULT_BUDGET_GB)[1]
    out: list[list[float] | None] = [None] * len(rows)
    shared = forward_shared_prefix_len(rows)
    bins = pack_microbatches([len(r) for r in rows], micro_batch_tokens, shared=shared)
    prefix_len, prefix = update_prefix([[rows[i] for i in b] for b in bins]), None
    with fused_lora(model):
        for b in bins:
            batch = collate([rows[i] for i in b], pad_id, device)
            if prefix is None and prefix_len:
                prefix = prefix_pass(model, batch["input_ids"][0, :prefix_len])
            lp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], temperature=temperature,
                                chunk_size=logprob_chunk, positions=batch["loss_mask"], prefix=prefix)
            for r, i in enumerate(b):
                out[i] = lp[r, : len(rows[i])].float().tolist()
    return out  # type: ignore[return-value]
