"""How far an adapter moved its model from the base: the mean per-token KL(policy || base) on given episodes.

The forgetting metric of the generalisation experiment (issue 45): after training, the adapter's own greedy
replies to a fixed sample of training-split tasks are scored under the adapted model (``policy``) and under the
same model with its adapter switched off (PEFT's ``disable_adapter()``: the base). At each reply token the KL
between the two next-token distributions is exact (summed over the vocabulary, not a sampled estimate):

    KL_t = sum_v p(v | context_t) * (log p(v | context_t) - log q(v | context_t))

with ``p`` the policy and ``q`` the base. :func:`kl_to_base` returns the mean over all reply tokens (each token
weighs the same) and over episodes. A zero-initialised LoRA (B = 0) gives exactly 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


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


def kl_to_base(model, trajectories: Iterable[Any]) -> KLReport:
    """The mean per-token KL(policy || base) of a PEFT ``model`` over the reply tokens of ``trajectories``
    (anything with ``token_ids`` and ``loss_mask``: :class:`~agentrl.algos.rollout.trajectory.Trajectory`).

    Raises:
        ValueError: ``model`` has no adapter to switch off, or no episode has a reply token.
    """
    if not hasattr(model, "disable_adapter"):
        raise ValueError(f"kl_to_base needs a PEFT model (an adapter to switch off for the base), got "
                         f"{type(model).__name__}")
    was_training = model.training
    model.eval()
    total, tokens, per_episode = 0.0, 0, []
    try:
        for t in trajectories:
            s, n = sequence_kl(model, t.token_ids, t.loss_mask)
            if n:
                total += s
                tokens += n
                per_episode.append(s / n)
    finally:
        model.train(was_training)
    if not tokens:
        raise ValueError("kl_to_base: no episode has a reply token (loss_mask all 0)")
    return KLReport(token_mean=total / tokens, episode_mean=sum(per_episode) / len(per_episode), tokens=tokens,
                    episodes=len(per_episode), per_episode=per_episode)


__all__ = ["KLReport", "kl_to_base", "sequence_kl"]
