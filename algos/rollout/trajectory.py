"""The trajectory record: what the collector produces and every trainer consumes.

One trajectory is one episode as a single token sequence::

    token_ids = [ prompt (system + user + header) | completion 1 | end of turn, tool turn, header | completion 2 | ... ]
    loss_mask = [ 0 ...                           | 1 ...        | 0 ...                          | 1 ...        ]
    logprobs  = [ 0 ...                           | rollout lp   | 0 ...                          | rollout lp   ]

(header: the assistant header that opens a turn.)

``loss_mask`` is 1 exactly on the tokens the policy sampled (including an end-of-turn token it sampled);
tool output, template markup and the prompt are 0. ``logprobs`` are the rollout log-probabilities of the
sampled tokens (0 where the mask is 0): the trainer's ``pi_old``.

Trajectories of one task share a ``group_id`` (a GRPO group); :func:`group_indices` (positions per group) and
:func:`all_equal` (a degenerate group) are the grouping every consumer uses. :func:`save_trajectories` /
:func:`load_trajectories` write and read JSONL.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    """One assistant turn and what the environment answered."""

    prompt_len: int
    """Tokens in the sequence before this turn's completion."""
    completion_len: int
    """Tokens the policy sampled in this turn."""
    completion: str
    """The sampled tokens decoded (for inspection; training uses the ids)."""
    parsed: dict[str, Any]
    """How the env read the reply (``info["parsed"]``)."""
    observation: str = ""
    """The env's answer to the reply ('' at the end of the episode)."""
    obs_role: str = "tool"
    tool_latency_s: float = 0.0
    finish_reason: str = "stop"
    """``"stop"``: the policy sampled an end-of-turn token; ``"length"``: the reply hit its token budget."""
    reward: float = 0.0
    """The reward of this turn: the env's ``step`` reward for the reply (plus the no-answer reward when the
    collector ended the episode here); the trajectory's ``reward`` is the sum over its turns."""


@dataclass
class Trajectory:
    """One episode, token-exact. See the module docstring for the layout."""

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    prompt_len: int
    """Length of the opening prompt (shared by the trajectories of a group)."""
    reward: float
    group_id: int
    task: dict[str, Any]
    turns: list[Turn] = field(default_factory=list)
    termination: str = "answered"
    """``answered | invalid | budget | truncated | error`` (``truncated``: the token budget ran out)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The env's episode metrics (``info["metrics"]``) plus ``correct`` and ``format_ok``."""
    policy_version: int = 0
    """Which policy update sampled it (for asynchronous training)."""

    def __post_init__(self):
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(f"token_ids, loss_mask and logprobs must have one length; got "
                             f"{n}, {len(self.loss_mask)}, {len(self.logprobs)}")

    @property
    def num_action_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
        return cls(**d)


def group_indices(group_ids: Iterable[Hashable]) -> list[list[int]]:
    """Positions grouped by group id: one list per distinct id, groups in order of first appearance, positions
    ascending within a group. Pass ``(t.group_id for t in trajectories)`` or a list of ids; inputs may come in
    any order (``[0, 1, 0]`` gives ``[[0, 2], [1]]``)."""
    groups: dict[Hashable, list[int]] = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(g, []).append(i)
    return list(groups.values())


def all_equal(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards are all equal (a lone sample included): a degenerate group, whose
    group-relative advantage is 0 and which yields no preference pair."""
    return max(rewards) == min(rewards)


def shared_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix common to all ``seqs`` (non-empty)."""
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def save_trajectories(trajectories: Iterable[Trajectory], path) -> None:
    """Write one trajectory per line (JSONL of :meth:`Trajectory.to_dict`)."""
    with open(path, "w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")


def load_trajectories(path) -> list[Trajectory]:
    """Read trajectories written by :func:`save_trajectories`."""
    with open(path, encoding="utf-8") as f:
        return [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]

