"""Rollout workers as Ray actors (optional extra ``ray``): sampling spread over several copies of the policy.

:class:`RolloutWorker` holds its own copy of the policy (a model name, or a model and tokenizer, plus a LoRA adapter
of the trainer's shape) and runs :func:`~agentrl.algos.rollout.collector.collect` on a shard of tasks.
:func:`ray_collect` splits tasks over several workers and returns the trajectories in task order with global group
ids; after each optimizer step the trainer ships the adapter tensors (a few MB for LoRA) with
:func:`broadcast_adapter`::

    workers = [RolloutWorker.as_actor("smollm2-135m", lora=LoRAConfig()) for _ in range(4)]
    trajs = ray_collect(workers, "AgentRL/ToolUse-v0", tasks, group_size=8, config=CollectorConfig())
    ...  # update the trainer's LoRA model
    broadcast_adapter(workers, trainable_state_dict(model), version=step)

The env passed to :func:`ray_collect` may be an id or a picklable env factory such as
:class:`~agentrl.algos.integrations.ray_envs.RayEnvPool` (environment workers), which this module does not need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentrl.algos.integrations.ray_envs import ensure_ray
from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.algos.rollout.trajectory import Trajectory


class RolloutWorker:
    """Holds a policy and rolls out shards of tasks; the body of a rollout actor (see :meth:`as_actor`).

    Args:
        model: a model name for :func:`~agentrl.algos.models.load_model` (alias, hub id, local path); or a
            ``(model, tokenizer)`` pair; or a zero-argument callable returning such a pair or a ready
            :class:`~agentrl.algos.policy.Policy` (for tests and custom backends).
        lora: wrap the model in a LoRA adapter of this shape (:class:`~agentrl.algos.models.lora.LoRAConfig` of the
            trainer), so :meth:`load_adapter_state` can take the trainer's adapter tensors by name.
        dtype, device: for :func:`load_model` when ``model`` is a name.
    """

    def __init__(self, model: Any, *, lora=None, dtype: str = "auto", device: str = "cpu"):
        from agentrl.algos.policy.base import Policy
        from agentrl.algos.policy.hf import HFPolicy

        obj = model() if callable(model) and not isinstance(model, str) else model
        self.model = None
        if isinstance(obj, Policy):
            self.policy = obj
        else:
            if isinstance(obj, str):
                from agentrl.algos.models import load_model

                net, tokenizer = load_model(obj, dtype=dtype, device=device)
            else:
                net, tokenizer = obj
            if lora is not None:
                from agentrl.algos.models.lora import apply_lora

                net = apply_lora(net, lora)
            self.model = net
            self.policy = HFPolicy(net, tokenizer)
        self.version = 0

    @classmethod
    def as_actor(cls, model: Any, *, actor_options: dict[str, Any] | None = None, **kwargs):
        """Start a rollout actor (``actor_options`` go to ``.options()``, e.g. ``num_gpus=1``)."""
        ray = ensure_ray()
        return ray.remote(cls).options(**(actor_options or {})).remote(model, **kwargs)

    def load_adapter_state(self, state: dict[str, Any], version: int | None = None) -> int:
        """Load the trainer's adapter tensors (:func:`~agentrl.algos.models.lora.trainable_state_dict`), refresh the
        policy, and set the policy version recorded in trajectories (default: one more than before)."""
        if self.model is None:
            raise RuntimeError("this worker wraps a ready Policy; it has no model to load adapter weights into")
        from agentrl.algos.models.lora import load_trainable_state_dict

        load_trainable_state_dict(self.model, state)
        self.policy.update_weights(self.model)
        self.version = self.version + 1 if version is None else int(version)
        self.policy.version = self.version
        return self.version

    def get_version(self) -> int:
        return self.version

    def collect(self, env, tasks: list[dict[str, Any]], group_size: int, config: CollectorConfig | None = None,
                env_kwargs: dict[str, Any] | None = None) -> list[Trajectory]:
        """:func:`~agentrl.algos.rollout.collector.collect` on this worker's policy (group ids local to ``tasks``)."""
        return collect(env, self.policy, tasks, group_size, config, env_kwargs=env_kwargs)


def broadcast_adapter(workers: Sequence[Any], state: dict[str, Any], version: int | None = None) -> list[int]:
    """Send adapter tensors to every rollout actor (put in the object store once) and wait; returns their
    versions."""
    ray = ensure_ray()
    cpu = {k: v.detach().cpu() if hasattr(v, "detach") else v for k, v in state.items()}
    ref = ray.put(cpu)
    return ray.get([w.load_adapter_state.remote(ref, version) for w in workers])


def shard_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` ranges splitting ``n`` items over at most ``k`` shards, sizes differing by at
    most one; empty shards are left out."""
    if k < 1:
        raise ValueError(f"need at least one worker, got {k}")
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        size = base + (1 if i < extra else 0)
        if size:
            out.append((start, start + size))
        start += size
    return out


def shard_config(config: CollectorConfig, start: int) -> CollectorConfig:
    """The collector config of the shard starting at task ``start``: seed ``SeedSequence([config.seed, start])``
    (31 bits), so shards never repeat each other's draws."""
    seed = int(np.random.SeedSequence([int(config.seed), int(start)]).generate_state(1)[0] >> 1)
    return dataclasses.replace(config, seed=seed)


def ray_collect(workers: Sequence[Any], env, tasks: list[dict[str, Any]], group_size: int,
                config: CollectorConfig | None = None, *, env_kwargs: dict[str, Any] | None = None) -> list[Trajectory]:
    """Roll out ``tasks`` on rollout actors: contiguous shards, one per worker, run concurrently.

    Returns ``len(tasks) * group_size`` trajectories ordered by task then sample, ``group_id`` re-based to the
    task's index in ``tasks`` — the layout of :func:`collect`. Each shard samples with :func:`shard_config`, so a
    run is reproducible for a given number of workers (a different number of workers draws different samples).
    """
    if not workers:
        raise ValueError("ray_collect needs at least one rollout worker")
    if not tasks:
        return []
    ray = ensure_ray()
    config = config or CollectorConfig()
    futures = []
    bounds = shard_bounds(len(tasks), len(workers))
    for w, (lo, hi) in zip(workers, bounds, strict=False):
        futures.append(w.collect.remote(env, tasks[lo:hi], group_size, shard_config(config, lo), env_kwargs))
    out: list[Trajectory] = []
    for (lo, hi), shard in zip(bounds, ray.get(futures), strict=True):
        if len(shard) != (hi - lo) * group_size:
            raise RuntimeError(
                f"a rollout worker returned {len(shard)} trajectories for {hi - lo} tasks x {group_size}")
        for t in shard:
            t.group_id += lo
        out.extend(shard)
    return out


__all__ = ["RolloutWorker", "broadcast_adapter", "ray_collect", "shard_bounds", "shard_config"]
