"""Which tasks a run trains on, in which order, and with which rollout seed: pure functions of the run's seed.

Task ``k`` of a run depends only on ``(seed, k)``, so the data position saved in a checkpoint is all a resumed
run needs to continue with the very tasks (and rollout seeds) the killed run would have used next.

A run may train on a mixture of envs (:func:`parse_mixture`, ``TrainConfig.envs``): :class:`MixtureTaskSource`
picks the env of task ``k`` by weight among the components that have joined by then (``after_steps``: a
curriculum), again from ``(seed, k)`` alone, and tags the task with its env's name under
:data:`~agentrl.algos.rollout.collector.TASK_ENV_KEY` (``"env"``), which the collector, the metrics and the
evaluation reports read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agentrl.algos.rollout.collector import TASK_ENV_KEY

#: Test tasks are drawn with ``seed + TEST_SEED_OFFSET`` so they never share a stream with training.
TEST_SEED_OFFSET = 10_007
#: The env of mixture task ``k`` is drawn from ``default_rng([seed, MIXTURE_STREAM, k])``, a stream of its own.
MIXTURE_STREAM = 7_919
#: Where an env id given without a namespace is looked for (``ToolUse-v0`` -> ``AgentRL/ToolUse-v0``).
DEFAULT_NAMESPACE = "AgentRL"


class TaskSource:
    """Task ``k`` of a run as a pure function of ``(seed, k)``: the data position is just ``k``.

    With ``rows`` (a dataset), positions walk through a fresh seeded permutation each epoch. Otherwise the
    env's own sample_task draws task ``k`` with ``np.random.default_rng([seed, k])`` (for ToolUse-v0 that is
    the seeded train-split generator, restricted to ``env_kwargs["families"]`` when given).
    """

    def __init__(self, env: str, env_kwargs: dict[str, Any] | None = None, *, seed: int = 0,
                 rows: list[dict[str, Any]] | None = None):
        self.seed = seed
        self.rows = rows
        self.env = None
        if rows is None:
            from agentrl.envs import make_text_env

            self.env = make_text_env(env, env_kwargs)

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


def test_tasks(env: str, n: int, env_kwargs: dict[str, Any] | None = None, *, seed: int = 0) -> list[dict]:
    """``n`` test tasks of ``env`` (its :meth:`~agentrl.envs.core.TextEnv.test_tasks`: the test split of
    a generator, the dev split of a question set), never seen in training."""
    from agentrl.envs import make_text_env

    return make_text_env(env, env_kwargs).test_tasks(n, seed=seed + TEST_SEED_OFFSET)


# ---------------------------------------------------------------------------------------------- mixtures


@dataclass(frozen=True)
class EnvComponent:
    """One env of a mixture: its registered ``id``, sampling ``weight`` (relative), ``env_kwargs`` for
    ``gymnasium.make``, the ``name`` its tasks and metrics carry (default: the id without its namespace) and
    ``after_steps``, the training steps before it joins the mix (0: from the start; a curriculum gives later
    components more)."""

    id: str
    weight: float = 1.0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    after_steps: int = 0


_COMPONENT_KEYS = ("id", "weight", "env_kwargs", "name", "after_steps")


def _resolve_id(env_id: str) -> str:
    """``env_id`` itself when it is registered, else ``AgentRL/<env_id>`` when that is (the CLI's short form)."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401 - registers the AgentRL/* ids

    bare = env_id.split(":", 1)[1] if ":" in env_id else env_id
    if bare in gym.registry or "/" in bare or f"{DEFAULT_NAMESPACE}/{bare}" not in gym.registry:
        return env_id
    return f"{DEFAULT_NAMESPACE}/{bare}"


def _split_weight(item: str) -> tuple[str, float]:
    """``"id:2"`` -> ``("id", 2.0)``; ``"id"`` or ``"module:Id"`` -> weight 1."""
    head, sep, tail = item.rpartition(":")
    if sep:
        try:
            return head.strip(), float(tail)
        except ValueError:
            pass
    return item.strip(), 1.0


def parse_mixture(spec: Any) -> list[EnvComponent]:
    """The components of a mixture from any of its spellings (an empty list for ``None`` / empty):

    * a list of dicts ``{"id": ..., "weight": 2, "env_kwargs": {...}, "name": ..., "after_steps": 4}`` (only
      ``id`` required) — the form ``TrainConfig.envs`` stores;
    * a mapping ``{env_id: weight}``;
    * a string ``"ToolUse-v0:2,Search-v0:1"`` (``id[:weight]``, comma-separated; the CLI's ``--envs``) or a
      list of such items.

    Ids without a namespace are read as ``AgentRL/<id>`` when only that is registered.

    Raises:
        ValueError: an unknown key, a missing id, a weight that is not a positive finite number, an
            ``after_steps`` that is not an int >= 0, no component from the start, or two components with one
            name (give them ``name``s).
    """
    if not spec:
        return []
    if isinstance(spec, str):
        spec = [part for part in spec.split(",") if part.strip()]
    if isinstance(spec, Mapping):
        spec = [{"id": k, "weight": v} for k, v in spec.items()]
    if not isinstance(spec, Sequence):
        raise ValueError(f"envs: expected a list of {{id, weight, env_kwargs}}, a mapping id -> weight or "
                         f"'id:weight,...', got {type(spec).__name__}")
    out: list[EnvComponent] = []
    for i, item in enumerate(spec):
        if isinstance(item, str):
            env_id, weight = _split_weight(item)
            item = {"id": env_id, "weight": weight}
        if isinstance(item, EnvComponent):
            item = asdict(item)
        if not isinstance(item, Mapping):
            raise ValueError(f"envs[{i}]: expected a dict or 'id:weight', got {type(item).__name__}")
        unknown = sorted(set(item) - set(_COMPONENT_KEYS))
        if unknown:
            raise ValueError(f"envs[{i}]: unknown key {unknown[0]!r} (keys: {', '.join(_COMPONENT_KEYS)})")
        if not item.get("id") or not isinstance(item["id"], str):
            raise ValueError(f"envs[{i}]: 'id' (a registered env id) is required")
        try:
            weight = float(item.get("weight", 1.0))
        except (TypeError, ValueError):
            raise ValueError(f"envs[{i}].weight: expected a number, got {item.get('weight')!r}") from None
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"envs[{i}].weight: must be a positive number, got {item.get('weight')!r}")
        kwargs = item.get("env_kwargs") or {}
        if not isinstance(kwargs, Mapping):
            raise ValueError(f"envs[{i}].env_kwargs: expected a dict, got {type(kwargs).__name__}")
        env_id = _resolve_id(item["id"])
        name = str(item.get("name") or env_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1])
        if "@" in name:
            raise ValueError(f"envs[{i}].name: {name!r} must not contain '@' (metric names use it)")
        after = item.get("after_steps", 0)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"envs[{i}].after_steps: expected an int >= 0 (training steps before it joins), "
                             f"got {after!r}")
        out.append(EnvComponent(env_id, weight, dict(kwargs), name, after))
    names = [c.name for c in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"envs: two components are named {dupes[0]!r}; give each a distinct 'name'")
    if out and min(c.after_steps for c in out) > 0:
        raise ValueError("envs: every component has after_steps > 0, so the first steps have no env; give one "
                         "after_steps 0")
    return out


