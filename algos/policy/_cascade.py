"""Shared-prefix ("cascade") attention for :class:`~agentrl.algos.policy.HFPolicy`.

When every row of a decode batch starts with the same tokens (the system prompt and tool schemas of an env), the
keys/values of that prefix are kept once, ``[1, Hkv, P, D]`` per layer (:class:`Prefix`), and each row's cache
holds only its own suffix (left-padded into the batch, padding masked, as without a prefix). The attention of a
query is then the log-sum-exp merge of two parts:

* the shared prefix, one attention over the queries of all rows stacked (and the query heads of each KV head
  side by side: a reshape, K/V are never repeated), unmasked: every query comes after the whole prefix;
* the row's own suffix, with its padding and causal mask.

``softmax([a, b]) @ [Va; Vb] = (e^la oa + e^lb ob) / (e^la + e^lb)`` with ``la``/``lb`` the log-sum-exp of the
scores of each part and ``oa``/``ob`` each part's own softmax-weighted values: the result is the attention over
the concatenation, up to rounding. Positions (RoPE) are the true positions; the prefix keys were rotated at theirs.

The attention function is registered with transformers' ``AttentionInterface`` under :data:`NAME` and set on the
sampled model only inside :func:`activate` (the previous implementation is restored on exit). No mask function
is registered, so transformers builds no mask and passes ``None``; the function builds the suffix mask itself
from the 2D mask of the running forward pass (:class:`CascadeState`). On CPU both parts run in torch's flash
attention kernel (``_scaled_dot_product_flash_attention_for_cpu``, which returns the log-sum-exp); elsewhere in
an fp32 matmul path.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.algos.rollout.trajectory import shared_prefix_len

NAME = "agentrl_cascade"
MIN_PREFIX = 32  # below this many common tokens a call decodes without a shared prefix

_STATE: contextvars.ContextVar[CascadeState | None] = contextvars.ContextVar("agentrl_cascade", default=None)
_registered = False


@dataclass(eq=False)
class Prefix:
    """Keys/values of tokens shared by several trajectories: per layer ``(keys, values)`` of shape [1, Hkv, P, D]."""

    tokens: tuple[int, ...]
    kv: list[tuple[Any, Any]]

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class CascadeState:
    """What the attention function needs besides its arguments: the prefix and the suffix mask of this forward."""

    prefix: Prefix
    mask: Any = None  # [B, S] 1 = attend, over the suffix columns (cached suffix + this pass's tokens)
    _built: dict = field(default_factory=dict)

    def set_mask(self, mask) -> None:
        self.mask = mask
        self._built = {}

    def suffix_mask(self, q_len: int, groups: int, dtype):
        """(additive mask [B, 1, groups*q_len or 1, S], rows with any key [B, 1, groups*q_len]), built once a pass."""
        key = (q_len, groups, dtype)
        if key not in self._built:
            m = self.mask.bool()
            s = m.shape[1]
            if q_len == 1:
                allowed = m[:, None, None, :]
            else:
                col = torch.arange(s, device=m.device)
                last = s - q_len + torch.arange(q_len, device=m.device)
                allowed = m[:, None, None, :] & (col[None, :] <= last[:, None])[None, None]
                allowed = allowed[:, :, None].expand(-1, -1, groups, -1, -1).reshape(m.shape[0], 1, groups * q_len, s)
            add = torch.zeros(allowed.shape, dtype=dtype, device=m.device).masked_fill_(~allowed, float("-inf"))
            any_key = allowed.any(-1)
            if q_len == 1:
                any_key = any_key.expand(-1, -1, groups)
            self._built[key] = (add, any_key)
        return self._built[key]


def register() -> None:
    """Register the attention function with transformers (once per process)."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(NAME, cascade_attention)
        _registered = True


