"""What the loss is: one file per algorithm, the registry that names them, and what they share.

``ALGORITHMS`` (a :class:`~agentrl.envs.plugins.Registry`) maps a name (``--algo``, ``TrainConfig.algo``, the
``<name>.`` config section) to its class, as ``"module:Class"`` so that listing the names imports nothing heavy.
Adding an algorithm is one file with an :class:`~agentrl.algos.objectives.base.Algorithm` subclass and one line
here (or, from another package, an entry point in the group ``agentrl.algorithms``, or :func:`register_algorithm`
before the run is configured).
"""

from __future__ import annotations

from agentrl.algos.objectives.base import Algorithm
from agentrl.envs.plugins import Registry

__all__ = ["ALGORITHMS", "algorithm_class", "algorithm_names", "register_algorithm"]

#: name -> an Algorithm subclass or its "module:Class" path; entry-point group ``agentrl.algorithms``; the
#: contract: an :class:`Algorithm` subclass that implements its abstract methods.
ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm", "agentrl.algorithms", {
    "grpo": "agentrl.algos.objectives.grpo:GRPO",
    "ppo": "agentrl.algos.objectives.ppo:PPO",
    "dpo": "agentrl.algos.objectives.dpo:DPO",
    "sft": "agentrl.algos.objectives.sft:SFT",
}, contract=Algorithm)


def register_algorithm(name: str, algorithm: str | type[Algorithm]) -> None:
    """Make ``name`` a valid ``--algo``: ``algorithm`` is an Algorithm subclass or its ``"module:Class"`` path.

    Registered at any time, it gets a ``<name>.`` section on :class:`~agentrl.algos.training.config.TrainConfig`
    (built from its config class's defaults on first use).
    """
    ALGORITHMS.register(name, algorithm)


def algorithm_names() -> list[str]:
    """Every registered algorithm name, built-ins first."""
    return ALGORITHMS.names()


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered as ``name`` (imported on first use)."""
    if name not in ALGORITHMS:
        raise ValueError(f"algo must be one of {tuple(ALGORITHMS.names())}, got {name!r}")
    return ALGORITHMS.get(name)
