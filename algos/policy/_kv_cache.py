"""A shim over transformers' KV-cache internals for :class:`~agentrl.algos.policy.HFPolicy`.

* :class:`GrowingLayer` — a ``DynamicLayer`` that appends into reserved room instead of re-concatenating.
* :func:`new_cache` — a ``DynamicCache`` of growing layers, optionally filled with given keys/values.
* :func:`stack_caches` — the rows of several caches in one, right-aligned (rows joining a running batch).
* :func:`model_forward` / :func:`out_cache` — call a model with a cache and read the cache back, under the
  argument/attribute name this transformers version uses.

Importing this module imports torch and transformers; the HF backend imports it when it first samples.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from agentrl.algos.models.lora import is_peft


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into reserved room instead of re-concatenating the whole cache.

    ``DynamicLayer.update`` does ``torch.cat([cache, new])`` at every decode step, copying the full cache of every
    layer per token; at a few hundred tokens of context that copy costs more than the model's matmuls on CPU.
    This layer keeps a buffer with spare positions, writes the new keys/values in place and returns views.
    """

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

    # keys/values are views of the filled part of the buffers; assigning keys (as DynamicLayer does) resets the length
    def _filled(self, buf):
        return None if buf is None else buf[:, :, : self._len]

    def _set_keys(self, value) -> None:
        self._kbuf = value
        self._len = 0 if value is None or value.dim() < 3 else value.shape[-2]

    def _set_values(self, value) -> None:
        self._vbuf = value

    keys = property(lambda self: self._filled(self._kbuf), _set_keys)
    values = property(lambda self: self._filled(self._vbuf), _set_values)

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


def stack_caches(parts, width: int, reserve: int) -> DynamicCache:
    """One cache of the rows of several, right-aligned in ``width`` columns (plus ``reserve`` free ones).

    ``parts``: ``(cache, rows)`` with ``rows`` an index of the rows to take (None: all). Each part's last
    ``min(its length, width)`` columns land at the right end; the columns cut or filled with zeros must be masked
    in every row they belong to (left padding). Layer by layer, each part's layer is released once copied, so the
    transient is one layer, not a second cache: the parts' caches are consumed.
    """
    cache = DynamicCache()
    cache.layer_class_to_replicate = None
    cache.layers = []
    for layer_index in range(len(parts[0][0].layers)):
        picked = []
        for part, rows in parts:
            layer = part.layers[layer_index]
            k, v = layer.keys, layer.values
            picked.append((k, v) if rows is None else (k.index_select(0, rows), v.index_select(0, rows)))
            part.layers[layer_index] = None  # consumed
        k0 = picked[0][0]
        shape = (sum(k.shape[0] for k, _ in picked), k0.shape[1], width + reserve, k0.shape[3])
        kbuf, vbuf = k0.new_zeros(shape), k0.new_zeros(shape)
        b = 0
        for k, v in picked:
            n = min(k.shape[2], width)
            kbuf[b: b + k.shape[0], :, width - n: width] = k[:, :, k.shape[2] - n:]
            vbuf[b: b + k.shape[0], :, width - n: width] = v[:, :, v.shape[2] - n:]
            b += k.shape[0]
        del picked
        layer = GrowingLayer(reserve=reserve)
        layer.device = k0.device
        layer.is_initialized = True
        layer._kbuf, layer._vbuf, layer._len = kbuf, vbuf, width
        cache.layers.append(layer)
    return cache


def new_cache(layers=None, reserve: int = 64) -> DynamicCache:
    """A ``DynamicCache`` of growing layers, filled with ``layers`` (per layer ``(keys, values)``) if given."""
    cache = DynamicCache()
    if layers:
        cache.layers = [GrowingLayer(k, v, reserve=reserve) for k, v in layers]
        cache.layer_class_to_replicate = None
    else:
        cache.layer_class_to_replicate = functools.partial(GrowingLayer, reserve=reserve)
    return cache


_CACHE_ARG: dict[type, str] = {}


def cache_arg(model) -> str:
    """The name of the KV-cache argument of ``model``'s forward in this transformers version (``cache`` in newer
    ones, ``past_key_values`` before)."""
    cls = type(model)
    if cls not in _CACHE_ARG:
        base = model.get_base_model() if is_peft(model) else model
        params = inspect.signature(type(base).forward).parameters
        _CACHE_ARG[cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_ARG[cls]


def model_forward(model, ids, cache, attention_mask, position_ids):
    """``model(...)`` with the KV cache passed under the name this transformers version uses."""
    return model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                 logits_to_keep=1, **{cache_arg(model): cache})


def out_cache(out):
    """The KV cache a forward pass returned (``out.cache`` or ``out.past_key_values``)."""
    return out.cache if getattr(out, "cache", None) is not None else out.past_key_values
