"""Environment workers as Ray actors (optional extra ``ray``): the ``"ray"`` rollout executor.

:class:`RemoteEnv` is a proxy with exactly the env interface the collector uses (``reset``, ``step``, ``close``,
``unwrapped.tools_in_prompt``, ``unwrapped.rewards``) whose env lives inside a Ray actor, so tool execution, code
sandboxes and search run on other cores or machines while generation stays where the model is. :class:`RayEnvPool`
keeps ``num_workers`` long-lived actors, each hosting many envs, and is itself the zero-argument factory
:func:`~agentrl.algos.rollout.collector.collect` takes (an :class:`~agentrl.algos.rollout.env_factory.EnvPool`) —
nothing in the collector changes::

    pool = RayEnvPool("AgentRL/Search-v0", {"backend": "local"}, num_workers=8)
    trajs = collect(pool, policy, tasks, group_size=8)     # every reset/step runs in one of the 8 actors
    pool.close()

The command line selects the environment executor with ``--executor local|ray`` through
:func:`~agentrl.algos.rollout.env_factory.rollout_env`, which builds a :class:`RayEnvPool` for ``"ray"``
(:data:`~agentrl.algos.rollout.env_factory.EXECUTORS`). ``ray.init()`` with no address starts a local instance or
joins the cluster named by ``RAY_ADDRESS``; every node needs agentrl-gym installed (or a ``runtime_env``). Where the
actors go is Ray's business: ``actor_options`` (``TrainConfig.env_actor_options``, e.g. ``{"num_cpus": 1,
"scheduling_strategy": "SPREAD"}`` or a custom resource) are passed to every actor's ``.options()``.

Failures stay contained: an actor that dies mid-episode (its node lost, or killed) makes ``step`` raise in the
driver, which the collector records as an ``error`` trajectory; the pool then replaces the dead actor the next time
it hands out an env, so a lost node costs its episodes, not the run. Sampling is not done here: to spread
generation over several devices or machines, serve the policy with an inference engine (``docs/engines.md``).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from typing import Any

from agentrl.algos.rollout.env_factory import make_chat_env
from agentrl.envs.capabilities import capabilities

logger = logging.getLogger(__name__)


def _ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the Ray executor needs Ray: pip install ray (in an agentrl-gym checkout: "
                          "pip install -e '.[ray]')") from e
    return ray


def ensure_ray(**init_kwargs):
    """Import Ray and call ``ray.init(**init_kwargs)`` unless it is already initialised; returns the module."""
    ray = _ray()
    if not ray.is_initialized():
        logger.info("starting Ray (address=%s)", init_kwargs.get("address", os.environ.get("RAY_ADDRESS", "local")))
        ray.init(**init_kwargs)
    return ray



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
        env = make_chat_env(self.env_id, self.env_kwargs, template_tools=self.template_tools,
                            call_format=self.call_format)
        with self._lock:
            key = next(self._keys)
            self._envs[key] = env
        u = env.unwrapped
        meta = {"tools_in_prompt": bool(getattr(u, "tools_in_prompt", False)), "rewards": getattr(u, "rewards", None),
                "capabilities": capabilities(env),
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
            :func:`~agentrl.algos.rollout.env_factory.make_chat_env`).

    ``reset``/``step`` block until the actor answers (the collector calls them from its thread pool, so many
    envs step concurrently). ``unwrapped`` is the proxy itself, exposing ``tools_in_prompt``, ``rewards``, the
    env's declared capabilities (:data:`~agentrl.envs.capabilities.CAPABILITIES`: ``grades_cut_replies``, ...) and the
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
        for name, value in meta["capabilities"].items():  # agentrl.envs.capabilities.CAPABILITIES
            setattr(self, name, value)
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
        self.max_concurrency = max_concurrency
        self.actor_options = dict(actor_options or {})
        self.replaced = 0
        if num_workers is None:
            num_workers = max(1, min(16, int(ray.cluster_resources().get("CPU", 1))))
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.template_tools = template_tools
        self.call_format = call_format
        self._ray = ray
        self.hosts = [self._start_host() for _ in range(num_workers)]
        self._next = 0
        self._lock = threading.Lock()

    def _start_host(self):
        return env_host_actor(self.env_id, self.env_kwargs, template_tools=self.template_tools,
                              call_format=self.call_format, max_concurrency=self.max_concurrency,
                              actor_options=self.actor_options)

    def __call__(self) -> RemoteEnv:
        """A new env on the next actor; an actor found dead (its node lost) is replaced by a new one first.

        Raises:
            RuntimeError: the pool is closed.
        """
        from ray.exceptions import RayActorError

        if not self.hosts:
            raise RuntimeError("this RayEnvPool is closed")
        for _ in range(2 * len(self.hosts) + 1):
            with self._lock:
                slot = self._next % len(self.hosts)
                host = self.hosts[slot]
                self._next += 1
            try:
                return RemoteEnv(self.env_id, self.env_kwargs, host=host, template_tools=self.template_tools,
                                 call_format=self.call_format)
            except RayActorError as e:
                logger.warning("env actor %d of %s is gone (%s); starting a replacement", slot, self.env_id,
                               type(e).__name__)
                with self._lock:
                    if self.hosts[slot] is host:
                        self.hosts[slot] = self._start_host()
                        self.replaced += 1
        raise RuntimeError(f"no env actor of {self.env_id} could open an env: every replacement died too "
                           "(is the Ray cluster out of nodes?)")

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


__all__ = ["EnvHost", "RayEnvPool", "RemoteEnv", "ensure_ray", "env_host_actor"]
