"""Per-token log-probabilities of a sequence under a causal LM, without materialising [B, T, V] logits.

Vocabularies are large (SmolLM2: 49,152) and agentic contexts are long, so ``model(input_ids).logits`` for a
batch of multi-turn trajectories is the memory peak of a training step: 16 x 2048 positions x 49k x 4 bytes is
6.4 GB in fp32. :func:`token_logprobs` runs the decoder once, then applies the LM head to ``chunk_size``
positions at a time. Its backward pass recomputes each chunk's softmax from the saved log-normaliser and writes
the gradient straight into the hidden states and the head (no autograd graph over the logits), so neither pass
ever holds more than one chunk of logits.

Only the positions asked for are computed: a trainer passes ``positions=loss_mask`` and skips the LM head on the
prompt and tool-output tokens — most of an agentic trajectory.

Shared prefix. The trajectories of a batch usually open with the same tokens (the system prompt with the tool
schemas: ~650 of ~750 tokens per ToolUse episode). The decoder runs that common prefix **once** and the rows
continue from its KV cache, expanded over the batch (a view: gradients from every row flow back into the one
prefix computation). Same function, same gradients — only less work (``share_prefix``, on by default). An update
split into micro-batches runs the prefix once for all of them (:func:`prefix_pass`, :class:`PrefixPass`).

Logit transforms. Some architectures change the LM head's output before the softmax: Gemma-2/3 soft-cap it
(``final_logit_softcapping``: ``cap * tanh(logits / cap)``), Granite divides by ``logits_scaling``, Cohere
multiplies by ``logit_scale``, Falcon-H1 by ``lm_head_multiplier``. Those are read from the model's config and
applied (a scale folds into the temperature; a soft-cap takes the autograd path). Any other model is checked
once, on its first call, against its own forward pass on a few tokens; a model whose logits differ from the
head's output in a way not listed here is refused with a ``TypeError`` instead of training on the wrong
distribution.

The reference policy of KL and DPO is computed by the same function on the policy as it was when the stage
started (:mod:`agentrl.algos.training.reference`).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _decoder_and_head(model):
    """The model's transformer body (returns final, normed hidden states) and its output projection."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the HF model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    head = base.get_output_embeddings()
    if decoder is None or head is None:
        raise TypeError(f"{type(base).__name__} is not a causal LM with get_decoder()/get_output_embeddings(); "
                        "token_logprobs needs a transformers *ForCausalLM model")
    return decoder, head


def _logit_transform(base) -> tuple[float, float | None]:
    """``(multiplier, softcap)``: the architecture's ``logits = softcap(head(h) * multiplier)`` (1.0, None: none)."""
    cfg = getattr(base, "config", None)
    if cfg is not None and hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    mult = 1.0
    scaling = getattr(cfg, "logits_scaling", None)  # Granite: logits / logits_scaling
    if isinstance(scaling, (int, float)) and scaling:
        mult /= float(scaling)
    scale = getattr(cfg, "logit_scale", None)  # Cohere: logits * logit_scale
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        mult *= float(scale)
    head_mult = getattr(cfg, "lm_head_multiplier", None)  # Falcon-H1
    if isinstance(head_mult, (int, float)) and head_mult:
        mult *= float(head_mult)
    cap = getattr(cfg, "final_logit_softcapping", None)  # Gemma-2/3
    return mult, (float(cap) if cap else None)


def _apply_transform(logits: torch.Tensor, mult: float, cap: float | None) -> torch.Tensor:
    if mult != 1.0:
        logits = logits * mult
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


_CHECKED = "_agentrl_logit_transform"


def _checked_transform(base, decoder, head, input_ids: torch.Tensor) -> tuple[float, float | None]:
    """:func:`_logit_transform`, verified once per model against the model's own forward pass on a few tokens."""
    known = base.__dict__.get(_CHECKED)
    if known is not None:
        return known
    mult, cap = _logit_transform(base)
    probe = input_ids[:1, : min(8, input_ids.shape[1])]
    modes = [(m, m.training) for m in base.modules()]  # each module's own mode (checkpointing layers may differ)
    base.eval()
    try:
        with torch.no_grad():
            theirs = torch.log_softmax(base(input_ids=probe, use_cache=False).logits.float(), dim=-1)
            h = decoder(input_ids=probe, use_cache=False).last_hidden_state
            ours = torch.log_softmax(_apply_transform(head(h).float(), mult, cap), dim=-1)
    finally:
        for m, mode in modes:
            m.training = mode
    tol = 1e-3 if h.dtype == torch.float32 else 5e-2
    err = float((theirs - ours).abs().max())
    if err > tol:
        raise TypeError(f"{type(base).__name__} transforms its LM head's logits in a way token_logprobs does not "
                        f"know (log-probabilities differ by up to {err:.3g}); supported: "
                        "final_logit_softcapping, logits_scaling, logit_scale, lm_head_multiplier")
    base.__dict__[_CHECKED] = (mult, cap)
    return mult, cap


