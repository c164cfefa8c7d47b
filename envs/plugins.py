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

Each registry knows its **contract** (``contract=``): a base class or ABC, a ``typing.runtime_checkable``
Protocol, or a function that says what an entry lacks (:func:`contract_violation` reads all three). An entry is
checked when it is loaded — at :meth:`Registry.get`, so a lazy ``"module:Attribute"`` entry or an entry point is
checked on first use, and an object given to ``register`` at once — and one that breaks the contract is refused
with a one-line :class:`ContractError` (a ``TypeError``) naming the entry, where it came from
(:meth:`Registry.origin`) and what it lacks. ``docs/architecture.md`` has the table of every registry, its group
and its contract.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: What a registry's entries must honour: a class (ABC, base class or runtime-checkable Protocol), or a function
#: ``check(entry) -> str | None`` that returns what the entry lacks (``None``: nothing).
Contract = type | Callable[[Any], str | None]


class ContractError(TypeError):
    """A registry entry breaks its registry's contract (the message names the entry, its origin and what it
    lacks). A ``TypeError``, so code that caught those before still does; the CLIs print it as one line."""


__all__ = ["Contract", "ContractError", "Registry", "class_or_factory", "contract_violation", "env_kwargs_problem",
           "load_object", "unknown_keywords"]


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


def _protocol_members(protocol: type) -> tuple[list[str], list[str]]:
    """``(methods and properties, data attributes)`` a Protocol declares (its own bodies, not Protocol's)."""
    methods: list[str] = []
    data: list[str] = []
    for base in reversed(protocol.__mro__):
        if base is object or not getattr(base, "_is_protocol", False) or base.__module__ == "typing":
            continue
        for member, value in vars(base).items():
            if (not member.startswith("_") or member == "__call__") and member not in methods:
                if callable(value) or isinstance(value, (property, classmethod, staticmethod)):
                    methods.append(member)
        data += [a for a in vars(base).get("__annotations__", {}) if not a.startswith("_") and a not in data]
    return methods, [d for d in data if d not in methods]


def _defines(cls: type, member: str) -> bool:
    """``cls`` or a base other than ``object`` defines ``member`` (every class has ``object.__call__``'s kin)."""
    return any(member in vars(k) for k in cls.__mro__ if k is not object)


def contract_violation(entry: Any, contract: Contract | None) -> str | None:
    """What ``entry`` lacks to honour ``contract``, in a few words, or ``None`` when it honours it.

    * a ``runtime_checkable`` Protocol: a class must define each method and property the protocol declares (its
      data attributes are set per instance, so a class is not asked for them); any other entry must have them all;
    * any other class (an ABC, a base class): a class must subclass it and leave no abstract method unimplemented;
      any other entry must be an instance of it;
    * a function: its answer, ``contract(entry)``;
    * ``None``: anything goes.
    """
    if contract is None:
        return None
    if not isinstance(contract, type):
        return contract(entry)
    name = contract.__name__
    if getattr(contract, "_is_protocol", False):
        methods, data = _protocol_members(contract)
        if isinstance(entry, type):
            missing = [m for m in methods if not _defines(entry, m)]
        else:
            missing = [m for m in [*methods, *data] if not hasattr(entry, m)]
        return f"lacks {', '.join(missing)} of the {name} protocol" if missing else None
    if isinstance(entry, type):
        if not issubclass(entry, contract):
            return f"{entry.__name__} is not a {name} subclass"
        abstract = sorted(getattr(entry, "__abstractmethods__", ()))
        return f"{entry.__name__} leaves {', '.join(abstract)} of {name} unimplemented" if abstract else None
    if isinstance(entry, contract):
        return None
    return f"a {type(entry).__name__}, neither a subclass nor an instance of {name}"


def class_or_factory(contract: type) -> Callable[[Any], str | None]:
    """The contract of a registry whose entries are called to make something (``sandbox=``, ``report_to=``): a
    class must honour ``contract`` (:func:`contract_violation`); any other callable is a factory, and what it
    makes is checked where it is made."""
    def check(entry: Any) -> str | None:
        if isinstance(entry, type):
            return contract_violation(entry, contract)
        return None if callable(entry) else f"a {type(entry).__name__}: neither a class nor a factory function"

    check.__qualname__ = f"class_or_factory({contract.__name__})"
    return check


