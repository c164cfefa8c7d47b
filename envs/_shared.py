"""Small pieces several environment modules share: handles on shared resources, process-wide defaults, the
cache directory."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedHandle:
    """Mixin for a handle on a shared resource (worker processes, an index, connections): copies are the very
    same object.

    ``gymnasium.make`` deep-copies the env spec's kwargs; without this, ``sandbox=<instance>`` or
    ``backend=<instance>`` would fail to copy (locks, processes) or be duplicated, splitting the resource's
    concurrency limit and statistics.
    """

    def __copy__(self):
        return self

    def __deepcopy__(self, memo: dict):
        return self


class ProcessDefault(Generic[T]):
    """A process-wide instance, made by ``factory`` on first use and made again once it has been closed
    (an object with a true ``closed`` attribute). Thread-safe."""

    def __init__(self, factory: Callable[[], T]):
        self._factory = factory
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._value is None or getattr(self._value, "closed", False):
                self._value = self._factory()
            return self._value


def default_cache_dir() -> Path:
    """Where agentrl keeps what it derives from installed data (search indexes, converted tokenizers):
    ``$AGENTRL_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``."""
    if os.environ.get("AGENTRL_CACHE_DIR"):
        return Path(os.environ["AGENTRL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentrl"
