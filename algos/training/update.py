"""One update: ``algo.epochs`` optimizer steps over prepared row groups, micro-batched by a token budget.

Row groups are packed into micro-batches (:func:`~agentrl.algos.objectives.batching.pack_microbatches`); each
micro-batch's loss is backpropagated and the gradients accumulate; then the gradient is clipped and the
optimizer steps once per epoch. Token weights were fixed on the whole batch by ``algo.prepare``, so the
accumulated gradient is the full-batch gradient whatever the packing. :class:`StepStats` gathers what the
micro-batches report into the step's ``train/*`` metrics.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from agentrl.algos.objectives.base import Algorithm, RowGroup
from agentrl.algos.objectives.batching import SeqItem, collate, common_prefix_len, pack_microbatches
from agentrl.algos.objectives.logprobs import MIN_SHARED_PREFIX, token_logprobs
from agentrl.algos.training.distributed import Ranks, all_reduce_gradients, gather_objects
from agentrl.algos.training.reference import Reference

logger = logging.getLogger(__name__)


class StepStats:
    """The statistics of one update, accumulated micro-batch by micro-batch.

    Per-micro-batch loss statistics are combined as :meth:`Algorithm.loss` documents: the ``summed`` counts
    summed (first epoch), ``*_max`` maximised, the rest averaged with each micro-batch's ``stats[mean_weight]``
    as its weight (:attr:`Algorithm.mean_weight`, :attr:`Algorithm.summed_stats`). Entropy is a token mean over
    action tokens; ``logprob_gap`` (trainer vs sampler logprobs of the sampled tokens, first epoch) measures how
    far the sampler's numerics are from the trainer's.
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
        """Record one micro-batch (``sampled``: its rows carry the sampler's logprobs)."""
        m = batch["loss_mask"] > 0
        n_tok = int(m.sum())
        self.entropy[0] += float(entropy[m].sum())
        self.entropy[1] += n_tok
        if epoch == 0:
            self.out["train/padded_tokens"] += batch["input_ids"].numel()
            self.out["train/real_tokens"] += int(batch["attention_mask"].sum())
            if sampled:
                gap = (logprobs.detach() - batch["old_logprobs"]).abs()[m]
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


# Peak-RSS growth of one GRPO step per token, in units of hidden_size x (bytes per parameter element), fitted
# (growth = FIXED_BYTES + tokens x per-token bytes) to benchmarks/memory.py-style steps of 4 x 512 and 16 x 512
# tokens on SmolLM2-135M bf16 (30 layers, hidden 576), LoRA r=16 all-linear, CPU: 1.45 MB/token without
# checkpointing (logprob_chunk 1024), 0.27 MB/token with it (logprob_chunk 256). The figures are RSS, so they
# include what the allocator keeps of freed transients, not only the tensors autograd saves (measured: 0.12 GiB
# saved at 2,048 checkpointed tokens against 1.6 GiB of RSS growth).
LAYER_UNITS = 42.0
"""One decoder layer per token, without checkpointing (1.45 MB / 30 layers / 1,152 bytes)."""
CHECKPOINT_UNITS = 6.5
"""One checkpointed layer per token: its kept input plus what the recomputation leaves in the allocator
((0.27 MB / 1,152 bytes - LAYER_UNITS) / 30 layers)."""
FIXED_BYTES = 2**30
"""The step's growth that does not scale with the micro-batch (LM-head chunks, gradients, optimizer state on
first use): 0.7-1.1 GiB in the fits above; the budget is taken net of it."""
DEFAULT_BUDGET_GB = 2.0
"""TrainConfig.memory_budget_gb's default, used when :func:`update` gets ``micro_batch_tokens='auto'``."""
AUTO_CHECKPOINT_TOKENS = 4096
"""gradient_checkpointing='auto' with micro_batch_tokens='auto': on when the budget holds fewer tokens than this
without it."""


