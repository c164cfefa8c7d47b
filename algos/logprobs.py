"""Per-token log-probabilities of a sequence under a causal LM, without materialising [B, T, V] logits.

Vocabularies are large (SmolLM2: 49,152) and agentic contexts are long, so ``model(input_ids).logits`` for a
batch of multi-turn trajectories is the memory peak of a training step: 16 x 2048 positions x 49k x 4 bytes is
6.4 GB in fp32. :func:`token_logprobs` runs the decoder once, then applies the LM head to ``chunk_size``
positions at a time. With gradients on, each chunk is recomputed in the backward pass (activation
checkpointing), so neither the forward nor the backward pass ever holds more than one chunk of logits.

The reference policy of KL and DPO is the same model with its LoRA adapter switched off::

    with model.disable_adapter():          # PEFT: the base weights alone
        ref = token_logprobs(model, ids, mask)
"""

from __future__ import annotations

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


def _chunk_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, want_entropy: bool):
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not want_entropy:
        return logp, None
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    return_entropy: bool = False,
):
    """Log-probability of every token given the tokens before it.

    Args:
        model: a transformers causal LM, or a PEFT model wrapping one (inside ``model.disable_adapter()`` this
            gives the reference policy).
        input_ids: ``[B, T]`` token ids (right padding; padded positions produce values you must mask out).
        attention_mask: ``[B, T]`` 1 on real tokens, 0 on padding; ``None`` = all real.
        temperature: logits are divided by it before the softmax — use the sampler's temperature so the
            result is the log-probability of the distribution the rollout sampled from.
        chunk_size: positions per LM-head call; bounds memory at ``B x chunk_size x V`` floats.
        return_entropy: also return the entropy (nats) of each position's predictive distribution. It is
            detached: a metric, not a loss term.

    Returns:
        ``logprobs [B, T]`` (float32) where ``logprobs[:, t] = log p(input_ids[:, t] | input_ids[:, :t])`` and
        ``logprobs[:, 0] = 0`` — aligned with the tokens, like :class:`~agentrl.algos.trajectory.Trajectory`
        ``logprobs``; with ``return_entropy`` a tuple ``(logprobs, entropy)``, ``entropy[:, t]`` being the
        entropy of the distribution token ``t`` was drawn from (0 at ``t = 0``). Differentiable with respect
        to the model's trainable parameters when grad mode is on.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, time], got shape {tuple(input_ids.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    decoder, head = _decoder_and_head(model)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    bsz, seq_len = input_ids.shape
    # Position t-1's hidden state predicts token t.
    hidden, targets = hidden[:, :-1], input_ids[:, 1:]
    use_ckpt = torch.is_grad_enabled() and hidden.requires_grad
    lps, ents = [], []
    for s in range(0, seq_len - 1, chunk_size):
        h, y = hidden[:, s:s + chunk_size], targets[:, s:s + chunk_size]
        if use_ckpt:
            lp, ent = checkpoint(_chunk_logprobs, head, h, y, temperature, return_entropy, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(head, h, y, temperature, return_entropy)
        lps.append(lp)
        if return_entropy:
            ents.append(ent.detach())
    zeros = torch.zeros(bsz, 1, dtype=torch.float32, device=input_ids.device)
    logprobs = torch.cat([zeros] + lps, dim=1)
    if not return_entropy:
        return logprobs
    return logprobs, torch.cat([zeros] + ents, dim=1)
