"""A compiled one-token decode step for :class:`~agentrl.algos.policy.HFPolicy` (issue 62 part 2): static shapes.

``HFPolicy(compile_decode="on")`` (TrainConfig ``policy_compile``) runs each decode step's forward pass, the
model's one-token forward with the batch's KV cache, through ``torch.compile`` (inductor; on CUDA
``mode="reduce-overhead"``, CUDA graphs). The default, ``off``, is the eager path as before.

Shapes repeat because the batch's cache is held in fixed-size buffers while it decodes: per layer
``[rows bucket, Hkv, length bucket, D]``, the rows padded up to the next of :data:`ROW_BUCKETS` and the columns to
the next of :data:`LENGTH_BUCKETS`. A step writes the new keys/values at the batch's next column (a tensor index,
so the graph is the same at every length) and attends over every column of the bucket under a 4-D mask: the
batch's 2-D mask (left padding and finished rows as in the eager path), zeros beyond it; a padding row attends
only to its own new column. The buffers are those of the batch's :class:`~agentrl.algos.policy._kv_cache.GrowingLayer`
caches (their ``_kbuf``/``_vbuf``), so storing a finished row, cutting finished rows and stacking joiners work as in
the eager path; a batch whose rows or columns changed is copied into the buffers of its bucket once. So one graph
per (rows bucket, length bucket) and sampled model, compiled on first use and reused across steps and calls.

A batch with a shared cascade prefix (``_cascade.py``) decodes compiled too: the prefix's keys/values are copied
once per batch into buffers padded to a length bucket, with an additive mask over the padding, and handed to the
cascade attention function as the ``agentrl_prefix`` argument (the eager path reads them from a context variable
instead); one graph per (rows, length, prefix length) bucket.

Stays eager: prefill; a batch beyond the largest bucket (those steps only); a model whose attention is neither
``sdpa`` nor ``eager`` nor the cascade's (the step hands the attention a 4-D mask).

Fall-back: if compiling or a compiled call raises (no C++ compiler, an unsupported op, a graph break: the step is
compiled whole, or more than :data:`RECOMPILE_LIMIT` graphs), one line is logged and every later step decodes
eager (process wide: a missing compiler stays missing); the failed step is re-run eager.

Numerics: the compiled step attends over the bucket's columns (the masked ones weigh exactly 0) and inductor fuses
the elementwise ops: results are eager's up to rounding (fp32: per-token logprobs within 2e-5 in
tests/algos/policy/test_compiled_decode.py; greedy tokens and seeded samples identical there).

Time spent compiling is counted apart (``stats["compile_seconds"]``: the calls that compiled a graph) from decoding
(``stats["decode_seconds"]``); with TrainConfig ``policy_compile`` the trainer logs both per step (``time/decode``,
``time/compile_decode``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch._dynamo.utils import counters
from transformers.cache_utils import Cache, CacheLayerMixin

from agentrl.algos.policy import _cascade

logger = logging.getLogger(__name__)

MODES = ("off", "on", "auto")
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LENGTH_BUCKETS = (256, 512, 1024, 2048, 4096, 8192)
RECOMPILE_LIMIT = 256  # graphs of the compiled step (all buckets, models and dtypes of a process)

#: attention implementations the step runs under -> whether their 4-D mask is additive (else boolean, True: attend);
#: others (flash attention: 2-D masks only) decode eager
_MASK_KINDS = {"sdpa": False, "eager": True, _cascade.NAME: True}
_STATE: dict[str, Any] = {"failed": None}
_COMPILED: dict[str | None, Any] = {}  # torch.compile mode -> the compiled step (graphs shared by every policy)


def wants_compile(mode: str, device) -> bool:
    """Whether ``mode`` compiles decoding on ``device``: ``on`` always, ``off`` never, ``auto`` on CUDA (eager on
    a CPU until measured faster there)."""
    if mode not in MODES:
        raise ValueError(f"compile_decode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode == "on" or (mode == "auto" and torch.device(device).type == "cuda")


def failure() -> str | None:
    """Why compiled decoding was turned off in this process (None: it was not)."""
    return _STATE["failed"]


def _bucket(n: int, buckets: tuple[int, ...]) -> int | None:
    return next((b for b in buckets if b >= n), None)


class _SlotLayer(CacheLayerMixin):
    """One layer's fixed buffers for the compiled step: writes the new keys/values at ``column`` (a 1-element
    tensor shared by the layers) and returns the whole buffers."""

    is_compileable = True
    is_sliding = False

    def __init__(self, keys, values, column):
        super().__init__()
        self.keys, self.values, self.column = keys, values, column
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:
        return None

    def update(self, key_states, value_states, *args, **kwargs):
        self.keys.index_copy_(2, self.column, key_states)
        self.values.index_copy_(2, self.column, value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0

    def get_seq_length(self) -> int:  # unused: positions and the mask are always given
        return self.keys.shape[-2]

    def get_max_length(self) -> int:
        return self.keys.shape[-2]


@dataclass
class _Slots:
    """The fixed inputs of one bucket: per layer keys/values buffers, the step's ids, 4-D mask, positions and
    write column, and the cache object the model writes through."""

    keys: list
    values: list
    ids: Any
    mask: Any
    positions: Any
    column: Any
    cache: Cache
    prefix: tuple | None = None  # (keys per layer [1, Hkv, P bucket, D], values, additive mask [1, 1, 1, P bucket])
    prefix_of: Any = None  # the _cascade.Prefix loaded into it


def _one_token(model, ids, mask, positions, cache, cache_name: str, extra: dict):
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                **{cache_name: cache}, **extra)
    return out.logits[:, -1, :]


def _compiled(mode: str | None):
    fn = _COMPILED.get(mode)
    if fn is None:
        # one graph per bucket and model: more than dynamo's default of 8 per function. fullgraph: a graph break or
        # the limit raises (then the fall-back logs it and decodes eager) instead of running parts uncompiled
        limit = {"recompile_limit": RECOMPILE_LIMIT} if "recompile_limit" in _compile_parameters() else {}
        fn = _COMPILED[mode] = torch.compile(_one_token, dynamic=False, fullgraph=True, mode=mode, **limit)
    return fn


def _compile_parameters() -> set[str]:
    import inspect

    return set(inspect.signature(torch.compile).parameters)


def _fail(err: BaseException) -> None:
    if _STATE["failed"] is None:
        text = str(err).strip()
        _STATE["failed"] = f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
        logger.warning("torch.compile unavailable for decoding (%s); decoding runs eager", _STATE["failed"])


class CompiledDecode:
    """The compiled decode step of one policy: its buckets' buffers and its counters (see the module docstring).

    Args:
        device: the sampled model's device (CUDA: CUDA graphs, buffers kept for the policy's life so their
            addresses stay those the graphs recorded; CPU: a batch's buffers are freed when it ends).
        row_buckets, length_buckets: the padded sizes, ascending (tests use small ones).
    """

    def __init__(self, device, row_buckets: tuple[int, ...] = ROW_BUCKETS,
                 length_buckets: tuple[int, ...] = LENGTH_BUCKETS):
        self.device = torch.device(device)
        self.row_buckets, self.length_buckets = tuple(row_buckets), tuple(length_buckets)
        self.cuda = self.device.type == "cuda"
        self._slots: dict[tuple[int, int, int, str], _Slots] = {}
        self.compile_seconds = 0.0
        self.steps = 0  # decode steps run compiled

    def release(self) -> None:
        """A batch ended: free its buffers (on CPU; CUDA graphs keep theirs)."""
        if not self.cuda:
            self._slots.clear()

    def step(self, model, cache, feed, mask, positions, pad_id: int, cache_name: str, prefix=None):
        """The next logits [B, V] of the batch (``feed`` [B, 1], ``mask`` [B, W + 1] with this step's column,
        ``positions`` [B], ``prefix`` the batch's cascade prefix or None), its cache extended in place; None where
        this step must run eager (nothing changed)."""
        impl = getattr(model.config, "_attn_implementation", None)
        if _STATE["failed"] is not None or impl not in _MASK_KINDS or (prefix is not None) != (impl == _cascade.NAME):
            return None
        rows, width = mask.shape
        if cache.layers and cache.layers[0].get_seq_length() != width - 1:
            raise RuntimeError(f"internal cache error: {cache.layers[0].get_seq_length()} cached columns, mask of "
                               f"{width - 1}")
        rb, lb = _bucket(rows, self.row_buckets), _bucket(width, self.length_buckets)
        pb = _bucket(len(prefix), self.length_buckets) if prefix is not None else 0
        if rb is None or lb is None or pb is None:
            self._unpad(cache, rows)
            return None
        slots = self._load(cache, rows, width - 1, (rb, lb, pb, impl))
        extra = {}
        if prefix is not None:
            self._load_prefix(slots, prefix, pb)
            extra["agentrl_prefix"] = slots.prefix
        dev = self.device
        slots.ids.fill_(pad_id)
        slots.ids[:rows] = feed.to(dev)
        allowed = torch.zeros((rb, lb), dtype=torch.bool, device=dev)
        allowed[:rows, :width] = mask.to(dev).bool()
        allowed[rows:, width - 1] = True  # padding rows attend to their own column: no empty softmax
        if slots.mask.dtype == torch.bool:
            slots.mask.copy_(allowed[:, None, None, :])
        else:  # eager attention adds the mask to the scores
            slots.mask.fill_(torch.finfo(slots.mask.dtype).min).masked_fill_(allowed[:, None, None, :], 0.0)
        slots.positions.zero_()
        slots.positions[:rows, 0] = positions.to(dev)
        slots.column.fill_(width - 1)
        graphs, t0 = counters["stats"]["unique_graphs"], time.perf_counter()
        try:
            logits = _compiled("reduce-overhead" if self.cuda else None)(
                model, slots.ids, slots.mask, slots.positions, slots.cache, cache_name, extra)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - any failure of the compiler means: decode eager
            _fail(err)
            self._unpad(cache, rows)
            return None
        finally:
            # a call that compiled a graph counts as compiling (dynamo's start/end callbacks share one counter
            # across threads and calls, so they can miss a compile or span several calls); running it is ms
            if counters["stats"]["unique_graphs"] != graphs:
                self.compile_seconds += time.perf_counter() - t0
        for layer in cache.layers:
            layer._len = width
        self.steps += 1
        return logits[:rows].clone()  # a CUDA graph's output is overwritten by its next replay

    def _load(self, cache, rows: int, cached: int, bucket: tuple) -> _Slots:
        """The slots of ``bucket`` (rows, length, prefix length, attention), holding the batch's cache: each layer's
        buffers become the slot's (its ``rows`` x ``cached`` filled part copied in unless already there)."""
        slots = self._slots.get(bucket)
        if slots is None:
            if not self.cuda:
                self._slots.clear()  # one bucket's buffers at a time on a CPU
            rb, lb, _, impl = bucket
            slots = self._slots[bucket] = self._new_slots(cache, rb, lb, _MASK_KINDS[impl])
        for i, layer in enumerate(cache.layers):
            k, v = slots.keys[i], slots.values[i]
            if layer._kbuf is k:
                continue
            if not _views(layer._kbuf, k):
                k[:rows, :, :cached] = layer._kbuf[:rows, :, :cached]
                v[:rows, :, :cached] = layer._vbuf[:rows, :, :cached]
            layer._kbuf, layer._vbuf = k, v
        return slots

    def _load_prefix(self, slots: _Slots, prefix, pb: int) -> None:
        """Copy the batch's cascade prefix into the slots' padded prefix buffers (once per prefix)."""
        if slots.prefix_of is prefix:
            return
        if slots.prefix is None:
            k0, v0 = prefix.kv[0]
            keys = [k0.new_zeros((1, k.shape[1], pb, k.shape[3])) for k, _ in prefix.kv]
            values = [v0.new_zeros((1, v.shape[1], pb, v.shape[3])) for _, v in prefix.kv]
            slots.prefix = (keys, values, k0.new_zeros((1, 1, 1, pb)))
            if self.cuda:
                for t in (*keys, *values, slots.prefix[2]):
                    torch._dynamo.mark_static_address(t)
        keys, values, mask = slots.prefix
        n = len(prefix)
        for (k, v), kb, vb in zip(prefix.kv, keys, values, strict=True):
            kb[:, :, :n] = k
            vb[:, :, :n] = v
        mask.fill_(torch.finfo(mask.dtype).min)[..., :n] = 0.0
        slots.prefix_of = prefix

    def _new_slots(self, cache, rb: int, lb: int, additive: bool) -> _Slots:
        dev = self.device
        keys, values = [], []
        for layer in cache.layers:
            k0, v0 = layer._kbuf, layer._vbuf
            keys.append(k0.new_zeros((rb, k0.shape[1], lb, k0.shape[3])))
            values.append(v0.new_zeros((rb, v0.shape[1], lb, v0.shape[3])))
        column = torch.zeros(1, dtype=torch.long, device=dev)
        slots = _Slots(keys, values, torch.zeros((rb, 1), dtype=torch.long, device=dev),
                       torch.zeros((rb, 1, 1, lb), dtype=keys[0].dtype if additive else torch.bool, device=dev),
                       torch.zeros((rb, 1), dtype=torch.long, device=dev), column,
                       Cache(layers=[_SlotLayer(k, v, column) for k, v in zip(keys, values, strict=True)]))
        if self.cuda:  # CUDA graphs read and write these in place: their addresses must not change
            for t in (*keys, *values, slots.ids, slots.mask, slots.positions, column):
                torch._dynamo.mark_static_address(t)
        return slots

    @staticmethod
    def _unpad(cache, rows: int) -> None:
        """Before an eager step: each layer's buffers hold exactly the batch's rows (views of the slots)."""
        for layer in cache.layers:
            if layer._kbuf is not None and layer._kbuf.shape[0] != rows:
                layer._kbuf, layer._vbuf = layer._kbuf[:rows], layer._vbuf[:rows]


def _views(a, b) -> bool:
    """Whether ``a`` is ``b``'s leading rows (a view an eager step left)."""
    return a is not None and a._base is b and a.data_ptr() == b.data_ptr()