def activation_bytes_per_token(model, checkpointing: bool) -> float:
    """Estimated bytes one token of a micro-batch adds to a training step's peak RSS: ``layers x LAYER_UNITS x
    hidden x element bytes`` without checkpointing; with it, every layer keeps ``CHECKPOINT_UNITS`` and one layer
    at a time is recomputed (``LAYER_UNITS``). Calibrated on one model and row length (see the constants above),
    not a bound: attention that saves ``T x T`` scores grows faster with long rows."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    hidden, layers = int(cfg.hidden_size), int(cfg.num_hidden_layers)
    elem = next(base.parameters()).element_size()
    unit = hidden * elem
    if checkpointing:
        return unit * (layers * CHECKPOINT_UNITS + LAYER_UNITS)
    return unit * layers * LAYER_UNITS


def memory_plan(model, *, gradient_checkpointing: bool | str, micro_batch_tokens: int | str,
                memory_budget_gb: float, min_tokens: int = 256) -> tuple[bool, int]:
    """``(checkpointing, micro_batch_tokens)`` for a run: the ``'auto'`` settings resolved against
    ``memory_budget_gb`` (GiB of activations per micro-batch, see :func:`activation_bytes_per_token`).

    ``gradient_checkpointing='auto'``: with a fixed ``micro_batch_tokens``, on when that many tokens would exceed
    the budget without it; with ``'auto'`` tokens, on when the budget holds fewer than
    :data:`AUTO_CHECKPOINT_TOKENS` tokens without it. ``micro_batch_tokens='auto'``: the tokens the budget holds
    (with or without checkpointing, as decided), rounded down to a multiple of 256, at least ``min_tokens``.
    """
    if gradient_checkpointing not in (True, False, "auto"):
        raise ValueError(f"gradient_checkpointing must be true, false or 'auto', got {gradient_checkpointing!r}")
    if micro_batch_tokens != "auto" and (isinstance(micro_batch_tokens, bool) or not isinstance(micro_batch_tokens, int)
                                         or micro_batch_tokens < 1):
        raise ValueError(f"micro_batch_tokens must be a positive int or 'auto', got {micro_batch_tokens!r}")
    if isinstance(memory_budget_gb, bool) or not isinstance(memory_budget_gb, (int, float)) or not memory_budget_gb > 0:
        raise ValueError(f"memory_budget_gb must be > 0 (GiB), got {memory_budget_gb!r}")
    budget = memory_budget_gb * 2**30 - FIXED_BYTES

    def fits(ckpt: bool) -> int:
        return max(0, int(budget // activation_bytes_per_token(model, ckpt)))

    ckpt = gradient_checkpointing
    if ckpt == "auto":
        if micro_batch_tokens == "auto":
            ckpt = fits(False) < AUTO_CHECKPOINT_TOKENS
        else:
            ckpt = fits(False) < micro_batch_tokens
    if micro_batch_tokens == "auto":
        tokens = fits(ckpt) // 256 * 256
        if tokens < min_tokens:
            logger.warning("memory_budget_gb=%s holds about %d tokens of %s; using micro_batch_tokens=%d",
                           memory_budget_gb, tokens, type(model).__name__, min_tokens)
        return bool(ckpt), max(tokens, min_tokens)
    return bool(ckpt), int(micro_batch_tokens)


M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (malloc.h)."""


@functools.cache
def _glibc():
    """glibc as a ctypes library (loaded once: :func:`trim_heap` runs every step), or None where the C library is
    another (macOS, musl, Windows)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


def set_malloc_mmap_threshold(mib: int) -> bool:
    """Make glibc ``malloc`` serve blocks of at least ``mib`` MiB with ``mmap`` and unmap them when freed
    (``mallopt(M_MMAP_THRESHOLD)``), so an update's freed activations leave the process's RSS instead of staying
    in the heap for the next allocation. Process-wide and permanent for the process; it also switches off
    glibc's dynamic threshold, which otherwise rises to the largest block freed (up to 32 MiB) and keeps such
    blocks. Returns False where the C library is not glibc: nothing changes there."""
    if isinstance(mib, bool) or not isinstance(mib, int) or mib < 1:
        raise ValueError(f"malloc_mmap_threshold_mb must be a positive int (MiB) or null, got {mib!r}")
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, mib * 2**20))


def trim_heap() -> bool:
    """Give the free pages of glibc's heaps back to the OS (``malloc_trim(0)``): what many small freed tensors
    leave behind between steps. True when glibc released something; False otherwise or off glibc."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))


