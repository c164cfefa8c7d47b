"""Scale out with Ray: environment workers and rollout workers as Ray actors (optional extra ``ray``).

Two independent pieces, usable alone or together:

* **Environment workers.** :class:`RemoteEnv` is a proxy with exactly the env interface the collector uses
  (``reset``, ``step``, ``close``, ``unwrapped.tools_in_prompt``, ``unwrapped.rewards``) whose env lives inside a
  Ray actor, so tool execution, code sandboxes and search run on other cores or machines while generation stays
  where the model is. :class:`RayEnvPool` keeps ``num_workers`` long-lived actors, each hosting many envs, and is
  itself the zero-argument factory :func:`~agentrl.algos.rollout.collector.collect` takes — nothing in the
  collector changes::

      pool = RayEnvPool("AgentRL/Search-v0", {"backend": "local"}, num_workers=8)
      trajs = collect(pool, policy, tasks, group_size=8)     # every reset/step runs in one of the 8 actors
      pool.close()

* **Rollout workers.** :class:`RolloutWorker` holds its own copy of the policy (a model name, or a model and
  tokenizer, plus a LoRA adapter of the trainer's shape) and runs :func:`collect` on a shard of tasks.
  :func:`ray_collect` splits tasks over several workers and returns the trajectories in task order with global
  group ids; after each optimizer step the trainer ships the adapter tensors (a few MB for LoRA) with
  :func:`broadcast_adapter`::

      workers = [RolloutWorker.as_actor("smollm2-135m", lora=LoRAConfig()) for _ in range(4)]
      trajs = ray_collect(workers, "AgentRL/ToolUse-v0", tasks, group_size=8, config=CollectorConfig())
      ...  # update the trainer's LoRA model
      broadcast_adapter(workers, trainable_state_dict(model), version=step)

The command line selects the environment executor with ``--executor local|ray`` through
:func:`~agentrl.algos.rollout.envs.rollout_env`, which builds a :class:`RayEnvPool` for ``"ray"``. ``ray.init()``
with no address starts a local instance or joins the cluster named by ``RAY_ADDRESS``; every node needs agentrl-gym
installed (or a ``runtime_env``). Failures stay contained: an actor
that dies mid-episode makes ``step`` raise in the driver, which the collector records as an ``error`` trajectory
(a failure while envs are opened or reset raises).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.algos.rollout.envs import EXECUTORS as ROLLOUT_EXECUTORS
from agentrl.algos.rollout.envs import make_text_env
from agentrl.algos.rollout.trajectory import Trajectory

logger = logging.getLogger(__name__)

#: Executor names (``--executor``); :func:`~agentrl.algos.rollout.envs.rollout_env` maps each to its env factory.
EXECUTORS = tuple(ROLLOUT_EXECUTORS)


def _ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the Ray executor needs Ray: pip install 'agentrl-gym[ray]' (or pip install ray)") from e
    return ray


def ensure_ray(**init_kwargs):
    """Import Ray and call ``ray.init(**init_kwargs)`` unless it is already initialised; returns the module."""
    ray = _ray()
    if not ray.is_initialized():
        logger.info("starting Ray (address=%s)", init_kwargs.get("address", os.environ.get("RAY_ADDRESS", "local")))
        ray.init(**init_kwargs)
    return ray


# ============================================================================================ environment workers


class EnvHost:
    """The body of an environment actor: hosts any number of envs of one id, addressed by integer keys.

    Envs are independent objects, so the actor may run with ``max_concurrency > 1`` (threads): steps of
    different envs then overlap (I/O-bound tools such as search), steps of one env never do (the collector waits
    for each).
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, template_tools: bool = False,
                 call_format: str | None = None):
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.template_tools = template_tools
        self.call_format = call_format
        self._envs: dict[int, Any] = {}
        self._keys = itertools.count()
        self._lock = threading.Lock()

    def open(self) -> tuple[int, dict[str, Any]]:
        """Create an env; returns its key and what the proxy exposes locally (``tools_in_prompt``, ``rewards``,
        spaces)."""
        env = make_text_env(self.env_id, self.env_kwargs, template_tools=self.template_tools,
                            call_format=self.call_format)
        with self._lock:
            key = next(self._keys)
            self._envs[key] = env
        u = env.unwrapped
        meta = {"tools_in_prompt": bool(getattr(u, "tools_in_prompt", False)), "rewards": getattr(u, "rewards", None),
                "observation_space": env.observation_space, "action_space": env.action_space,
                "spec_id": env.spec.id if env.spec is not None else self.env_id}
        return key, meta

    def _env(self, key: int):
        try:
            return self._envs[key]
        except KeyError:
            raise KeyError(f"env {key} is not open on this {self.env_id} worker (closed, or the actor restarted)") \
                from None

    def reset(self, key: int, seed: int | None = None, options: dict[str, Any] | None = None):
        return self._env(key).reset(seed=seed, options=options)

    def step(self, key: int, action: str):
        return self._env(key).step(action)

    def call(self, key: int, method: str, args: tuple = (), kwargs: dict[str, Any] | None = None):
        """Call any method of the env (``unwrapped``), e.g. ``demo(task)`` or ``demo_actions(task)``."""
        return getattr(self._env(key).unwrapped, method)(*args, **(kwargs or {}))

    def close(self, key: int) -> None:
        with self._lock:
            env = self._envs.pop(key, None)
        if env is not None:
            env.close()

    def num_envs(self) -> int:
        return len(self._envs)


