"""Which tasks a run trains on, in which order, and with which rollout seed: pure functions of the run's seed.

Task ``k`` of a run depends only on ``(seed, k)``, so the data position saved in a checkpoint is all a resumed
run needs to continue with the very tasks (and rollout seeds) the killed run would have used next.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Held-out tasks are drawn with ``seed + HELDOUT_SEED_OFFSET`` so they never share a stream with training.
HELDOUT_SEED_OFFSET = 10_007


def make_env(env: str, env_kwargs: dict[str, Any] | None = None):
    """The bare :class:`~agentrl.envs.core.TextEnv` behind a registered id (no Gymnasium wrappers)."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401 - registers the AgentRL/* ids

    return gym.make(env, **(env_kwargs or {})).unwrapped


class TaskSource:
    """Task ``k`` of a run as a pure function of ``(seed, k)``: the data position is just ``k``.

    With ``rows`` (a dataset), positions walk through a fresh seeded permutation each epoch. Otherwise the
    env's own sampler draws task ``k`` with ``np.random.default_rng([seed, k])`` (for ToolUse-v0 that is the
    seeded train-split generator, restricted to ``env_kwargs["families"]`` when given).
    """

    def __init__(self, env: str, env_kwargs: dict[str, Any] | None = None, *, seed: int = 0,
                 rows: list[dict[str, Any]] | None = None):
        self.seed = seed
        self.rows = rows
        self.env = None
        if rows is None:
            self.env = make_env(env, env_kwargs)
            if not hasattr(self.env, "sample_task"):
                raise TypeError(f"{env} has no sample_task(rng); pass a task dataset (tasks=file.jsonl)")

    def task(self, k: int) -> dict[str, Any]:
        if self.rows is not None:
            n = len(self.rows)
            perm = np.random.default_rng([self.seed, k // n]).permutation(n)
            return self.rows[int(perm[k % n])]
        return self.env.sample_task(np.random.default_rng([self.seed, k]))

    def take(self, start: int, n: int) -> list[dict[str, Any]]:
        return [self.task(k) for k in range(start, start + n)]


def rollout_seed(seed: int, collector_seed: int, batch: int) -> int:
    """The sampling seed of rollout batch number ``batch`` (data position // tasks per step) of a run."""
    return int(np.random.SeedSequence([seed, collector_seed, batch]).generate_state(1)[0] % (2**31))


def heldout_tasks(env: str, n: int, env_kwargs: dict[str, Any] | None = None, *, seed: int = 0) -> list[dict]:
    """``n`` held-out tasks of ``env`` (its :meth:`~agentrl.envs.core.TextEnv.heldout_tasks`: the test split of
    a generator, the dev split of a question set), never seen in training."""
    return make_env(env, env_kwargs).heldout_tasks(n, seed=seed + HELDOUT_SEED_OFFSET)
