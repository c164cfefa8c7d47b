"""How far an adapter moved its model from the base: the mean per-token KL(policy || base) on given episodes.

The forgetting metric of the generalisation experiment (issue 45): after training, the adapter's own greedy
replies to a fixed sample of training-split tasks are scored under the adapted model (``policy``) and under the
same model with its adapter switched off (PEFT's ``disable_adapter()``: the base). At each reply token the KL
between the two next-token distributions is exact (summed over the vocabulary, not a sampled estimate):

    KL_t = sum_v p(v | context_t) * (log p(v | context_t) - log q(v | context_t))

with ``p`` the policy and ``q`` the base. :func:`kl_to_base` returns the mean over all reply tokens (each token
weighs the same) and over episodes. A zero-initialised LoRA (B = 0) gives exactly 0.

Speed: the episodes of one env share their opening tokens (system prompt, tool descriptions: ~700 of ~800 tokens
on ToolUse-v0), so that prefix is run once per model (adapter on, adapter off) into a KV cache, and each episode
runs only its own tokens on top of it, with logits computed at the reply positions only (``logits_to_keep``).
``benchmarks/kl_speed.py`` measures it against the two full forwards per episode it replaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.algos.rollout.trajectory import shared_prefix_len


@dataclass
class KLReport:
    """The KL of one adapter to its base on a set of episodes."""

    token_mean: float
    """Mean KL over every reply token of every episode (nats per token)."""
    episode_mean: float
    """Mean over episodes of each episode's mean KL per reply token."""
    tokens: int
    episodes: int
    per_episode: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"token_mean": self.token_mean, "episode_mean": self.episode_mean, "tokens": self.tokens,
                "episodes": self.episodes, "per_episode": list(self.per_episode)}


def sequence_kl(model, token_ids: Sequence[int], loss_mask: Sequence[int]) -> tuple[float, int]:
    """``(sum of KL_t, reply tokens)`` of one token sequence whose reply tokens are ``loss_mask``'s ones;
    ``model`` is a PEFT model (its adapter on: the policy; ``disable_adapter()``: the base)."""
    import torch

    positions = [i - 1 for i, m in enumerate(loss_mask) if m and i > 0]
    if not positions:
        return 0.0, 0
    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
    index = torch.tensor(positions, dtype=torch.long, device=device)
    with torch.no_grad():
        policy = torch.log_softmax(model(input_ids=ids).logits[0, index].float(), dim=-1)
        with model.disable_adapter():
            base = torch.log_softmax(model(input_ids=ids).logits[0, index].float(), dim=-1)
        kl = (policy.exp() * (policy - base)).sum(dim=-1).clamp_min(0.0)
    return float(kl.sum()), len(positions)


class _PrefixCache:
    """One model's KV cache of the shared prefix; :meth:`logprobs` runs a sequence's remaining tokens on it."""

    def __init__(self, model, prefix: Sequence[int]):
        import torch

        from agentrl.algos.policy._kv_cache import cache_arg, new_cache, out_cache

        self.model, self.length = model, len(prefix)
        self.device = next(model.parameters()).device
        self.arg, self.cache = cache_arg(model), None
        if prefix:
            with torch.no_grad():
                ids = torch.tensor([list(prefix)], dtype=torch.long, device=self.device)
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self.arg: new_cache(reserve=256)})
            self.cache = out_cache(out)

    def logprobs(self, token_ids: Sequence[int], positions: list[int]):
        """Next-token log-probabilities (fp32) at ``positions`` (absolute, all ``>= length``) of ``token_ids``."""
        import torch

        rest = torch.tensor([list(token_ids[self.length:])], dtype=torch.long, device=self.device)
        index = torch.tensor([p - self.length for p in positions], dtype=torch.long, device=self.device)
        cached = {self.arg: self.cache, "use_cache": True} if self.cache is not None else {}
        with torch.no_grad():
            logits = self.model(input_ids=rest, logits_to_keep=index, **cached).logits[0]
        if self.cache is not None:
            self.cache.crop(-rest.shape[1])  # back to the prefix for the next sequence
        return torch.log_softmax(logits.float(), dim=-1)


def kl_to_base(model, trajectories: Iterable[Any]) -> KLReport:
    """The mean per-token KL(policy || base) of a PEFT ``model`` over the reply tokens of ``trajectories``
    (anything with ``token_ids`` and ``loss_mask``: :class:`~agentrl.algos.rollout.trajectory.Trajectory`).

    Raises:
        ValueError: ``model`` has no adapter to switch off, or no episode has a reply token.
    """
    if not hasattr(model, "disable_adapter"):
        raise ValueError(f"kl_to_base needs a PEFT model (an adapter to switch off for the base), got "
                         f"{type(model).__name__}")
    episodes = [(list(t.token_ids), [i - 1 for i, m in enumerate(t.loss_mask) if m and i > 0])
                for t in trajectories]
    episodes = [(ids, positions) for ids, positions in episodes if positions]
    # the prefix stops before the first position any episode is scored at, so each keeps a token of its own
    length = min(shared_prefix_len([ids for ids, _ in episodes]), *(positions[0] for _, positions in episodes)) \
        if episodes else 0
    prefix = episodes[0][0][:length] if episodes else []
    was_training = model.training
    model.eval()
    total, tokens, per_episode = 0.0, 0, []
    try:
        policy = _PrefixCache(model, prefix)
        with model.disable_adapter():
            base = _PrefixCache(model, prefix)
        for ids, positions in episodes:
            p = policy.logprobs(ids, positions)
            with model.disable_adapter():
                q = base.logprobs(ids, positions)
            s = float((p.exp() * (p - q)).sum(dim=-1).clamp_min(0.0).sum())
            total += s
            tokens += len(positions)
            per_episode.append(s / len(positions))
    finally:
        model.train(was_training)
    if not tokens:
        raise ValueError("kl_to_base: no episode has a reply token (loss_mask all 0)")
    return KLReport(token_mean=total / tokens, episode_mean=sum(per_episode) / len(per_episode), tokens=tokens,
                    episodes=len(per_episode), per_episode=per_episode)


__all__ = ["KLReport", "kl_to_base", "sequence_kl"]