def _chunk_stats(hidden, weight, targets, temperature, want_entropy, want_grad):
    """One chunk of rows through the head: ``(logp, lse, entropy, grad_h)`` of ``log_softmax(h @ W.T / T)``.

    One pass over the ``[rows, V]`` logits (fp32): shifted by their row maximum in place, one ``exp``; the
    entropy and, with ``want_grad``, ``d logp / d h = (onehot(target) - softmax) @ W / T`` come from the same
    exponentials (``grad_h`` ``[rows, H]`` in the hidden dtype, else None)."""
    logits = (hidden @ weight.t()).float()
    if temperature != 1.0:
        logits.div_(temperature)
    top = logits.amax(dim=-1, keepdim=True)
    logits.sub_(top)  # shifted: every logit <= 0
    p = torch.exp(logits)
    log_sum = torch.log(p.sum(-1))
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - log_sum
    entropy = None
    if want_entropy:  # H = log S - sum(e^l * l) / S over the shifted logits l
        entropy = log_sum - torch.bmm(p[:, None, :], logits[:, :, None]).view(-1) / torch.exp(log_sum)
    grad_h = None
    if want_grad:
        p.div_(torch.exp(log_sum)[:, None]).neg_()  # -softmax
        p.scatter_add_(-1, targets[:, None], torch.ones_like(logp)[:, None])
        if temperature != 1.0:
            p.div_(temperature)
        grad_h = p.to(hidden.dtype) @ weight
    return logp, top.squeeze(-1) + log_sum, entropy, grad_h