def env_host_actor(env_id: str, env_kwargs: dict[str, Any] | None = None, *, template_tools: bool = False,
                   call_format: str | None = None, max_concurrency: int = 8,
                   actor_options: dict[str, Any] | None = None):
    """Start an :class:`EnvHost` actor (``actor_options`` go to ``.options()``, e.g. ``num_cpus``, ``resources``)."""
    ray = ensure_ray()
    options = {"max_concurrency": max_concurrency, **(actor_options or {})}
    return ray.remote(EnvHost).options(**options).remote(env_id, env_kwargs, template_tools, call_format)


class RemoteEnv:
    """A text env running in a Ray actor, seen through the interface the collector uses.

    Args:
        env_id: the env id (registered by ``agentrl.envs``).
        env_kwargs: keyword arguments for ``gymnasium.make`` (made inside the actor).
        host: an :func:`env_host_actor` handle to place the env on; default: a new actor owned by this proxy
            (killed by :meth:`close`).
        template_tools, call_format: build the env with ``tools_in_prompt=False`` / this tool-call format (see
            :func:`~agentrl.algos.rollout.envs.make_text_env`).

    ``reset``/``step`` block until the actor answers (the collector calls them from its thread pool, so many
    envs step concurrently). ``unwrapped`` is the proxy itself, exposing ``tools_in_prompt``, ``rewards`` and the
    spaces fetched when the env was opened; :meth:`call` reaches any other env method.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *, host=None,
                 template_tools: bool = False, call_format: str | None = None):
        self._ray = ensure_ray()
        self._owned = host is None
        self._host = host if host is not None else env_host_actor(env_id, env_kwargs, template_tools=template_tools,
                                                                  call_format=call_format)
        self._key, meta = self._ray.get(self._host.open.remote())
        self.env_id = env_id
        self.tools_in_prompt: bool = meta["tools_in_prompt"]
        self.rewards = meta["rewards"]
        self.observation_space = meta["observation_space"]
        self.action_space = meta["action_space"]
        self._closed = False

    @property
    def unwrapped(self) -> RemoteEnv:
        return self

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self._ray.get(self._host.reset.remote(self._key, seed, options))

    def step(self, action: str):
        return self._ray.get(self._host.step.remote(self._key, action))

    def call(self, method: str, *args, **kwargs):
        """``env.unwrapped.<method>(*args, **kwargs)`` inside the actor."""
        return self._ray.get(self._host.call.remote(self._key, method, args, kwargs))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._ray.get(self._host.close.remote(self._key))
        finally:
            if self._owned:
                self._ray.kill(self._host)

    def __repr__(self) -> str:
        return f"RemoteEnv({self.env_id!r}, key={self._key})"


class RayEnvPool:
    """``num_workers`` env-host actors; calling the pool returns a new :class:`RemoteEnv` on the next actor.

    Pass the pool as ``collect``'s env (a zero-argument factory). The actors live until :meth:`close` (also a
    context manager), so a training run pays their start-up once; each ``collect`` opens its envs on them
    round-robin and closes them when it ends.

    Args:
        env_id, env_kwargs, template_tools, call_format: as for :class:`RemoteEnv`.
        num_workers: actors to start (default: the cluster's CPU count, at most 16).
        max_concurrency: threads per actor (concurrent steps of different envs on one actor).
        actor_options: ``.options()`` for each actor (``num_cpus``, ``resources``, ``scheduling_strategy``, ...).
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *, num_workers: int | None = None,
                 template_tools: bool = False, call_format: str | None = None, max_concurrency: int = 8,
                 actor_options: dict[str, Any] | None = None):
        ray = ensure_ray()
        if num_workers is None:
            num_workers = max(1, min(16, int(ray.cluster_resources().get("CPU", 1))))
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.template_tools = template_tools
        self.call_format = call_format
        self._ray = ray
        self.hosts = [env_host_actor(env_id, env_kwargs, template_tools=template_tools, call_format=call_format,
                                     max_concurrency=max_concurrency, actor_options=actor_options)
                      for _ in range(num_workers)]
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self) -> RemoteEnv:
        if not self.hosts:
            raise RuntimeError("this RayEnvPool is closed")
        with self._lock:
            host = self.hosts[self._next % len(self.hosts)]
            self._next += 1
        return RemoteEnv(self.env_id, self.env_kwargs, host=host, template_tools=self.template_tools,
                         call_format=self.call_format)

    def __getstate__(self):  # picklable (e.g. handed to a rollout actor): actor handles travel, the lock does not
        state = dict(self.__dict__)
        del state["_lock"], state["_ray"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._ray = _ray()

    def close(self) -> None:
        for h in self.hosts:
            self._ray.kill(h)
        self.hosts = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ============================================================================================ rollout workers


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
        sampler, and set the policy version recorded in trajectories (default: one more than before)."""
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
    task's index in ``tasks`` — the layout of :func:`collect`. Each shard samples with :func:`shard_config`, so a run is reproducible for a given number of workers (a
    different number of workers draws different samples).
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
            raise RuntimeError(f"a rollout worker returned {len(shard)} trajectories for {hi - lo} tasks x {group_size}")
        for t in shard:
            t.group_id += lo
        out.extend(shard)
    return out


__all__ = ["EXECUTORS", "EnvHost", "RayEnvPool", "RemoteEnv", "RolloutWorker", "broadcast_adapter",
           "ensure_ray", "env_host_actor", "ray_collect", "shard_bounds", "shard_config"]