def supported(model) -> bool:
    """Whether ``model``'s attention goes through transformers' attention interface with plain causal attention.

    Requires ``_supports_attention_backend`` (Llama, Qwen2, Qwen3, Mistral, ...), full attention in every layer (no
    sliding window: its mask would be relative to the suffix) and no logit soft-capping.
    """
    if not getattr(type(model), "_supports_attention_backend", False):
        return False
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    types = getattr(config, "layer_types", None)
    if types is not None:
        if any(t != "full_attention" for t in types):
            return False
    elif getattr(config, "sliding_window", None) is not None:
        return False
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return False
    return any(hasattr(m, "layer_idx") and hasattr(m, "num_key_value_groups") for m in model.modules())


@contextlib.contextmanager
def activate(model, prefix: Prefix):
    """Inside: ``model`` attends with :func:`cascade_attention` over ``prefix``; the old implementation after."""
    register()
    configs = {}
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "_attn_implementation_internal"):
            configs[id(c)] = c
    old = {k: c._attn_implementation_internal for k, c in configs.items()}
    state = CascadeState(prefix)
    token = _STATE.set(state)
    try:
        for c in configs.values():
            c._attn_implementation_internal = NAME
        yield state
    finally:
        for k, c in configs.items():
            c._attn_implementation_internal = old[k]
        _STATE.reset(token)


def _attend(q, k, v, mask, scale, fused: bool | None = None):
    """(softmax(q k^T * scale + mask) v, log-sum-exp of the scores) for [B, H, L, D] tensors; lse in fp32.

    ``fused`` (default: on CPU) runs torch's CPU flash kernel, else an fp32 matmul path (any device).
    """
    if fused is None:
        fused = q.device.type == "cpu"
    if fused:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=scale)
        return out, lse
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask.float()
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp(scores - lse[..., None]).nan_to_num_(0.0)
    return torch.matmul(p, v.float()), lse


def attend_parts(query, key, value, prefix_k, prefix_v, suffix_mask, any_key, scale, fused: bool | None = None,
                 prefix_mask=None):
    """Attention of ``query`` [B, H, Lq, D] over a shared prefix [1, Hkv, P, D] followed by per-row keys [B, Hkv, S, D].

    ``suffix_mask``: additive [B, 1, g*Lq or 1, S] (g = H // Hkv; query heads of a KV head are adjacent); ``any_key``:
    [B, 1, g*Lq] bool, False where a query may attend to no suffix key; ``prefix_mask``: None, or additive
    [1, 1, 1, P] (a prefix padded to a fixed size: the compiled decode step). Returns [B, Lq, H, D] in ``query``'s
    dtype.
    """
    b, h, lq, d = query.shape
    hkv = key.shape[1]
    g = h // hkv
    qg = query.reshape(b, hkv, g * lq, d)
    qp = qg.transpose(0, 1).reshape(1, hkv, b * g * lq, d)
    o_a, lse_a = _attend(qp, prefix_k, prefix_v, prefix_mask, scale, fused)
    o_a = o_a.reshape(hkv, b, g * lq, d).transpose(0, 1)
    lse_a = lse_a.reshape(hkv, b, g * lq).transpose(0, 1)
    o_b, lse_b = _attend(qg, key, value, suffix_mask, scale, fused)
    lse_b = lse_b.float().masked_fill(~any_key, float("-inf"))
    lse_a = lse_a.float()
    top = torch.maximum(lse_a, lse_b)
    w_a = torch.exp(lse_a - top)[..., None]
    w_b = torch.exp(lse_b - top)[..., None]
    out = (o_a.float() * w_a + o_b.float() * w_b) / (w_a + w_b)
    out = out.reshape(b, hkv, g, lq, d).reshape(b, h, lq, d).transpose(1, 2)
    return out.to(query.dtype).contiguous()