def set_gradient_checkpointing(model, enabled: bool) -> None:
    """Turn transformers' activation checkpointing of the decoder layers on or off (a PEFT model: on its base).

    Non-reentrant (``use_reentrant=False``): it needs no input that requires grad, so the hook transformers adds
    for the reentrant variant is removed again. A layer checkpoints only in a forward pass with grad enabled
    while the layer is in training mode, so sampling (``no_grad``, eval mode) and the no-grad logprob passes run
    as without it, KV cache included; :func:`checkpointed_layers` puts the layers in training mode for the
    update's forward passes, which otherwise run in eval mode.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not enabled:
        if _ckpt_layers(base):
            off = getattr(base, "activation_checkpointing_disable", None) or base.gradient_checkpointing_disable
            off()
        return
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(f"gradient_checkpointing: {type(base).__name__} does not support activation checkpointing; "
                         "set gradient_checkpointing=false")
    kwargs = {"use_reentrant": False}
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.x; the old name warns
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(base, "disable_input_require_grads"):
        base.disable_input_require_grads()


def _ckpt_layers(model) -> list:
    return [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)
            and hasattr(m, "_can_checkpoint_with_cache")]


@contextlib.contextmanager
def checkpointed_layers(model) -> Iterator[int]:
    """Inside: the checkpointing decoder layers themselves are in training mode (their sub-modules keep their
    mode, so dropout stays off in an eval-mode update); yields how many layers checkpoint (0: none)."""
    checkpointing = _ckpt_layers(model)
    layers = [m for m in checkpointing if not m.training]
    for m in layers:
        m.training = True
    try:
        yield len(checkpointing)
    finally:
        for m in layers:
            m.training = False


def shared_prefix(rows: Sequence[SeqItem], min_prefix: int = MIN_SHARED_PREFIX) -> int:
    """Tokens every row opens with (0 when fewer than ``min_prefix``: the forward pass then does not share
    them, see :mod:`~agentrl.algos.objectives.logprobs`)."""
    if len(rows) < 2:
        return 0
    n = common_prefix_len([r.token_ids for r in rows])
    return n if n >= min_prefix else 0


def micro_batches(row_groups: Sequence[RowGroup], token_budget: int) -> list[list[SeqItem]]:
    """The rows of each micro-batch: row groups packed first-fit-decreasing within ``token_budget`` tokens
    computed (the rows' common prefix counted once per micro-batch)."""
    lengths = [max(len(row) for row in g) for g in row_groups]
    shared = shared_prefix([row for g in row_groups for row in g])
    bins = pack_microbatches(lengths, token_budget, [len(g) for g in row_groups], shared=shared)
    return [[row for i in b for row in row_groups[i]] for b in bins]


def update(model, optimizer, algo: Algorithm, row_groups: Sequence[RowGroup], *, lr: float, temperature: float,
           pad_id: int, micro_batch_tokens: int | str, logprob_chunk: int, max_grad_norm: float,
           reference: Reference | None = None, sampled: bool | None = None,
           after_step: Callable[[], None] | None = None, ranks: Ranks | None = None,
           trim: bool = False) -> dict[str, Any]:
    """``algo.epochs`` optimizer steps over ``row_groups``; returns the ``train/*`` metrics.

    ``temperature`` divides the logits of the loss's logprobs (the rollout temperature, or 1 when
    :attr:`Algorithm.sampler_temperature` is False: the trainer decides). ``reference`` gives the reference
    logprobs when ``algo.needs_reference``. ``sampled`` (default ``algo.needs_rollouts``): the rows' old
    logprobs are the sampler's at this temperature, so ``logprob_gap`` is measured. The forward passes run in
    eval mode (dropout off) unless :attr:`Algorithm.dropout`; the reference pass always does.
    ``after_step`` runs after every optimizer step (the trainer publishes the new weights to the sampler there).
    ``trim``: give glibc's free heap pages back to the OS after every micro-batch (:func:`trim_heap`), so what one
    micro-batch freed in small blocks does not stay in the RSS under the next one's (the trainer's
    ``malloc_mmap_threshold_mb`` setting turns it on).
    ``micro_batch_tokens='auto'``: :func:`memory_plan` at :data:`DEFAULT_BUDGET_GB` (the trainer passes the size
    it resolved from its config). Decoder layers that checkpoint (:func:`set_gradient_checkpointing`) do so in
    these forward passes, eval mode or not (:func:`checkpointed_layers`).

    With ``ranks`` of a data-parallel run (:mod:`~agentrl.algos.training.distributed`), ``row_groups`` is the
    whole batch, identical on every rank: each rank backpropagates its share, the gradients are summed over the
    ranks before clipping, and the returned statistics are those of the whole batch on every rank.
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
        micro_batch_tokens = memory_plan(model, gradient_checkpointing=bool(_ckpt_layers(model)),
                                         micro_batch_tokens="auto", memory_budget_gb=DEFAULT_BUDGET_GB)[1]
    batches = micro_batches(ranks.shard(row_groups), micro_batch_tokens)
    try:
        for epoch in range(algo.epochs):
            optimizer.zero_grad(set_to_none=True)
            epoch_loss = 0.0
            for rows in batches:
                batch = collate(rows, pad_id, device)
                ref = None
                if algo.needs_reference:  # first: it may switch adapters, which must not happen under a graph
                    ref = reference.logprobs(batch["input_ids"], batch["attention_mask"], temperature=temperature,
                                             chunk_size=logprob_chunk, positions=batch["loss_mask"])
                model.train(algo.dropout)
                with checkpointed_layers(model):
                    lp, ent = token_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                             temperature=temperature, chunk_size=logprob_chunk, return_entropy=True,
                                             positions=batch["loss_mask"])
                loss, loss_stats = algo.loss(lp, ref, batch)
                loss.backward()
                epoch_loss += loss.item()
                stats.add(epoch, batch, lp, ent, loss_stats, sampled=sampled)
                if trim:
                    del batch, ref, lp, ent, loss
                    trim_heap()
            all_reduce_gradients(params, ranks)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if after_step is not None:
                after_step()
            stats.optimizer_step(epoch_loss, float(grad_norm))
    finally:
        model.eval()
    if ranks.distributed:
        everyone = gather_objects(stats, ranks)
        stats.merge(everyone[: ranks.rank] + everyone[ranks.rank + 1:])
    return stats.result()


@torch.no_grad()
def rows_logprobs(model, rows: Sequence[SeqItem], *, temperature: float, pad_id: int,
                  micro_batch_tokens: int | str, logprob_chunk: int) -> list[list[float]]:
    """The model's logprobs of each row's action tokens (0 elsewhere), micro-batched, without gradients
    (``micro_batch_tokens='auto'``: :func:`memory_plan` at :data:`DEFAULT_BUDGET_GB` without checkpointing)."""
    device = next(model.parameters()).device
    if micro_batch_tokens == "auto":  # no gradients: nothing is saved, so the training estimate is conservative
        micro_batch_tokens = memory_plan(model, gradient_checkpointing=False, micro_batch_tokens="auto",
                                         memory_budget_gb=DEFAULT_BUDGET_GB)[1]
    out: list[list[float] | None] = [None] * len(rows)
    for b in pack_microbatches([len(r) for r in rows], micro_batch_tokens, shared=shared_prefix(rows)):
        batch = collate([rows[i] for i in b], pad_id, device)
        lp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], temperature=temperature,
                            chunk_size=logprob_chunk, positions=batch["loss_mask"])
        for r, i in enumerate(b):
            out[i] = lp[r, : len(rows[i])].float().tolist()
    return out  # type: ignore[return-value]
