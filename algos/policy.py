"""Policy backends: one small interface from token prompts to sampled tokens with their log-probabilities.

A backend implements :class:`Policy`::

    class MyPolicy(Policy):
        tokenizer = ...                                   # the chat template lives here
        def generate(self, requests, sampling):           # list[GenerationRequest] -> list[GenerationResult]
            ...

Each :class:`GenerationRequest` carries the *whole* prompt of a turn as token ids (token-in), a per-request
token budget and seed, and an optional ``key`` naming the trajectory. The result holds the sampled ids
(token-out, never text), the log-probability of each under ``log_softmax(logits / temperature)`` (the
distribution before top-p/top-k truncation), and ``finish_reason`` (``"stop"``: a stop token was sampled and
is included; ``"length"``: the budget ran out). A backend may keep state per ``key`` (the KV cache of the
trajectory so far) and must drop it on :meth:`Policy.release`; a request whose prompt does not extend what a
key cached is still answered correctly (the cache is cut back to the common prefix).

Backends here:

* :class:`HFPolicy` — transformers, CPU or GPU: all requests of a call decoded together in one batch, identical
  prompts prefilled once, each key's KV cache kept across turns so a turn prefills only its new tokens.
* :class:`OpenAIPolicy` — an OpenAI-compatible ``/v1/completions`` server that takes token-id prompts and returns
  token ids and log-probabilities (vLLM, SGLang). :func:`serve_policy` serves any :class:`Policy` that way.
"""

from __future__ import annotations

import copy
import json
import logging
import queue
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class SamplingParams:
    """How to sample; shared by every request of one :meth:`Policy.generate` call."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (logprobs are then those of temperature 1)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches ``top_p`` (1 = off)."""
    top_k: int = 0
    """Keep the ``top_k`` most likely tokens (0 = off)."""
    stop_token_ids: tuple[int, ...] = ()
    """Sampling one of these ends the completion (the token is included in the output)."""


@dataclass
class GenerationRequest:
    """One completion to sample."""

    prompt_ids: list[int]
    """The whole prompt, as token ids."""
    max_new_tokens: int
    """At most this many tokens are sampled (>= 1)."""
    seed: int | None = None
    """Seeds this request's sampling (the same request and seed give the same tokens whatever the batch)."""
    key: Hashable | None = None
    """Names the trajectory: a backend may keep its KV cache under this key until :meth:`Policy.release`."""


@dataclass
class GenerationResult:
    """What a backend sampled for one request."""

    token_ids: list[int]
    logprobs: list[float]
    """``log_softmax(logits / temperature)`` at each sampled token (fp32)."""
    finish_reason: str = "stop"
    """``"stop"`` (a stop token was sampled; it is the last id) or ``"length"`` (``max_new_tokens`` reached)."""


class Policy:
    """The backend interface. Subclasses set ``tokenizer`` and implement :meth:`generate`."""

    tokenizer: Any = None

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        """Sample one completion per request (in request order)."""
        raise NotImplementedError

    def release(self, keys: Iterable[Hashable]) -> None:
        """Forget the state kept for ``keys`` (their trajectories have ended). The default keeps none."""

    def update_weights(self, source_model) -> None:
        """Sample with ``source_model``'s current weights from now on (called by trainers after each step)."""
        raise NotImplementedError(f"{type(self).__name__} cannot take new weights")


# ============================================================================================ sampling


