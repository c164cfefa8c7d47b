"""The sampling kernel: one token per row of logits, with its log-probability, from the row's own generator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.algos.policy.base import SamplingParams


def sample_tokens(logits, sampling: SamplingParams, generators: Sequence[Any]):
    """Pick one token per row of ``logits`` [B, V]; returns ``(tokens [B], logprobs [B])`` (fp32).

    The logprob is that of the distribution the token was drawn from: the logits divided by the temperature,
    cut to the ``top_k`` most likely tokens, then to the top-``top_p`` nucleus, renormalised over what is kept
    (``log_softmax`` with the dropped tokens at ``-inf``; vLLM's ``--logprobs-mode processed_logprobs``). Without
    truncation that is ``log_softmax(logits / T)``. Greedy (temperature 0) takes the argmax and records
    ``log_softmax(logits)`` there (temperature 1, no truncation), as vLLM does for greedy requests. Row ``i`` draws
    from ``generators[i]``, so a row's draw does not depend on the other rows.
    """
    import torch

    logits = logits.float()
    if sampling.temperature <= 0:
        tokens = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]
    filtered = logits / sampling.temperature
    if sampling.top_k and 0 < sampling.top_k < filtered.shape[-1]:
        kth = torch.topk(filtered, sampling.top_k, dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= sampling.top_p  # keeps the first token
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    logp = torch.log_softmax(filtered, dim=-1)  # the distribution sampled from: -inf where truncated
    # Inverse-CDF sampling with one uniform draw per row from the row's own generator (torch.multinomial costs
    # ~8 ms per 49k-token row on CPU; this is a batched cumsum and a binary search). A token of probability 0
    # never advances the cumulative sum, so the first index where it exceeds u is always a kept token.
    cum = torch.softmax(filtered, dim=-1).double().cumsum(dim=-1)
    u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators]).to(cum.device)
    u = u[:, None] * cum[:, -1:]  # scaled by the row total, so rounding can never land past the last token
    tokens = torch.searchsorted(cum, u, right=True)[:, 0].clamp_(max=cum.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]