class _LinearHeadLogprobs(torch.autograd.Function):
    """``log_softmax(h @ W.T / T)[target]`` over rows of ``h`` in chunks, with a hand-written backward.

    The head's weight frozen (LoRA, the usual case): the forward pass, which already has each chunk's
    exponentials, also forms ``d logp / d h`` (one ``[rows, H]`` tensor, :func:`_chunk_stats`), and the backward
    pass only scales it by the incoming gradient: no logits are recomputed. A trainable head (its gradient needs
    the whole ``[rows, V]`` softmax against the incoming gradient): the forward pass keeps only the per-row
    log-normaliser, and the backward pass recomputes each chunk's logits once and forms
    ``d logp / d logits = onehot(target) - softmax`` directly.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk, want_entropy, grad_in_forward):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(n if want_entropy else 0, dtype=torch.float32, device=hidden.device)
        dh = torch.empty_like(hidden) if grad_in_forward else None
        for s in range(0, n, chunk):
            lp, z, ent, g = _chunk_stats(hidden[s:s + chunk], weight, targets[s:s + chunk], temperature,
                                         want_entropy, grad_in_forward)
            logp[s:s + chunk], lse[s:s + chunk] = lp, z
            if want_entropy:
                entropy[s:s + chunk] = ent
            if grad_in_forward:
                dh[s:s + chunk] = g
        if grad_in_forward:
            ctx.save_for_backward(dh)
        else:
            ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.chunk, ctx.grad_in_forward = temperature, chunk, grad_in_forward
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        if ctx.grad_in_forward:
            (dh,) = ctx.saved_tensors
            if ctx.needs_input_grad[1]:
                raise RuntimeError("the LM head's weight needs a gradient that was not prepared in the forward pass")
            return (dh * grad_logp[:, None]).to(dh.dtype), None, None, None, None, None, None
        hidden, weight, targets, lse = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s:s + chunk]
            logits = (h @ weight.t()).float()
            if temperature != 1.0:
                logits.div_(temperature)
            g = torch.exp(logits - lse[s:s + chunk, None])  # softmax
            gl = grad_logp[s:s + chunk]
            g.mul_(-gl[:, None])
            g.scatter_add_(-1, targets[s:s + chunk, None], gl[:, None])
            if temperature != 1.0:
                g.div_(temperature)
            g = g.to(hidden.dtype)
            if need_h:
                grad_h[s:s + chunk] = g @ weight
            if need_w:
                grad_w += (g.t() @ h).float()
        return grad_h, (grad_w.to(weight.dtype) if need_w else None), None, None, None, None, None


def _generic_head_logprobs(head, hidden, targets, temperature, chunk, want_entropy, mult=1.0, softcap=None):
    """Any head module (a LoRA-wrapped head, a bias) and logit transform: autograd with per-chunk checkpointing."""

    def one(h, y):
        logits = _apply_transform(head(h).float(), mult, softcap)
        if temperature != 1.0:
            logits = logits / temperature
        lp_all = F.log_softmax(logits, dim=-1)
        lp = lp_all.gather(-1, y[:, None]).squeeze(-1)
        ent = -(lp_all.exp() * lp_all).sum(-1) if want_entropy else lp.new_zeros(0)
        return lp, ent.detach()

    lps, ents = [], []
    for s in range(0, hidden.shape[0], chunk):
        h, y = hidden[s:s + chunk], targets[s:s + chunk]
        if torch.is_grad_enabled() and h.requires_grad:
            lp, ent = checkpoint(one, h, y, use_reentrant=False)
        else:
            lp, ent = one(h, y)
        lps.append(lp)
        ents.append(ent)
    empty = hidden.new_zeros(0, dtype=torch.float32)
    return (torch.cat(lps) if lps else empty), (torch.cat(ents) if ents else empty)


#: The shortest common prefix the forward pass runs once for all rows (shorter ones are not worth the second call);
#: the micro-batch packer counts a prefix once only from this length on, as the forward pass computes it.
MIN_SHARED_PREFIX = 32


def padded_shared_prefix_len(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> int:
    """Length of the token prefix that every row of a padded ``[B, T]`` batch shares, real tokens only: the
    tensor form of :func:`~agentrl.algos.rollout.trajectory.shared_prefix_len`."""
    same = (input_ids == input_ids[:1]).all(dim=0)
    if attention_mask is not None:
        same &= attention_mask.bool().all(dim=0)
    diff = (~same).nonzero()
    return int(diff[0, 0]) if diff.numel() else input_ids.shape[1]


def _replay_safe_cache(frozen: bool, layers=None):
    """A KV cache whose ``update`` gives the same answer when a checkpointed layer is replayed in the backward pass.

    Recording (``frozen=False``, the shared prefix): a layer's keys/values are stored on its first ``update`` only; a
    replay returns the recomputed states and leaves the stored ones (and their autograd graph) alone. Frozen (the
    rows' tails): returns the stored prefix joined with the new states and stores nothing. Either way the attention
    sees what a plain :class:`~transformers.DynamicCache` would show it.
    """
    from transformers import DynamicCache

    class ReplaySafeCache(DynamicCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            if frozen:
                layer = self.layers[layer_idx]
                return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)
            if layer_idx in recorded:  # a backward replay of this layer
                return key_states, value_states
            recorded.add(layer_idx)
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    recorded: set[int] = set()
    return ReplaySafeCache(ddp_cache_data=layers) if layers is not None else ReplaySafeCache()


def _checkpointing(decoder) -> list:
    """The decoder layers that will checkpoint in this forward pass (transformers' activation checkpointing runs
    a layer under :func:`torch.utils.checkpoint.checkpoint` only in training mode with grad enabled)."""
    if not torch.is_grad_enabled():
        return []
    return [m for m in decoder.modules() if getattr(m, "gradient_checkpointing", False) and m.training
            and hasattr(m, "_can_checkpoint_with_cache")]


@contextlib.contextmanager
def _cached_pass(decoder):
    """Inside: the decoder may be called with one of our KV caches; yields ``(cache keyword, use_cache)``.

    Under activation checkpointing the caches are kept: both are replay-safe (:func:`_replay_safe_cache`), so
    the layers are told they may checkpoint with a cache."""
    import inspect

    # transformers renames past_key_values -> cache (deprecated in 5.x); use whichever this version takes
    key = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
    layers = _checkpointing(decoder)
    for m in layers:
        m._can_checkpoint_with_cache = True  # instance attribute: our caches survive the replay
    try:
        yield key, not layers  # a checkpointing layer would warn about use_cache=True (the cache is passed anyway)
    finally:
        for m in layers:
            m.__dict__.pop("_can_checkpoint_with_cache", None)


def _prefix_states(decoder, prefix_ids: torch.Tensor):
    """The decoder over one row's prefix ``[1, p]``: its hidden states ``[1, p, H]`` and each layer's keys and
    values."""
    with _cached_pass(decoder) as (key, use_cache):
        recording = _replay_safe_cache(frozen=False)
        head = decoder(input_ids=prefix_ids, use_cache=use_cache, **{key: recording}).last_hidden_state
    return head, [(layer.keys, layer.values) for layer in recording.layers]


def _tail_states(decoder, input_ids, attention_mask, head, kv) -> torch.Tensor:
    """Final hidden states ``[B, T, H]`` of rows that open with the prefix whose states are ``head`` and ``kv``
    (:func:`_prefix_states`): the rows' remaining tokens continue from its KV cache, expanded over the rows (a
    view: the prefix's keys and values are never copied B times, and every row's gradient flows into them)."""
    bsz, seq_len = input_ids.shape
    p = head.shape[1]
    shared = _replay_safe_cache(frozen=True, layers=[(k.expand(bsz, *k.shape[1:]), v.expand(bsz, *v.shape[1:]))
                                                     for k, v in kv])
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    positions = torch.arange(p, seq_len, device=input_ids.device).expand(bsz, -1)
    with _cached_pass(decoder) as (key, use_cache):
        tail = decoder(input_ids=input_ids[:, p:], attention_mask=mask, position_ids=positions,
                       use_cache=use_cache, **{key: shared}).last_hidden_state
    return torch.cat([head.expand(bsz, -1, -1), tail], dim=1)


def _hidden_states(decoder, input_ids, attention_mask, share_prefix: bool, min_prefix: int = MIN_SHARED_PREFIX):
    """Final hidden states ``[B, T, H]``; the common prefix is run once when that saves work."""
    bsz, seq_len = input_ids.shape
    p = padded_shared_prefix_len(input_ids, attention_mask) if share_prefix and bsz > 1 else 0
    p = min(p, seq_len - 1)
    if p < min_prefix:
        return decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    head, kv = _prefix_states(decoder, input_ids[:1, :p])
    return _tail_states(decoder, input_ids, attention_mask, head, kv)


class PrefixPass:
    """The decoder's pass over a prefix that several micro-batches open with, run once for all of them.

    An update's rows all open with the same tokens (the system prompt with the tool schemas), and its
    micro-batches would each run them again: on a ToolUse batch ~600 of every ~800 tokens. Built by
    :func:`prefix_pass`, given to :func:`token_logprobs` (``prefix=``) for each micro-batch, whose rows then
    continue from the prefix's states; those states are detached leaves, so each micro-batch's ``backward()``
    leaves its gradient with respect to them on them. :meth:`backward` then sends the sum through the prefix's own
    pass, once: the parameters get what they would have got from each micro-batch running the prefix itself (the
    gradient is linear in the micro-batches), for one prefix pass instead of one per micro-batch. Call it after
    the last micro-batch's ``backward()`` and before the optimizer step.
    """

    def __init__(self, ids: torch.Tensor, head: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]]):
        self.ids = ids  # [p]
        self._outputs = [head, *(t for pair in kv for t in pair)]
        grad = head.requires_grad
        self._leaves = [t.detach().requires_grad_(grad) for t in self._outputs]
        self.head = self._leaves[0]
        self.kv = [(self._leaves[1 + 2 * i], self._leaves[2 + 2 * i]) for i in range(len(kv))]

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def backward(self) -> None:
        """The micro-batches' gradients with respect to the prefix's states, through the prefix's pass (once;
        the pass's graph is freed). Nothing to do when no micro-batch backpropagated."""
        pairs = [(out, leaf.grad) for out, leaf in zip(self._outputs, self._leaves, strict=True)
                 if leaf.grad is not None and out.requires_grad]
        self._outputs, self._leaves = [], []
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])