def sample_tokens(logits, sampling: SamplingParams, generators: Sequence[Any]):
    """Pick one token per row of ``logits`` [B, V]; returns ``(tokens [B], logprobs [B])`` (fp32).

    The logprob is ``log_softmax(logits / T)`` at the chosen token (T = 1 when greedy), taken before top-k/top-p
    truncation. Row ``i`` draws from ``generators[i]``, so a row's draw does not depend on the other rows.
    """
    import torch

    logits = logits.float()
    if sampling.temperature <= 0:
        tokens = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]
    scaled = logits / sampling.temperature
    logp = torch.log_softmax(scaled, dim=-1)
    filtered = scaled
    if sampling.top_k and sampling.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, sampling.top_k, dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, dim=-1, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) >= sampling.top_p  # keeps the first token
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    # Inverse-CDF sampling with one uniform draw per row from the row's own generator (torch.multinomial costs
    # ~8 ms per 49k-token row on CPU; this is a batched cumsum and a binary search).
    cum = torch.softmax(filtered, dim=-1).double().cumsum(dim=-1)
    u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators]).to(cum.device)
    u = u[:, None] * cum[:, -1:]  # scaled by the row total, so rounding can never land past the last token
    tokens = torch.searchsorted(cum, u, right=True)[:, 0].clamp_(max=cum.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


# ============================================================================================ HF backend


@dataclass
class _CacheEntry:
    tokens: list[int]
    kv: list[tuple[Any, Any]]  # per layer (keys [1, H, n, D], values [1, H, n, D]); n == len(tokens)


@dataclass
class _Row:
    request: GenerationRequest
    kv: list[tuple[Any, Any]] | None
    cached: int
    pending: list[int]
    generator: Any
    out_ids: list[int] = field(default_factory=list)
    out_lp: list[float] = field(default_factory=list)
    done: bool = False


class HFPolicy(Policy):
    """A transformers causal LM as policy, with batched decoding and per-trajectory KV-cache reuse.

    Args:
        model: a causal LM (a PEFT model too: it is merged into a sampler copy at once, see
            :meth:`update_weights`).
        tokenizer: its tokenizer.
        max_batch_size: decode at most this many requests together (None: all of a call).
        compact_fraction: finished rows stay in the decode batch (fed padding) until at least this fraction of
            it has finished, then leave together; trades wasted rows against cache copies.

    The KV cache of each ``key`` is kept after a call (the sampled tokens except the last, whose keys were never
    computed), so the next turn prefills only the tokens the collector appended. Caches are stored densely
    per trajectory and left-padded into a batch for each call; padding is masked, never attended.
    """

    def __init__(self, model, tokenizer, *, max_batch_size: int | None = None, compact_fraction: float = 0.25):
        import torch

        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.compact_fraction = compact_fraction
        self._cache: dict[Hashable, _CacheEntry] = {}
        self._sampler = None  # a plain (non-PEFT) copy refreshed by update_weights
        self.model = model
        self.model.eval()
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._torch = torch
        self.version = 0
        """How many times :meth:`update_weights` changed the weights (recorded in trajectories)."""
        self.stats = {"prefill_tokens": 0, "decode_steps": 0, "generated_tokens": 0}
        """Running counters: tokens run through prefill (padding excluded), decode forward passes, tokens sampled."""
        if _is_peft(model):
            self.update_weights(model)

    # ---------------------------------------------------------------- weights
    def update_weights(self, source_model) -> None:
        """Sample with ``source_model``'s current weights from now on, without touching ``source_model``.

        * A PEFT (LoRA) model: its adapters are merged in fp32 into a separate plain copy of the architecture
          (the *sampler*, created on the first call in this policy's dtype, refreshed in place afterwards), so
          sampling pays no unmerged-adapter cost and the trainer's base weights are never modified (a
          merge/unmerge round trip in bf16 is not exact).
        * A plain model: if it is the model being sampled, nothing to do; otherwise its weights are copied into
          the sampler.
        """
        torch = self._torch
        if not _is_peft(source_model):
            if source_model is self.model:
                return
            state = source_model.state_dict()
            if self._sampler is None:
                self._sampler = _fresh_copy(source_model, self.dtype, self.device)
            with torch.no_grad():
                for name, p in self._sampler.state_dict().items():
                    p.copy_(state[name])
            self.model = self._sampler
            self._cache.clear()
            self.version += 1
            return
        merged = merged_state_dict(source_model)
        if self._sampler is None:
            self._sampler = _fresh_copy(source_model.get_base_model(), self.dtype, self.device)
        with torch.no_grad():
            own = self._sampler.state_dict()
            missing = set(own) - set(merged)
            if missing - {k for k in own if k.endswith("lm_head.weight")}:
                raise RuntimeError(f"merged LoRA weights lack {sorted(missing)[:5]}")
            for name, p in own.items():
                if name in merged:
                    p.copy_(merged[name])
        self.model = self._sampler
        self._cache.clear()  # cached keys/values belong to the old weights
        self.version += 1

    # ---------------------------------------------------------------- cache
    def release(self, keys: Iterable[Hashable]) -> None:
        for k in keys:
            self._cache.pop(k, None)

    def cached_tokens(self, key: Hashable) -> int:
        """How many tokens of ``key`` are cached (0 if none)."""
        e = self._cache.get(key)
        return len(e.tokens) if e else 0

    def _take_cache(self, req: GenerationRequest):
        """The usable cache of a request: (kv or None, tokens cached) with at least one prompt token pending."""
        if req.key is None or req.key not in self._cache:
            return None, 0
        entry = self._cache.pop(req.key)
        limit = min(len(entry.tokens), len(req.prompt_ids) - 1)
        n = 0
        while n < limit and entry.tokens[n] == req.prompt_ids[n]:
            n += 1
        if n < len(entry.tokens):
            logger.debug("cache of %r cut from %d to %d tokens (prompt diverges)", req.key, len(entry.tokens), n)
        if n == 0:
            return None, 0
        return [(k[:, :, :n], v[:, :, :n]) for k, v in entry.kv], n

    # ---------------------------------------------------------------- generation
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        if not requests:
            return []
        for r in requests:
            if not r.prompt_ids:
                raise ValueError("a generation request needs a non-empty prompt")
            if r.max_new_tokens < 1:
                raise ValueError(f"max_new_tokens must be >= 1, got {r.max_new_tokens}")
        size = self.max_batch_size or len(requests)
        results: list[GenerationResult] = []
        with self._torch.inference_mode():
            for lo in range(0, len(requests), size):
                results.extend(self._generate_batch(list(requests[lo:lo + size]), sampling))
        return results

    def _forward(self, ids, cache, attention_mask, position_ids):
        return _model_forward(self.model, ids, cache, attention_mask, position_ids)

    def _generate_batch(self, requests: list[GenerationRequest], sampling: SamplingParams):
        torch = self._torch
        dev = self.device
        rows: list[_Row] = []
        for req in requests:
            kv, n = self._take_cache(req)
            gen = torch.Generator(device="cpu")
            gen.manual_seed(req.seed if req.seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
            rows.append(_Row(req, kv, n, list(req.prompt_ids[n:]), gen))
        stops = set(sampling.stop_token_ids)

        # --- prefill: identical uncached prompts (a group) are computed once, then expanded
        unique: dict[tuple, int] = {}
        expand: list[int] = []
        prefill_rows: list[_Row] = []
        for i, row in enumerate(rows):
            sig = ("p", tuple(row.pending)) if row.kv is None else ("r", i)
            if sig not in unique:
                unique[sig] = len(prefill_rows)
                prefill_rows.append(row)
            expand.append(unique[sig])
        cache, mask, positions = self._pack(prefill_rows)
        ids, pos_new, mask = self._pack_pending(prefill_rows, mask, positions)
        out = self._forward(ids.to(dev), cache, mask.to(dev), pos_new.to(dev))
        self.stats["prefill_tokens"] += sum(len(r.pending) for r in prefill_rows)
        cache = _out_cache(out)
        logits = out.logits[:, -1, :]
        if len(prefill_rows) < len(rows):
            index = torch.tensor(expand, device=dev)
            cache.batch_select_indices(index)
            logits = logits.index_select(0, index)
            mask = mask.index_select(0, index.cpu())
        positions = torch.tensor([r.cached + len(r.pending) for r in rows])  # next position of each row

        # --- decode
        active = list(range(len(rows)))  # row index of each batch line
        while True:
            tokens, lps = sample_tokens(logits, sampling, [rows[i].generator for i in active])
            tokens_l, lps_l = tokens.tolist(), lps.tolist()
            live_lines = []
            for line, i in enumerate(active):
                row = rows[i]
                if row.done:
                    continue
                row.out_ids.append(tokens_l[line])
                row.out_lp.append(lps_l[line])
                if tokens_l[line] in stops or len(row.out_ids) >= row.request.max_new_tokens:
                    row.done = True
                else:
                    live_lines.append(line)
            if not live_lines:
                break
            done_lines = [line for line, i in enumerate(active) if rows[i].done]
            if done_lines and len(done_lines) >= max(1, int(self.compact_fraction * len(active))):
                for line in done_lines:
                    self._store(rows[active[line]], cache, mask, line)
                keep = torch.tensor(live_lines)
                cache.batch_select_indices(keep.to(dev))
                mask = mask.index_select(0, keep)
                positions = positions.index_select(0, keep)
                active = [active[line] for line in live_lines]
            feed = torch.tensor([[rows[i].out_ids[-1] if not rows[i].done else self._pad_id] for i in active])
            step_mask = torch.tensor([[0 if rows[i].done else 1] for i in active], dtype=mask.dtype)
            mask = torch.cat([mask, step_mask], dim=1)
            out = self._forward(feed.to(dev), cache, mask.to(dev), positions[:, None].to(dev))
            self.stats["decode_steps"] += 1
            cache = _out_cache(out)
            logits = out.logits[:, -1, :]
            positions = positions + step_mask[:, 0]
        for line, i in enumerate(active):
            self._store(rows[i], cache, mask, line)

        self.stats["generated_tokens"] += sum(len(r.out_ids) for r in rows)
        return [GenerationResult(r.out_ids, r.out_lp,
                                 "stop" if r.out_ids and r.out_ids[-1] in stops else "length") for r in rows]

    def _pack(self, rows: list[_Row]):
        """Left-pad the rows' cached keys/values into one batch cache; returns (cache, mask [B, C], positions)."""
        torch = self._torch
        width = max(r.cached for r in rows)
        reserve = max(len(r.pending) for r in rows) + max(r.request.max_new_tokens for r in rows) + 1
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for b, r in enumerate(rows):
            if r.cached:
                mask[b, width - r.cached:] = 1
        positions = torch.tensor([r.cached for r in rows])
        if width == 0:
            return _new_cache(reserve=reserve), mask, positions
        ref = next(r.kv for r in rows if r.kv is not None)
        layers = []
        for layer, (k0, v0) in enumerate(ref):
            k = k0.new_zeros((len(rows), k0.shape[1], width, k0.shape[3]))
            v = v0.new_zeros((len(rows), v0.shape[1], width, v0.shape[3]))
            for b, r in enumerate(rows):
                if r.cached:
                    k[b, :, width - r.cached:] = r.kv[layer][0][0]
                    v[b, :, width - r.cached:] = r.kv[layer][1][0]
            layers.append((k, v))
        return _new_cache(layers, reserve=reserve), mask, positions

    def _pack_pending(self, rows: list[_Row], mask, positions):
        """Right-align the rows' pending tokens after the cache (padding between is masked)."""
        torch = self._torch
        width = max(len(r.pending) for r in rows)
        ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        pos = torch.zeros((len(rows), width), dtype=torch.long)
        new_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            n = len(r.pending)
            ids[b, width - n:] = torch.tensor(r.pending)
            pos[b, width - n:] = torch.arange(r.cached, r.cached + n)
            new_mask[b, width - n:] = 1
        return ids, pos, torch.cat([mask, new_mask], dim=1)

    def _store(self, row: _Row, cache, mask, line: int) -> None:
        """Keep a finished row's keys/values densely under its key (all but the last sampled token)."""
        if row.request.key is None:
            return
        keep = mask[line].bool().to(self.device)
        kv = [(layer.keys[line:line + 1, :, keep].clone(), layer.values[line:line + 1, :, keep].clone())
              for layer in cache.layers]
        tokens = list(row.request.prompt_ids) + row.out_ids[:-1]
        if kv and kv[0][0].shape[2] != len(tokens):
            raise RuntimeError(f"internal cache error: {kv[0][0].shape[2]} cached positions for {len(tokens)} tokens")
        self._cache[row.request.key] = _CacheEntry(tokens, kv)


_GROWING_LAYER = None


def _growing_layer_class():
    """A ``DynamicLayer`` that appends into reserved room instead of re-concatenating the whole cache.

    ``DynamicLayer.update`` does ``torch.cat([cache, new])`` at every decode step, copying the full cache of every
    layer per token; at a few hundred tokens of context that copy costs more than the model's matmuls on CPU.
    This layer keeps a buffer with spare positions, writes the new keys/values in place and returns views.
    """
    global _GROWING_LAYER
    if _GROWING_LAYER is not None:
        return _GROWING_LAYER
    import torch
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def __init__(self, keys=None, values=None, reserve: int = 64):
            self._kbuf = self._vbuf = None
            self._len = 0
            self.reserve = reserve
            super().__init__()
            if keys is not None:
                self.device = keys.device
                self.is_initialized = True
                self._grow(keys, keys.shape[-2] + reserve)
                self._kbuf[:, :, : keys.shape[-2]] = keys
                self._vbuf[:, :, : keys.shape[-2]] = values
                self._len = keys.shape[-2]

        # keys/values are views of the filled part of the buffers
        @property
        def keys(self):
            return None if self._kbuf is None else self._kbuf[:, :, : self._len]

        @keys.setter
        def keys(self, value):
            self._kbuf = value
            self._len = 0 if value is None or value.dim() < 3 else value.shape[-2]

        @property
        def values(self):
            return None if self._vbuf is None else self._vbuf[:, :, : self._len]

        @values.setter
        def values(self, value):
            self._vbuf = value

        def _grow(self, like, capacity: int) -> None:
            shape = (like.shape[0], like.shape[1], capacity, like.shape[3])
            k = like.new_zeros(shape)
            v = like.new_zeros(shape)
            if self._kbuf is not None and self._kbuf.dim() == 4 and self._len:
                k[:, :, : self._len] = self._kbuf[:, :, : self._len]
                v[:, :, : self._len] = self._vbuf[:, :, : self._len]
            self._kbuf, self._vbuf = k, v

        def lazy_initialization(self, key_states, value_states) -> None:
            self.device = key_states.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = key_states.shape[-2]
            end = self._len + n
            if self._kbuf is None or self._kbuf.dim() != 4 or end > self._kbuf.shape[-2]:
                self._grow(key_states, max(end + self.reserve, int(1.5 * end)))
            self._kbuf[:, :, self._len:end] = key_states
            self._vbuf[:, :, self._len:end] = value_states
            self._len = end
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._len

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self._kbuf is not None and self._kbuf.dim() == 4:
                self._kbuf = self._kbuf[indices]
                self._vbuf = self._vbuf[indices]

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self._kbuf is not None and self._kbuf.dim() == 4:
                self._kbuf = self._kbuf.repeat_interleave(repeats, dim=0)
                self._vbuf = self._vbuf.repeat_interleave(repeats, dim=0)

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes a negative number of tokens to remove")
            self._len = max(0, self._len + tokens_to_remove)

    _GROWING_LAYER = GrowingLayer
    return GrowingLayer


def _new_cache(layers=None, reserve: int = 64):
    """A ``DynamicCache`` of growing layers, filled with ``layers`` (per layer ``(keys, values)``) if given."""
    import functools

    from transformers import DynamicCache

    layer_cls = _growing_layer_class()
    cache = DynamicCache()
    if layers:
        cache.layers = [layer_cls(k, v, reserve=reserve) for k, v in layers]
        cache.layer_class_to_replicate = None
    else:
        cache.layer_class_to_replicate = functools.partial(layer_cls, reserve=reserve)
    return cache


_CACHE_ARG: dict[type, str] = {}


def _model_forward(model, ids, cache, attention_mask, position_ids):
    """``model(...)`` with the KV cache passed under the name this transformers version uses."""
    import inspect

    cls = type(model)
    if cls not in _CACHE_ARG:
        base = model.get_base_model() if _is_peft(model) else model
        params = inspect.signature(type(base).forward).parameters
        _CACHE_ARG[cls] = "cache" if "cache" in params else "past_key_values"
    return model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                 logits_to_keep=1, **{_CACHE_ARG[cls]: cache})


def _out_cache(out):
    return out.cache if getattr(out, "cache", None) is not None else out.past_key_values


# ============================================================================================ LoRA merging


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def merged_state_dict(peft_model) -> dict[str, Any]:
    """The base model's state dict with every active LoRA adapter merged in, computed in fp32.

    Keys are those of the plain (un-wrapped) architecture. ``peft_model`` is not modified.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    lora = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    out: dict[str, Any] = {}
    with torch.no_grad():
        for name, m in lora.items():
            layer = m.get_base_layer()
            w = layer.weight.float()
            if not getattr(m, "disable_adapters", False) and not getattr(m, "merged", False):
                for adapter in m.active_adapters:
                    if adapter not in getattr(m, "lora_A", {}):
                        continue
                    if type(layer).__name__ == "Linear" and not getattr(m, "fan_in_fan_out", False) \
                            and not getattr(m, "use_dora", {}).get(adapter, False):
                        a = m.lora_A[adapter].weight.float()
                        b = m.lora_B[adapter].weight.float()
                        w = w + (b @ a) * m.scaling[adapter]
                    else:  # other layer kinds: PEFT's own delta (computed in fp32 on CPU)
                        w = w + m.get_delta_weight(adapter).float()
            out[f"{name}.weight"] = w
            if getattr(layer, "bias", None) is not None:
                out[f"{name}.bias"] = layer.bias
        prefixes = tuple(f"{n}." for n in lora)
        for pname, p in base.state_dict().items():
            if not pname.startswith(prefixes):
                out[pname] = p
    return out


def _fresh_copy(model, dtype, device):
    """A new model of ``model``'s architecture (random weights, to be overwritten) in ``dtype`` on ``device``."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    fresh = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return fresh.to(device).eval()


# ============================================================================================ OpenAI backend


class OpenAIPolicy(Policy):
    """A policy served by an OpenAI-compatible ``/v1/completions`` endpoint (vLLM, SGLang, :func:`serve_policy`).

    Each request is sent as its own HTTP call with the prompt as a list of token ids, concurrently (the server
    batches them). The server must return the sampled token ids — ``choices[i].token_ids`` (vLLM's
    ``return_token_ids``) or ``logprobs.tokens`` as ``"token_id:<id>"`` (vLLM's ``return_tokens_as_token_ids``)
    — and ``logprobs.token_logprobs``. See docs/collector.md for the server flags.

    LoRA weight sync (:meth:`update_weights`): a trainer's PEFT adapter is saved to a new versioned folder under
    ``adapter_dir`` and loaded on the server under a new name (``<model>-lora-v<N>``) through the server's runtime
    LoRA endpoint; from then on requests name that adapter, and the previous one is unloaded. vLLM must be
    started with ``--enable-lora --max-lora-rank R`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; SGLang with
    ``--enable-lora --max-lora-rank R --lora-target-modules ...`` (see docs/collector.md). The server reads the
    adapter from ``adapter_dir``, so that folder must be on a file system the server sees.

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000"`` (``/v1`` is added when missing).
        model: the served (base) model name.
        tokenizer: the served model's tokenizer (the collector renders the chat template with it).
        max_concurrency: HTTP requests in flight at once.
        timeout_s: per-request timeout.
        api_key: sent as a bearer token when given.
        adapter_dir: where :meth:`update_weights` writes adapter versions (default: a new temporary folder).
        lora_api: ``"vllm"`` (``POST /v1/load_lora_adapter``; requests name the adapter as ``model``) or
            ``"sglang"`` (``POST /load_lora_adapter``; requests keep the base ``model`` and name the adapter in
            ``lora_path``).
        adapter_prefix: adapter names are ``f"{adapter_prefix}-v{N}"`` (default ``f"{model}-lora"``); give each
            trainer sharing one server its own prefix.
    """

    def __init__(self, base_url: str, model: str, tokenizer, *, max_concurrency: int = 64, timeout_s: float = 600.0,
                 api_key: str | None = None, adapter_dir: str | None = None, lora_api: str = "vllm",
                 adapter_prefix: str | None = None):
        if lora_api not in ("vllm", "sglang"):
            raise ValueError(f"lora_api must be 'vllm' or 'sglang', got {lora_api!r}")
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model_name = model
        self.base_model_name = model
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.lora_api = lora_api
        self.adapter_dir = adapter_dir
        self.adapter_prefix = adapter_prefix or f"{model}-lora"
        self.adapter_name: str | None = None
        """The adapter requests are sampled with (None: the base model)."""
        self.version = 0
        """How many times :meth:`update_weights` changed the weights (recorded in trajectories)."""
        self._adapter_path: str | None = None
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="openai-policy")

    # ---------------------------------------------------------------- LoRA weight sync
    def _lora_url(self, action: str) -> str:
        root = self.base_url if self.lora_api == "vllm" else self.base_url[: -len("/v1")]
        return f"{root}/{action}_lora_adapter"

    def _lora_call(self, action: str, body: dict[str, Any]):
        import requests

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return requests.post(self._lora_url(action), json=body, headers=headers, timeout=self.timeout_s)

    def update_weights(self, source_model) -> None:
        """Sync ``source_model``'s LoRA adapter to the server and sample with it from now on.

        Saves the adapter (PEFT format) to ``adapter_dir/<prefix>-v<N>``, loads it on the server under that name,
        switches requests to it, then unloads the previous version and deletes its folder. Only the adapter
        travels (megabytes), never the base weights. Raises ``TypeError`` for a model without a PEFT adapter and
        ``RuntimeError`` (with the server's answer and the flags it needs) when the server refuses the load.
        """
        import shutil
        import tempfile
        from pathlib import Path

        from agentrl.algos.lora import save_adapter

        if not _is_peft(source_model):
            raise TypeError("OpenAIPolicy syncs LoRA adapters only: pass a PEFT model (full-weight sync to a "
                            "server is not supported)")
        if self.adapter_dir is None:
            self.adapter_dir = tempfile.mkdtemp(prefix="agentrl-lora-")
        name = f"{self.adapter_prefix}-v{self.version + 1}"
        path = Path(self.adapter_dir).resolve() / name
        save_adapter(source_model, path)
        r = self._lora_call("load", {"lora_name": name, "lora_path": str(path)})
        if r.status_code != 200:
            shutil.rmtree(path, ignore_errors=True)
            hint = ""
            if r.status_code in (404, 405):
                hint = (" (no runtime LoRA endpoint: start vLLM with --enable-lora --max-lora-rank R and "
                        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or SGLang with --enable-lora and lora_api='sglang')")
            raise RuntimeError(f"{self._lora_url('load')} answered HTTP {r.status_code}{hint}: {r.text[:500]}")
        old_name, old_path = self.adapter_name, self._adapter_path
        self.adapter_name, self._adapter_path = name, str(path)
        if self.lora_api == "vllm":
            self.model_name = name
        self.version += 1
        logger.info("server %s samples with adapter %s (%s)", self.base_url, name, path)
        if old_name is not None:
            r = self._lora_call("unload", {"lora_name": old_name})
            if r.status_code != 200:
                logger.warning("could not unload adapter %s from %s: HTTP %d %s", old_name, self.base_url,
                               r.status_code, r.text[:200])
            if old_path:
                shutil.rmtree(old_path, ignore_errors=True)

    def _payload(self, req: GenerationRequest, sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": list(req.prompt_ids),
            "max_tokens": req.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "stop_token_ids": list(sampling.stop_token_ids),
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if req.seed is not None:
            body["seed"] = int(req.seed)
        if self.lora_api == "sglang" and self.adapter_name is not None:
            body["lora_path"] = self.adapter_name
        return body

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import requests

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        r = requests.post(f"{self.base_url}/completions", json=body, headers=headers, timeout=self.timeout_s)
        if r.status_code != 200:
            raise RuntimeError(f"{self.base_url}/completions answered HTTP {r.status_code}: {r.text[:500]}")
        return r.json()

    @staticmethod
    def parse_choice(choice: dict[str, Any], stop_token_ids: Sequence[int]) -> GenerationResult:
        """Read token ids and logprobs from one ``choices[i]`` of a completions response."""
        lp = choice.get("logprobs") or {}
        ids = choice.get("token_ids")
        if ids is None:
            tokens = lp.get("tokens") or []
            if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                raise RuntimeError("the server returned no token ids: start vLLM with --return-tokens-as-token-ids "
                                   "or use a version that honours return_token_ids")
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        logprobs = lp.get("token_logprobs")
        if logprobs is None or len(logprobs) != len(ids):
            raise RuntimeError(f"the server returned {0 if logprobs is None else len(logprobs)} logprobs for "
                               f"{len(ids)} tokens; request logprobs")
        finish = "stop" if ids and ids[-1] in set(stop_token_ids) else "length"
        if choice.get("finish_reason") == "stop" and finish == "length":
            finish = "stop"
        return GenerationResult(list(map(int, ids)), [float(x) for x in logprobs], finish)

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        futures = [self._pool.submit(self._post, self._payload(r, sampling)) for r in requests]
        return [self.parse_choice(f.result()["choices"][0], sampling.stop_token_ids) for f in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=False)


# ============================================================================================ a tiny server


class PolicyServer:
    """A running :func:`serve_policy` server: ``url``, ``close()``; also a context manager."""

    def __init__(self, httpd, thread, worker):
        self.httpd = httpd
        self._thread = thread
        self._worker = worker
        host, port = httpd.server_address[:2]
        self.url = f"http://{host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._worker.stop()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _BatchingWorker:
    """Collects concurrent HTTP requests for a few milliseconds and answers them with one ``generate`` call."""

    def __init__(self, policy: Policy, window_s: float):
        self.policy = policy
        self.window_s = window_s
        self.queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="policy-server-batcher")
        self.thread.start()

    def submit(self, req: GenerationRequest, sampling: SamplingParams, policy: Policy | None = None) -> GenerationResult:
        """Answer ``req`` with ``policy`` (default: the worker's), batched with concurrent requests to it."""
        done = threading.Event()
        slot: dict[str, Any] = {"policy": policy or self.policy}
        self.queue.put((req, sampling, slot, done))
        done.wait()
        if "error" in slot:
            raise slot["error"]
        return slot["result"]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            items = [first]
            deadline = time.monotonic() + self.window_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    items.append(self.queue.get(timeout=left))
                except queue.Empty:
                    break
            by_sampling: dict[tuple[int, str], list] = {}
            for it in items:
                by_sampling.setdefault((id(it[2]["policy"]), repr(it[1])), []).append(it)
            for group in by_sampling.values():
                try:
                    results = group[0][2]["policy"].generate([it[0] for it in group], group[0][1])
                    for it, res in zip(group, results, strict=True):
                        it[2]["result"] = res
                except Exception as e:  # answered as HTTP 500
                    for it in group:
                        it[2]["error"] = e
                for it in group:
                    it[3].set()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)


