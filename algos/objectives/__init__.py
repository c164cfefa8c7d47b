"""What the loss is: one file per algorithm, the registry that names them, and what they share.

``ALGORITHMS`` maps a name (``--algo``, ``TrainConfig.algo``, the ``<name>.`` config section) to its class, as
``"module:Class"`` so that listing the names imports nothing heavy. Adding an algorithm is one file with an
:class:`~agentrl.algos.objectives.base.Algorithm` subclass and one line here (or, from another package, an entry
point in the group ``agentrl.algorithms``, or :func:`register_algorithm` before the run is configured).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from agentrl.algos.objectives.base import Algorithm

__all__ = ["ALGORITHMS", "algorithm_class", "algorithm_names", "register_algorithm"]

#: name -> "module:Class" of an Algorithm subclass (or the class itself, when registered at run time)
ALGORITHMS: dict[str, str | type[Algorithm]] = {
    "grpo": "agentrl.algos.objectives.grpo:GRPO",
    "ppo": "agentrl.algos.objectives.ppo:PPO",
    "dpo": "agentrl.algos.objectives.dpo:DPO",
    "sft": "agentrl.algos.objectives.sft:SFT",
}

_plugins_loaded = False


def _load_plugins() -> None:
    """Add algorithms that installed packages declare under the entry-point group ``agentrl.algorithms``."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group="agentrl.algorithms"):
        ALGORITHMS.setdefault(ep.name, ep.value)


def register_algorithm(name: str, algorithm: str | type[Algorithm]) -> None:
    """Make ``name`` a valid ``--algo``: ``algorithm`` is an Algorithm subclass or its ``"module:Class"`` path.

    Register before :class:`~agentrl.algos.training.config.TrainConfig` is imported to get a ``<name>.`` config
    section; registered later, the algorithm runs with its config class's defaults.
    """
    if not name.isidentifier():
        raise ValueError(f"an algorithm name must be a Python identifier (it names a config section), got {name!r}")
    ALGORITHMS[name] = algorithm


def algorithm_names() -> list[str]:
    """Every registered algorithm name, built-ins first."""
    _load_plugins()
    return list(ALGORITHMS)


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered as ``name`` (imported on first use)."""
    _load_plugins()
    if name not in ALGORITHMS:
        raise ValueError(f"algo must be one of {tuple(ALGORITHMS)}, got {name!r}")
    entry = ALGORITHMS[name]
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        ALGORITHMS[name] = entry
    return entry
