"""One registry style for every extension point: a name, what it stands for, and how a third party adds one.

Each extension point of agentrl (environments, search backends, sandboxes, algorithms, policy backends, rollout
executors, trackers) keeps a :class:`Registry`. An entry maps a **name** — what users type in ``--algo``,
``report_to=``, ``backend=``, ``sandbox=`` and the like — to either the object itself or its import path
``"package.module:Attribute"``, so listing the names imports nothing heavy. A third party adds an entry in one
of two ways:

* at run time: ``registry.register("mine", "my_package.module:Mine")`` (or the object itself) — each registry's
  module exports a ``register_*`` function that does exactly this;
* without any code of ours running: an entry point in the registry's group in the package's ``pyproject.toml``
  (``[project.entry-points."agentrl.algorithms"] mine = "my_package.module:Mine"``), read the first time a
  name is looked up.

Built-in entries come first; a registered name replaces a built-in of the same name (entry points never do).
``docs/architecture.md`` has the table of every registry, its group and its contract.
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "load_object"]


def load_object(path: str) -> Any:
    """The object an import path ``"package.module:Attribute"`` (or ``"package.module.Attribute"``) names.

    Raises:
        ValueError: ``path`` names no importable attribute (the message says which part failed).
    """
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError(f"{path!r} is not an import path like 'package.module:Attribute'")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"cannot import {module!r} (from {path!r}): {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{module!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


class Registry(Generic[T]):
    """Names of one extension point -> what each stands for (an object, or its import path, loaded on first use).

    Args:
        kind: what an entry is, for error messages (``"algorithm"``, ``"search backend"``).
        group: the entry-point group third-party packages declare entries under (``"agentrl.algorithms"``).
        builtins: the entries shipped with agentrl, name -> object or ``"module:Attribute"``.
    """

    def __init__(self, kind: str, group: str, builtins: dict[str, T | str] | None = None):
        self.kind, self.group = kind, group
        self._entries: dict[str, T | str] = dict(builtins or {})
        self._plugins_read = False
        self._shared: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo) -> Registry[T]:
        """A copy with the same entries and no shared instances (tests register on a copy and drop it)."""
        copy = Registry(self.kind, self.group, dict(self._entries))
        copy._plugins_read = self._plugins_read
        return copy

    def register(self, name: str, entry: T | str) -> None:
        """Make ``name`` stand for ``entry`` (an object, or its ``"module:Attribute"`` import path)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a {self.kind} name must be a Python identifier, got {name!r}")
        self._entries[name] = entry

    def _read_plugins(self) -> None:
        if not self._plugins_read:
            self._plugins_read = True
            for ep in entry_points(group=self.group):
                self._entries.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        """Every registered name: built-ins first, then run-time registrations and entry points."""
        self._read_plugins()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """What ``name`` stands for (imported on first use and kept).

        Raises:
            ValueError: ``name`` is not registered; the message lists the names that are.
        """
        self._read_plugins()
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {self.names()} (or register yours: "
                             f"an entry point in the group {self.group!r})")
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = load_object(entry)
        return entry

    def make(self, name: str, *, shared: bool = False, **config: Any) -> Any:
        """``get(name)(**config)``. With ``shared=True`` one instance per (name, config) serves the whole process
        (made again once its ``closed`` attribute is true), so a backend's concurrency limit, rate limit and stats
        hold across every env that uses it."""
        factory = self.get(name)
        if not shared:
            return factory(**config)
        key = (name, json.dumps(config, sort_keys=True, default=str))
        with self._lock:
            inst = self._shared.get(key)
            if inst is None or getattr(inst, "closed", False):
                inst = self._shared[key] = factory(**config)
        return inst

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, group={self.group!r}, names={self.names()})"