class Registry(Generic[T]):
    """Names of one extension point -> what each stands for (an object, or its import path, loaded on first use).

    Args:
        kind: what an entry is, for error messages (``"algorithm"``, ``"search backend"``).
        group: the entry-point group third-party packages declare entries under (``"agentrl.algorithms"``).
        builtins: the entries shipped with agentrl, name -> object or ``"module:Attribute"``.
        contract: what every entry must honour (:data:`Contract`; :func:`contract_violation` says how each kind
            is read); ``None``: anything goes.
    """

    def __init__(self, kind: str, group: str, builtins: dict[str, T | str] | None = None, *,
                 contract: Contract | None = None):
        self.kind, self.group, self.contract = kind, group, contract
        self._entries: dict[str, T | str] = dict(builtins or {})
        self._origins: dict[str, str] = {name: f"built in: {_path(e)}" for name, e in self._entries.items()}
        self._checked: set[str] = set()
        self._plugins_read = False
        self._shared: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo) -> Registry[T]:
        """A copy with the same entries and no shared instances (tests register on a copy and drop it)."""
        copy = Registry(self.kind, self.group, dict(self._entries), contract=self.contract)
        copy._origins, copy._checked = dict(self._origins), set(self._checked)
        copy._plugins_read = self._plugins_read
        return copy

    def register(self, name: str, entry: T | str) -> None:
        """Make ``name`` stand for ``entry`` (an object, or its ``"module:Attribute"`` import path). An object is
        checked against the contract at once, an import path when it is first loaded.

        Raises:
            ValueError: ``name`` is not a Python identifier.
            ContractError: ``entry`` (an object) breaks the registry's contract.
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a {self.kind} name must be a Python identifier, got {name!r}")
        origin = f"registered at run time: {_path(entry)}"
        if not isinstance(entry, str):
            self._check(name, entry, origin)
        self._entries[name], self._origins[name] = entry, origin
        self._checked.discard(name)

    def _read_plugins(self) -> None:
        if not self._plugins_read:
            self._plugins_read = True
            for ep in entry_points(group=self.group):
                if ep.name not in self._entries:
                    self._entries[ep.name] = ep.value
                    package = f"the package {ep.dist.name}" if ep.dist else "an installed package"
                    self._origins[ep.name] = f"entry point of {package} in {self.group}: {ep.value}"

    def origin(self, name: str) -> str:
        """Where ``name``'s entry came from, for messages: ``"built in: module:Attr"``, ``"registered at run
        time: module:Attr"`` or ``"entry point of the package P in GROUP: module:Attr"``."""
        self._read_plugins()
        return self._origins.get(name, "unknown")

    def _check(self, name: str, entry: Any, origin: str) -> None:
        problem = contract_violation(entry, self.contract)
        if problem:
            raise ContractError(f"{self.kind} {name!r} ({origin}) breaks the {self.kind} contract: {problem}")

    def names(self) -> list[str]:
        """Every registered name: built-ins first, then run-time registrations and entry points."""
        self._read_plugins()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """What ``name`` stands for (imported on first use and kept), checked against the contract once.

        Raises:
            ValueError: ``name`` is not registered (the message lists the names that are), or its import path
                names nothing importable.
            ContractError: the entry breaks the registry's contract (the message names the entry, its origin and
                what it lacks).
        """
        self._read_plugins()
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {self.names()} (or register yours: "
                             f"an entry point in the group {self.group!r})")
        entry = self._entries[name]
        if isinstance(entry, str):
            try:
                entry = load_object(entry)
            except ValueError as e:
                raise ValueError(f"{self.kind} {name!r} ({self._origins[name]}): {e}") from None
            self._entries[name] = entry
        if name not in self._checked:
            self._check(name, entry, self._origins[name])
            self._checked.add(name)
        return entry

    def make(self, name: str, *, shared: bool = False, **config: Any) -> Any:
        """``get(name)(**config)``. With ``shared=True`` one instance per (name, config) serves the whole process
        (made again once its ``closed`` attribute is true), so a backend's concurrency limit, rate limit and stats
        hold across every env that uses it."""
        factory: Any = self.get(name)
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


def _path(entry: Any) -> str:
    """An entry as ``"module:Attribute"`` (an import path as it is; ``None`` as ``None``)."""
    if isinstance(entry, str) or entry is None:
        return str(entry)
    qualname = getattr(entry, "__qualname__", None) or type(entry).__qualname__
    module = getattr(entry, "__module__", None) or type(entry).__module__
    return f"{module}:{qualname}"


def unknown_keywords(target: Callable[..., Any], kwargs: Mapping[str, Any], *, also: Iterable[str] = ()) -> str | None:
    """What is wrong with calling ``target`` (a class or a function) with ``kwargs``, read from its signature: one
    line naming only the keys it does not take, each with the nearest one it does (``did you mean``), then every
    key it accepts (with ``also``, keys a caller in between takes). None when all are accepted, or when the
    signature takes ``**kwargs`` (then only the call can tell)."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    accepted = sorted({p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
                      | set(also))
    bad = [key for key in kwargs if key not in accepted]
    if not bad:
        return None
    named = []
    for key in bad:
        close = difflib.get_close_matches(key, accepted, n=1, cutoff=0.6)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"unknown keyword{'s' * (len(bad) > 1)} {', '.join(named)}; it accepts {', '.join(accepted)}"


def env_kwargs_problem(env_id: str, kwargs: Mapping[str, Any]) -> str | None:
    """:func:`unknown_keywords` of ``gymnasium.make(env_id, **kwargs)``: the registered env's class or factory
    (``package.module:Id`` read as ``Id``), plus ``make``'s own keywords (``max_episode_steps``, ...). None for an
    unknown id (``make`` says so itself) or an entry point that takes ``**kwargs``."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    name = env_id.partition(":")[2] if ":" in env_id else env_id
    spec = gym.registry.get(name)
    if spec is None or spec.entry_point is None:
        return None
    entry = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    make_keys = [k for k in inspect.signature(gym.make).parameters if k not in ("id", "kwargs")]
    return unknown_keywords(entry, kwargs, also=make_keys)