def cascade_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The registered attention function: prefix + suffix merged; the suffix mask comes from the active state.

    The compiled decode step (``_compiled_decode.py``) passes instead ``agentrl_prefix`` (per layer padded prefix
    keys, values, and their additive mask [1, 1, 1, P]) and an additive 4-D suffix mask as ``attention_mask``."""
    static = kwargs.get("agentrl_prefix")
    if static is not None:
        keys, values, prefix_mask = static
        g = query.shape[1] // key.shape[1]
        any_key = (attention_mask > torch.finfo(attention_mask.dtype).min).any(-1).expand(-1, -1, g)
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return attend_parts(query, key, value, keys[module.layer_idx], values[module.layer_idx], attention_mask,
                            any_key, scale, prefix_mask=prefix_mask), None
    state = _STATE.get()
    if state is None:
        raise RuntimeError(f"attention implementation {NAME!r} used outside agentrl's HFPolicy decoding")
    if kwargs.get("sliding_window") is not None or kwargs.get("softcap") is not None:
        raise RuntimeError(f"{NAME!r} attention supports neither sliding windows nor soft-capping")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    g = query.shape[1] // key.shape[1]
    add, any_key = state.suffix_mask(query.shape[2], g, query.dtype)
    pk, pv = state.prefix.kv[module.layer_idx]
    return attend_parts(query, key, value, pk, pv, add, any_key, scale), None


# ------------------------------------------------------------------ planning a call (used by HFPolicy)
def dense(prefix: Prefix | None, kv, n: int):
    """Per layer (keys, values) [1, Hkv, n, D] of a cached trajectory stored as ``prefix`` + ``kv`` (either may be
    None)."""
    if prefix is None:
        return [(k[:, :, :n], v[:, :, :n]) for k, v in kv]
    if kv is None or n <= len(prefix):
        return [(k[:, :, :n], v[:, :, :n]) for k, v in prefix.kv]
    return [(torch.cat([pk, k], 2)[:, :, :n], torch.cat([pv, v], 2)[:, :, :n])
            for (pk, pv), (k, v) in zip(prefix.kv, kv, strict=True)]


def shared_length(prompts) -> int:
    """Tokens a call's prompts share as a prefix, 0 below :data:`MIN_PREFIX` (every row keeps at least one token
    to prefill)."""
    common = min(shared_prefix_len(prompts), min(len(p) for p in prompts) - 1)
    return common if common >= MIN_PREFIX else 0


def choose_prefix(prompts, taken, compute) -> Prefix | None:
    """The shared prefix of a batch, or None (decode without one).

    ``taken``: per row ``(prefix, kv, n)`` of its usable cache. A prefix already held by rows' caches is reused
    when every prompt starts with it (the one most rows hold). Otherwise the prompts' common tokens are cut from
    the row with the longest cache, only as many as it holds when it holds at least :data:`MIN_PREFIX` (cached
    tokens are never recomputed); with less cached anywhere, the common tokens are computed by
    ``compute(tokens)`` (per layer keys/values).
    """
    common = shared_length(prompts)
    if not common:
        return None
    counts: dict[int, tuple[int, Prefix]] = {}
    for pre, _, n in taken:
        if pre is not None and n >= len(pre) and len(pre) <= common:
            c, _ = counts.get(id(pre), (0, pre))
            counts[id(pre)] = (c + 1, pre)
    if counts:
        return max(counts.values(), key=lambda cp: (cp[0], len(cp[1])))[1]
    best = max(range(len(taken)), key=lambda i: taken[i][2])
    pre, kv, n = taken[best]
    if n >= MIN_PREFIX:
        cut = min(n, common)
        return Prefix(tuple(prompts[0][:cut]), [(k.contiguous(), v.contiguous()) for k, v in dense(pre, kv, cut)])
    return Prefix(tuple(prompts[0][:common]), compute(tuple(prompts[0][:common])))


def row_state(prefix: Prefix | None, taken):
    """(suffix kv or None, suffix tokens cached, offset) of one row given the call's prefix."""
    pre, kv, n = taken
    if prefix is None:
        return (dense(pre, kv, n) if n else None), n, 0
    p = len(prefix)
    if n <= p:
        return None, 0, p
    if pre is prefix:
        return [(k[:, :, : n - p], v[:, :, : n - p]) for k, v in kv], n - p, p
    return [(k[:, :, p:], v[:, :, p:]) for k, v in dense(pre, kv, n)], n - p, p