def _adapter_policy(base: HFPolicy, path: str) -> HFPolicy:
    """An :class:`HFPolicy` sampling ``base``'s model with the PEFT adapter at ``path`` merged in (fp32 merge)."""
    from pathlib import Path

    from agentrl.algos.lora import load_adapter

    if not (Path(path) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no PEFT adapter at {path} (no adapter_config.json)")
    # load_adapter injects LoRA layers into the model it is given: give it a copy, never the served base.
    peft_model = load_adapter(copy.deepcopy(base.model), path)
    return HFPolicy(peft_model, base.tokenizer, max_batch_size=base.max_batch_size,
                    compact_fraction=base.compact_fraction)


def serve_policy(policy: Policy, host: str = "127.0.0.1", port: int = 0, *, model_name: str = "agentrl",
                 batch_window_s: float = 0.01, enable_lora: bool = False) -> PolicyServer:
    """Serve ``policy`` as an OpenAI-compatible ``/v1/completions`` endpoint (token-id prompts) in a thread.

    A small reference server for tests and for sharing one model between processes on a machine; at scale
    use vLLM or SGLang. Requests arriving within ``batch_window_s`` are decoded together. It answers with
    ``choices[0].token_ids``, ``logprobs.tokens`` (``"token_id:<id>"``), ``logprobs.token_logprobs`` and
    ``finish_reason``; ``port=0`` picks a free port (see ``server.url``). A request's ``model`` must be
    ``model_name`` (or a loaded adapter's name); an unknown name is answered 404, as vLLM does.

    ``enable_lora=True`` (``policy`` must be an :class:`HFPolicy` of a plain model) adds vLLM's runtime LoRA
    endpoints, ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` and ``POST /v1/unload_lora_adapter``
    ``{"lora_name"}`` (also under SGLang's paths, without ``/v1``): a loaded PEFT adapter is merged into its own
    sampler copy of the base model and served under its name, chosen by a request's ``model`` (vLLM) or
    ``lora_path`` (SGLang). Loading an existing name is a 400; unloading an unknown one a 404.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if enable_lora and (not isinstance(policy, HFPolicy) or _is_peft(policy.model)):
        raise TypeError("serve_policy(enable_lora=True) needs an HFPolicy of a plain (non-PEFT) model")
    worker = _BatchingWorker(policy, batch_window_s)
    adapters: dict[str, Policy] = {}
    adapters_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # quiet: logging, not stderr
            logger.debug("policy server: " + fmt, *args)

        def _send(self, code: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_text(self, code: int, text: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                with adapters_lock:
                    names = list(adapters)
                data = [{"id": model_name, "object": "model"}]
                data += [{"id": n, "object": "model", "parent": model_name} for n in names]
                self._send(200, {"object": "list", "data": data})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def _lora(self, action: str) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                name = body["lora_name"]
                if not isinstance(name, str) or not name or name == model_name:
                    raise ValueError(f"invalid lora_name {name!r}")
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
                return
            if action == "unload":
                with adapters_lock:
                    gone = adapters.pop(name, None)
                if gone is None:
                    self._send(404, {"error": {"message": f"The lora adapter '{name}' cannot be found."}})
                else:
                    self._send_text(200, f"Success: LoRA adapter '{name}' removed successfully.")
                return
            with adapters_lock:
                exists = name in adapters
            if exists:
                self._send(400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}})
                return
            try:
                loaded = _adapter_policy(policy, str(body.get("lora_path", "")))
            except Exception as e:
                logger.exception("policy server: loading adapter %s failed", name)
                self._send(400, {"error": {"message": f"loading {name} failed: {type(e).__name__}: {e}"}})
                return
            with adapters_lock:
                adapters[name] = loaded
            self._send_text(200, f"Success: LoRA adapter '{name}' added successfully.")

        def do_POST(self):
            route = self.path.rstrip("/")
            if enable_lora and route in ("/v1/load_lora_adapter", "/load_lora_adapter"):
                self._lora("load")
                return
            if enable_lora and route in ("/v1/unload_lora_adapter", "/unload_lora_adapter"):
                self._lora("unload")
                return
            if route != "/v1/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = body["prompt"]
                if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
                    raise ValueError("prompt must be a non-empty list of token ids")
                sampling = SamplingParams(temperature=float(body.get("temperature", 1.0)),
                                          top_p=float(body.get("top_p", 1.0)), top_k=int(body.get("top_k", 0) or 0),
                                          stop_token_ids=tuple(body.get("stop_token_ids") or ()))
                req = GenerationRequest(prompt, int(body.get("max_tokens", 16)), seed=body.get("seed"))
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
                return
            name = body.get("lora_path") or body.get("model") or model_name
            with adapters_lock:
                target = policy if name == model_name else adapters.get(name)
            if target is None:
                self._send(404, {"error": {"message": f"The model `{name}` does not exist.", "type": "NotFoundError"}})
                return
            try:
                res = worker.submit(req, sampling, target)
            except Exception as e:
                logger.exception("policy server: generation failed")
                self._send(500, {"error": {"message": f"{type(e).__name__}: {e}"}})
                return
            text = policy.tokenizer.decode(res.token_ids) if policy.tokenizer is not None else ""
            self._send(200, {
                "id": f"cmpl-{time.monotonic_ns()}", "object": "text_completion", "created": int(time.time()),
                "model": name,
                "choices": [{"index": 0, "text": text, "token_ids": res.token_ids,
                             "finish_reason": res.finish_reason,
                             "logprobs": {"tokens": [f"token_id:{t}" for t in res.token_ids],
                                          "token_logprobs": res.logprobs}}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(res.token_ids),
                          "total_tokens": len(prompt) + len(res.token_ids)},
            })

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True, name="policy-server")
    thread.start()
    return PolicyServer(httpd, thread, worker)