def prefix_pass(model, prefix_ids: torch.Tensor) -> PrefixPass:
    """Run the decoder of ``model`` (a causal LM, or a PEFT model wrapping one) over ``prefix_ids`` (``[p]``) once,
    for :func:`token_logprobs` to continue from in each micro-batch (see :class:`PrefixPass`). Run it in the mode
    (train/eval, checkpointing) and grad mode of the micro-batches' passes."""
    if prefix_ids.dim() != 1 or prefix_ids.shape[0] < 1:
        raise ValueError(f"prefix_ids must be [p] with p >= 1, got shape {tuple(prefix_ids.shape)}")
    decoder, _ = _decoder_and_head(model)
    head, kv = _prefix_states(decoder, prefix_ids[None])
    return PrefixPass(prefix_ids, head, kv)


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    return_entropy: bool = False,
    positions: torch.Tensor | None = None,
    share_prefix: bool = True,
    prefix: PrefixPass | None = None,
):
    """Log-probability of every token given the tokens before it.

    Args:
        model: a transformers causal LM, or a PEFT model wrapping one (its logit transform, if any, is applied:
            see the module docstring).
        input_ids: ``[B, T]`` token ids (right padding).
        attention_mask: ``[B, T]`` 1 on real tokens, 0 on padding; ``None`` = all real.
        temperature: logits are divided by it before the softmax — use the rollout temperature so the
            result is the log-probability of the distribution the rollout sampled from.
        chunk_size: positions (counted over the whole batch) per LM-head call; bounds the logits memory at
            ``chunk_size x V`` floats.
        return_entropy: also return the entropy (nats) of each position's predictive distribution. It is
            detached: a metric, not a loss term.
        positions: optional ``[B, T]`` mask of the tokens whose log-probability is wanted (e.g. the loss
            mask); the LM head runs only there. Default: every real token.
        share_prefix: run the rows' common token prefix through the decoder once (see the module docstring).
        prefix: a :class:`PrefixPass` every row opens with (checked), run once for several micro-batches: the
            rows continue from its states (``share_prefix`` then does not apply).

    Returns:
        ``logprobs [B, T]`` (float32) where ``logprobs[:, t] = log p(input_ids[:, t] | input_ids[:, :t])`` at the
        computed positions and 0 elsewhere (always at ``t = 0``, at padding, and outside ``positions``) —
        aligned with the tokens, like :class:`~agentrl.algos.rollout.trajectory.Trajectory` ``logprobs``. With
        ``return_entropy`` a tuple ``(logprobs, entropy)``, ``entropy[:, t]`` being the entropy of the
        distribution token ``t`` was drawn from (0 where not computed). Differentiable with respect to the
        model's trainable parameters when grad mode is on.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, time], got shape {tuple(input_ids.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    decoder, head = _decoder_and_head(model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    mult, softcap = _checked_transform(base, decoder, head, input_ids)
    if prefix is None:
        hidden = _hidden_states(decoder, input_ids, attention_mask, share_prefix)
    else:
        p = len(prefix)
        if input_ids.shape[1] <= p or not bool((input_ids[:, :p] == prefix.ids.to(input_ids.device)).all()) or (
                attention_mask is not None and not bool(attention_mask[:, :p].all())):
            raise ValueError(f"every row must open with the prefix's {p} tokens and go on after them")
        hidden = _tail_states(decoder, input_ids, attention_mask, prefix.head, prefix.kv)
    bsz, seq_len = input_ids.shape
    want = torch.ones(bsz, seq_len - 1, dtype=torch.bool, device=input_ids.device)
    if attention_mask is not None:
        want &= attention_mask[:, 1:].bool()
    if positions is not None:
        want &= positions[:, 1:].bool()
    # Position t-1's hidden state predicts token t.
    h = hidden[:, :-1][want]
    y = input_ids[:, 1:][want]
    plain_linear = (type(head) is torch.nn.Linear and head.bias is None and softcap is None)
    if plain_linear:
        # logits * mult / T: a scale folds into the temperature
        # the head frozen (LoRA): d logp / d h is formed in the forward pass, from the same exponentials
        grad_in_forward = torch.is_grad_enabled() and h.requires_grad and not head.weight.requires_grad
        lp, ent = _LinearHeadLogprobs.apply(h, head.weight, y, float(temperature) / mult, chunk_size, return_entropy,
                                            grad_in_forward)
    else:
        lp, ent = _generic_head_logprobs(head, h, y, temperature, chunk_size, return_entropy, mult, softcap)
    logprobs = lp.new_zeros(bsz, seq_len)
    logprobs[:, 1:][want] = lp
    if not return_entropy:
        return logprobs
    entropy = torch.zeros(bsz, seq_len, dtype=torch.float32, device=input_ids.device)
    entropy[:, 1:][want] = ent.detach()
    return logprobs, entropy
