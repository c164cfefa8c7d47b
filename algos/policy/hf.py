"""The transformers backend: :class:`HFPolicy`, batched decoding with per-trajectory KV-cache reuse.

torch loads when a policy is built and transformers' cache internals (``_kv_cache.py``) when it first samples, so
importing this module stays light. ``_fresh_copy`` builds the plain copy that LoRA updates are merged into.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.algos.models.lora import is_peft, iter_merged_weights
from agentrl.algos.policy._decoding import Decoding, Row
from agentrl.algos.policy.base import (
    DEFAULT_MAX_BATCH_TOKENS,
    GenerationRequest,
    GenerationResult,
    Policy,
    SamplingParams,
)

logger = logging.getLogger(__name__)



@dataclass
class _CacheEntry:
    tokens: list[int]
    kv: list[tuple[Any, Any]] | None  # per layer (keys [1, H, n, D], values [1, H, n, D]) of tokens[len(prefix):]
    prefix: Any = None  # a _cascade.Prefix shared with other trajectories (its keys/values are not copied), or None


class HFPolicy(Policy):
    """A transformers causal LM as policy, with batched decoding and per-trajectory KV-cache reuse.

    Args:
        model: a causal LM (a PEFT model too: it is merged into a merged copy at once, see
            :meth:`update_weights`).
        tokenizer: its tokenizer.
        max_batch_size: decode at most this many requests together (None: no bound); the others wait, in order,
            and join the batch as its rows finish.
        max_batch_tokens: decode together at most this many tokens of context: a request counts its prompt beyond
            the batch's shared prefix (which ``cascade`` keeps once) plus its ``max_new_tokens``; requests that do
            not fit wait, in order, and join as rows finish; one longer than the bound runs alone (a group's
            identical uncached prompts count as one: they prefill once). Bounds the KV
            caches and the prefill transients of many long prompts (and speeds them up: see
            ``docs/collector.md``); None: no bound. Default :data:`DEFAULT_MAX_BATCH_TOKENS`.
        compact_fraction: finished rows stay in the decode batch (fed padding) until at least this fraction of
            it has finished, then leave together; queued requests join a running batch once at least this
            fraction of its running rows' count is waiting. Trades wasted rows against cache copies and prefill
            passes.
        share_weights: with a PEFT ``model``, sample through that model itself (its base weights shared with
            the trainer, the adapter applied unmerged on every forward pass) instead of a merged copy:
            no second copy of the base weights, at the cost of the LoRA matmuls in every decode step. The
            trainer must not update the model while this policy samples (the synchronous trainer never does).
        cascade: when all rows of a call share a prompt prefix of at least 32 tokens, keep its keys/values once
            (also across turns: the stored caches of the trajectories reference it) and attend to it with one
            matrix product for all rows, merged with each row's own attention (``_cascade.py``). Models whose
            attention cannot take it (sliding window, soft-capping, no attention interface) decode as without.
        compile_decode: ``off`` (default: eager, as before), ``on`` or ``auto`` (on for a model on CUDA): run each
            decode step's one-token forward pass through ``torch.compile`` with fixed-size (bucketed) KV buffers,
            so shapes repeat and graphs are reused (``_compiled_decode.py``; with or without a cascade prefix);
            prefill stays eager; where compiling fails one line is logged and decoding runs eager.

    Batches are continuous (:meth:`session`): a request added while a batch runs joins it (see
    :class:`~agentrl.algos.policy._decoding.Decoding`);
    :meth:`generate` is one session that returns when its requests are done. The KV cache of each ``key`` is kept
    after its request finishes (the sampled tokens except the last, whose keys were never
    computed), so the next turn prefills only the tokens the collector appended. Caches are stored per
    trajectory (after the shared prefix, with ``cascade``) and left-padded into a batch for each call; padding is
    masked, never attended.
    """

    def __init__(self, model, tokenizer, *, max_batch_size: int | None = None,
                 max_batch_tokens: int | None = DEFAULT_MAX_BATCH_TOKENS, compact_fraction: float = 0.25,
                 share_weights: bool = False, cascade: bool = True, compile_decode: str = "off"):
        import torch

        for name, value in (("max_batch_size", max_batch_size), ("max_batch_tokens", max_batch_tokens)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if compile_decode not in ("off", "on", "auto"):
            raise ValueError(f"compile_decode must be one of off, on, auto, got {compile_decode!r}")
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.compact_fraction = compact_fraction
        self.share_weights = share_weights
        self.cascade = cascade
        self._cascade_state = None  # the running call's _cascade.CascadeState, when it decodes with a shared prefix
        self._cache: dict[Hashable, _CacheEntry] = {}
        self._copy = None  # a plain (non-PEFT) copy refreshed by update_weights
        self.model = model
        self.model.eval()
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._torch = torch
        self.compile_decode = compile_decode
        self._compiled_decode = None  # a _compiled_decode.CompiledDecode where compile_decode is on for this device
        if compile_decode != "off":
            from agentrl.algos.policy import _compiled_decode

            if _compiled_decode.wants_compile(compile_decode, self.device):
                self._compiled_decode = _compiled_decode.CompiledDecode(self.device)
        self.stats = {"prefill_tokens": 0, "decode_steps": 0, "generated_tokens": 0, "shared_prefix_calls": 0,
                      "compiled_decode_steps": 0, "decode_seconds": 0.0, "compile_seconds": 0.0}
        """Running counters: tokens run through prefill (padding excluded), decode forward passes (of them run
        compiled), tokens sampled, batches decoded with a shared prefix ("calls": a batch was one call before
        batches took joiners), seconds in decode forward passes (compiling excluded; on CUDA the launch time, the
        kernels may still run) and seconds compiling decode graphs."""
        if is_peft(model):
            self.update_weights(model)

    # ---------------------------------------------------------------- weights
    def update_weights(self, source_model) -> None:
        """Sample with ``source_model``'s current weights from now on, without touching ``source_model``.

        * A PEFT (LoRA) model: its adapters are merged in fp32 into a separate plain copy of the architecture
          (the *merged copy*, created on the first call in this policy's dtype, refreshed in place
          afterwards), so sampling pays no unmerged-adapter cost and the trainer's base weights are never
          modified (a merge/unmerge round trip in bf16 is not exact). The merge streams layer by layer
          (:func:`~agentrl.algos.models.lora.iter_merged_weights`): the transient is one layer in fp32, not
          the model. Every weight of the merged copy must be written (tied weights count once), else
          ``RuntimeError``; an adapter that cannot be merged raises
          :class:`~agentrl.algos.models.lora.MergeError` before any write.
        * With ``share_weights``, a PEFT model is sampled as it is (no copy, no merge): only the cache is reset.
        * A plain model: if it is the model being sampled, nothing to do; otherwise its weights are copied into
          the merged copy.
        """
        torch = self._torch
        if is_peft(source_model) and self.share_weights:
            self._copy = source_model.get_base_model()  # the LoRA-injected model: adapter applied unmerged
        elif is_peft(source_model):
            own = self._copy_like(source_model.get_base_model()).state_dict()
            written: set[int] = set()
            with torch.no_grad():
                for name, tensor in iter_merged_weights(source_model):
                    if name not in own:
                        raise RuntimeError(f"merged LoRA weight {name} has no place in the merged copy")
                    own[name].copy_(tensor)
                    written.add(own[name].data_ptr())
            missing = [k for k, p in own.items() if p.data_ptr() not in written]
            if missing:
                raise RuntimeError(f"the merged LoRA weights lack {missing[:5]}: the merged copy would keep "
                                   "random weights there")
        elif source_model is self.model:
            return
        else:
            state = source_model.state_dict()
            with torch.no_grad():
                for name, p in self._copy_like(source_model).state_dict().items():
                    p.copy_(state[name])
        self.model = self._copy
        self._cache.clear()  # cached keys/values belong to the old weights
        self.version += 1

    def _copy_like(self, model):
        """The merged copy, created from ``model``'s architecture (in this policy's dtype and device) on first
        use."""
        if self._copy is None:
            self._copy = _fresh_copy(model, self.dtype, self.device)
        return self._copy

    # ---------------------------------------------------------------- cache
    def release(self, keys: Iterable[Hashable]) -> None:
        for k in keys:
            self._cache.pop(k, None)

    def cached_tokens(self, key: Hashable) -> int:
        """How many tokens of ``key`` are cached (0 if none)."""
        e = self._cache.get(key)
        return len(e.tokens) if e else 0

    def _take_cache(self, req: GenerationRequest):
        """The usable cache of a request: (prefix, kv, tokens cached) with at least one prompt token pending."""
        if req.key is None or req.key not in self._cache:
            return None, None, 0
        entry = self._cache.pop(req.key)
        limit = min(len(entry.tokens), len(req.prompt_ids) - 1)
        n = 0
        while n < limit and entry.tokens[n] == req.prompt_ids[n]:
            n += 1
        if n < len(entry.tokens):
            logger.debug("cache of %r cut from %d to %d tokens (prompt diverges)", req.key, len(entry.tokens), n)
        return (entry.prefix, entry.kv, n) if n else (None, None, 0)

    # ---------------------------------------------------------------- generation
    def session(self, sampling: SamplingParams) -> Decoding:
        """An open generation whose :meth:`~Decoding.step` is one decode step of one batch; requests added while
        it runs join that batch (see :class:`~agentrl.algos.policy._decoding.Decoding`)."""
        return Decoding(self, sampling)

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        if not requests:
            return []
        done: dict[int, GenerationResult] = {}
        with self.session(sampling) as s:
            tickets = [s.add(r) for r in requests]
            while s.pending:
                done.update(s.step())
        return [done[t] for t in tickets]

    def _forward(self, ids, cache, attention_mask, position_ids):
        from agentrl.algos.policy._kv_cache import model_forward

        if self._cascade_state is not None:
            self._cascade_state.set_mask(attention_mask)
        return model_forward(self.model, ids, cache, attention_mask, position_ids)

    def _compute_prefix(self, tokens):
        """Keys/values [1, Hkv, n, D] per layer of ``tokens`` from position 0 (one forward pass, no shared prefix)."""
        from agentrl.algos.policy._kv_cache import new_cache, out_cache

        torch = self._torch
        ids = torch.tensor([list(tokens)], device=self.device)
        out = self._forward(ids, new_cache(reserve=0), torch.ones_like(ids), torch.arange(len(tokens))[None].to(ids))
        self.stats["prefill_tokens"] += len(tokens)
        return [(layer.keys.clone(), layer.values.clone()) for layer in out_cache(out).layers]

    def _prefill(self, rows: list[Row]):
        """Run the rows' pending tokens after their cached ones: (cache, mask [B, C], next positions [B], last
        logits [B, V]). Identical uncached prompts (a group's) are computed once, then expanded."""
        from agentrl.algos.policy._kv_cache import out_cache

        torch = self._torch
        unique: dict[tuple, int] = {}
        expand: list[int] = []
        prefill_rows: list[Row] = []
        for i, row in enumerate(rows):
            sig = ("p", tuple(row.pending)) if row.kv is None else ("r", i)
            if sig not in unique:
                unique[sig] = len(prefill_rows)
                prefill_rows.append(row)
            expand.append(unique[sig])
        cache, mask, positions = self._pack(prefill_rows)
        ids, pos_new, mask = self._pack_pending(prefill_rows, mask, positions)
        out = self._forward(ids.to(self.device), cache, mask.to(self.device), pos_new.to(self.device))
        self.stats["prefill_tokens"] += sum(len(r.pending) for r in prefill_rows)
        cache = out_cache(out)
        logits = out.logits[:, -1, :]
        if len(prefill_rows) < len(rows):
            index = torch.tensor(expand, device=self.device)
            cache.batch_select_indices(index)
            logits = logits.index_select(0, index)
            mask = mask.index_select(0, index.cpu())
        positions = torch.tensor([r.offset + r.cached + len(r.pending) for r in rows])
        return cache, mask, positions, logits

    def _pack(self, rows: list[Row]):
        """Left-pad the rows' cached keys/values into one batch cache; returns (cache, mask [B, C], positions)."""
        from agentrl.algos.policy._kv_cache import new_cache

        torch = self._torch
        width = max(r.cached for r in rows)
        reserve = max(len(r.pending) for r in rows) + max(r.request.max_new_tokens for r in rows) + 1
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for b, r in enumerate(rows):
            if r.cached:
                mask[b, width - r.cached:] = 1
        positions = torch.tensor([r.offset + r.cached for r in rows])
        if width == 0:
            return new_cache(reserve=reserve), mask, positions
        ref = next(r.kv for r in rows if r.kv is not None)
        layers = []
        for layer, (k0, v0) in enumerate(ref):
            k = k0.new_zeros((len(rows), k0.shape[1], width, k0.shape[3]))
            v = v0.new_zeros((len(rows), v0.shape[1], width, v0.shape[3]))
            for b, r in enumerate(rows):
                if r.cached:
                    assert r.kv is not None  # a row with cached tokens holds their keys and values
                    k[b, :, width - r.cached:] = r.kv[layer][0][0]
                    v[b, :, width - r.cached:] = r.kv[layer][1][0]
            layers.append((k, v))
        return new_cache(layers, reserve=reserve), mask, positions

    def _pack_pending(self, rows: list[Row], mask, positions):
        """Right-align the rows' pending tokens after the cache (padding between is masked)."""
        torch = self._torch
        width = max(len(r.pending) for r in rows)
        ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        pos = torch.zeros((len(rows), width), dtype=torch.long)
        new_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            n = len(r.pending)
            ids[b, width - n:] = torch.tensor(r.pending)
            pos[b, width - n:] = torch.arange(r.offset + r.cached, r.offset + r.cached + n)
            new_mask[b, width - n:] = 1
        return ids, pos, torch.cat([mask, new_mask], dim=1)

    def _store(self, row: Row, cache, mask, line: int, prefix=None) -> None:
        """Keep a finished row's keys/values (after the shared prefix) under its key (all but the last sampled
        token)."""
        if row.request.key is None:
            return
        keep = mask[line].nonzero().squeeze(1).to(self.device)  # an index: one gather per layer, not a bool mask each
        kv = [(layer.keys[line:line + 1].index_select(2, keep), layer.values[line:line + 1].index_select(2, keep))
              for layer in cache.layers]
        tokens = list(row.request.prompt_ids) + row.out_ids[:-1]
        if kv and kv[0][0].shape[2] != len(tokens) - row.offset:
            raise RuntimeError(f"internal cache error: {kv[0][0].shape[2]} cached positions for "
                               f"{len(tokens) - row.offset} tokens")
        self._cache[row.request.key] = _CacheEntry(tokens, kv, prefix)


def _fresh_copy(model, dtype, device):
    """A new model of ``model``'s architecture (random weights, to be overwritten) in ``dtype`` on ``device``."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    fresh = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return fresh.to(device).eval()
