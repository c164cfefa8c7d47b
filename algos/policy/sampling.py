"""The sampling kernel: one token per row of logits, with its log-probability, from the row's own generator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.algos.policy.base import SamplingParams


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
