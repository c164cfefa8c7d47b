"""agentrl.algos — the collector, policy backends, losses and trainers (needs the ``[train]`` extra)."""

from agentrl.algos import _moved

_moved.install()