class MixtureTaskSource:
    """Task ``k`` of a mixture run as a pure function of ``(seed, k)``.

    The env of task ``k`` is drawn by weight from ``default_rng([seed, MIXTURE_STREAM, k])`` among the components
    that have joined by its step (``k // tasks_per_step >= after_steps``); the task itself is that env's
    :class:`TaskSource` task ``k`` (each component has its own source, seeded with ``seed``), copied with
    ``task["env"] = component.name``. Weights are respected in expectation, position by position, so a resumed
    run continues with exactly the tasks the killed one would have drawn.
    """

    def __init__(self, components: Sequence[EnvComponent], *, seed: int = 0, tasks_per_step: int = 1):
        if not components:
            raise ValueError("a mixture needs at least one env")
        self.seed = seed
        self.tasks_per_step = tasks_per_step
        self.components = list(components)
        self.sources = [TaskSource(c.id, c.env_kwargs, seed=seed) for c in self.components]
        self.weights = np.array([c.weight for c in self.components], dtype=np.float64)
        self.env = None  # no single env (SFT demonstrations need sft.data)
        self.rows = None

    def probs(self, k: int) -> np.ndarray:
        """The probability of each component for task ``k``: its weight among those that have joined by then."""
        step = k // self.tasks_per_step
        w = np.where([c.after_steps <= step for c in self.components], self.weights, 0.0)
        return w / w.sum()

    def component(self, k: int) -> int:
        """Index of the env that task ``k`` comes from."""
        if len(self.components) == 1:
            return 0
        return int(np.random.default_rng([self.seed, MIXTURE_STREAM, k]).choice(len(self.components),
                                                                                 p=self.probs(k)))

    def task(self, k: int) -> dict[str, Any]:
        i = self.component(k)
        return {**self.sources[i].task(k), TASK_ENV_KEY: self.components[i].name}

    def take(self, start: int, n: int) -> list[dict[str, Any]]:
        return [self.task(k) for k in range(start, start + n)]


def mixture_test_tasks(components: Sequence[EnvComponent], n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` test tasks of every component (:func:`test_tasks`), each tagged with its env's name: the
    input of a per-env :func:`~agentrl.algos.evaluation.evaluate.evaluate`."""
    return [{**task, TASK_ENV_KEY: c.name}
            for c in components for task in test_tasks(c.id, n, c.env_kwargs, seed=seed)]
