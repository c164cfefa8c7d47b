"""Where a rollout's envs come from: resolve an env id, make a text env, choose the executor that hosts them.

* :func:`env_spec` / :func:`env_class` — the registration and the class behind an env id, without making an env;
  :func:`check_env_id` / :func:`preflight_env` — a one-line error for a wrong id (naming the closest) or an
  env that cannot come up, before any model loads.
* :func:`make_chat_env` — ``gymnasium.make`` plus the one ``tools_in_prompt`` rule: when the chat template
  renders the tool schemas itself, the env must not list them again in its prompt (see
  :mod:`agentrl.algos.rollout.chat`). The collector applies it to env ids; Ray env actors apply it to the envs
  they host.
* :func:`rollout_env` — what to pass as :func:`~agentrl.algos.rollout.collector.collect`'s ``env`` for an
  executor: the id itself (``"local"``: the collector makes the envs in-process) or a pool of remote envs
  (``"ray"``). Executors are named in :data:`EXECUTORS` by import path, so this module never imports Ray; add one
  with :func:`register_executor` or an entry point in the group ``agentrl.executors`` (an :class:`EnvPool` class).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from agentrl.envs.plugins import Registry, contract_violation

logger = logging.getLogger(__name__)



@runtime_checkable
class EnvPool(Protocol):
    """The contract of an executor's env pool (an entry of :data:`EXECUTORS`): built by :func:`rollout_env`, it is a
    zero-argument env factory the collector calls for each episode, closed when training ends."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None, *, num_workers: int | None,
                 template_tools: bool, call_format: str | None, actor_options: dict[str, Any] | None) -> None:
        """``num_workers`` hosts of ``env_id`` envs made with ``env_kwargs``,
        ``tools_in_prompt = not template_tools`` and ``call_format`` (as :func:`make_chat_env` does);
        ``actor_options`` go to the hosts."""

    def __call__(self) -> Any:
        """A new env (a ``TextEnv``-like object; the collector resets it)."""

    def close(self) -> None:
        """Release the hosts."""


def _executor_contract(entry: Any) -> str | None:
    """An executor is ``None`` (envs made in-process) or a class with the :class:`EnvPool` methods."""
    if entry is None:
        return None
    if not isinstance(entry, type):
        return f"a {type(entry).__name__}, not an EnvPool class (or None)"
    return contract_violation(entry, EnvPool)


#: executor name -> an :class:`EnvPool` class or its ``"module:Class"`` path (``None``: envs made in-process by
#: id); entry-point group ``agentrl.executors``; the contract: ``None`` or a class with the
#: :class:`EnvPool` methods.
EXECUTORS: Registry[type[EnvPool] | None] = Registry("executor", "agentrl.executors", {
    "local": None,
    "ray": "agentrl.algos.integrations.ray_envs:RayEnvPool",
}, contract=_executor_contract)


def register_executor(name: str, pool: str | type[EnvPool]) -> None:
    """Make ``name`` a valid ``--executor``: ``pool`` is an :class:`EnvPool` class or its ``"module:Class"`` path."""
    EXECUTORS.register(name, pool)


def env_spec(env: str):
    """The ``gymnasium`` registration (``EnvSpec``) of ``env`` (``"module:Id"`` is read as ``"Id"``).

    Raises:
        gymnasium.error.Error: no env is registered under that id.
    """
    import gymnasium as gym

    from agentrl.envs import register_env_ref

    register_env_ref(env)
    return gym.spec(env.split(":", 1)[1] if ":" in env else env)


def registered_env_ids() -> list[str]:
    """Every env id gymnasium knows once :mod:`agentrl.envs` is imported (the ``AgentRL/*`` ids, those added with
    ``register_env`` or an entry point, and gymnasium's own)."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401 - registers the AgentRL/* ids

    return sorted(gym.registry)


def check_env_id(env: str) -> None:
    """Raise a one-line :class:`ValueError` unless ``env`` (``"module:Id"`` read as ``"Id"``) is a registered id
    or a ``"module:factory"`` (registered by :func:`~agentrl.envs.register_env_ref`); it names the closest
    registered id and the ``AgentRL/*`` ones (``agentrl-env list``).

    Raises:
        ValueError: no env is registered under that id.
    """
    import difflib

    from agentrl.envs import register_env_ref

    register_env_ref(env)
    ids = registered_env_ids()
    name = env.split(":", 1)[1] if ":" in env else env
    if name in ids:
        return
    if ":" in env:  # "module:Id": the module registers Id when imported (gymnasium.make imports it the same way)
        module = env.split(":", 1)[0]
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"environment {env!r}: cannot import module {module!r} ({e}); the forms are "
                             "'package.module:Env-v0' (a module on sys.path that calls register_env on import) and "
                             "'package.module:factory' (an env class or a function returning an env)") from None
        if name not in registered_env_ids():
            raise ValueError(f"environment {env!r}: module {module!r} has no env class or factory {name!r} and "
                             f"registers no env {name!r} (agentrl.envs.register_env({name!r}, ...) on import; "
                             "docs/integration.md)")
        return
    ours = [i for i in ids if i.startswith("AgentRL/")]
    close = difflib.get_close_matches(name, ids, n=1, cutoff=0.6)
    close = close or difflib.get_close_matches(name.lower(), [i.lower() for i in ours], n=1, cutoff=0.4)
    hint = f"did you mean {next(i for i in ids if i.lower() == close[0].lower())!r}? " if close else ""
    raise ValueError(f"unknown environment {env!r}; {hint}registered: {', '.join(ours)} (agentrl-env list; "
                     "a new env needs register_env, docs/integration.md)")


def preflight_env(env: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """The CLI's check before it loads a model (not Gymnasium's ``check_env`` of the env API, nor
    :func:`agentrl.envs.checker.check_text_env` of the text-env contract). Fail fast, before any model loads:
    ``env`` is a registered id (:func:`check_env_id`) and one env made with ``env_kwargs`` comes up (a code
    env without bubblewrap, or a wrong keyword, is refused here rather than after the model has loaded). The
    env is closed again.

    Raises:
        ValueError: an unknown id, or the env refused ``env_kwargs`` or its sandbox (the message says what to do).
    """
    import gymnasium as gym

    from agentrl.envs.plugins import env_kwargs_problem
    from agentrl.envs.sandbox.config import SandboxUnavailable

    check_env_id(env)
    problem = env_kwargs_problem(env, env_kwargs or {})  # names only the bad key, a did-you-mean, the accepted keys
    if problem is not None:
        raise ValueError(f"{env}: env_kwargs: {problem}")
    try:
        made = gym.make(env, **dict(env_kwargs or {}))
    except SandboxUnavailable as e:
        raise ValueError(f"{env}: {e}") from None
    except TypeError as e:  # a value the env refuses (its keys passed the check above)
        msg = str(e).split(" was raised from the environment creator")[0]  # gymnasium's addition repeats the kwargs
        raise ValueError(f"{env}: env_kwargs {sorted(env_kwargs or {})} refused: {msg}") from None
    made.close()


def env_class(env: str | Callable[[], Any]) -> type | None:
    """The class behind a registered env id (without making an env); ``None`` for a factory, an unknown id or
    an entry point that is a function rather than a class."""
    if not isinstance(env, str):
        return None
    try:
        spec = env_spec(env)
    except Exception:  # noqa: BLE001 - unknown id; gymnasium.make will give the user its own error
        return None
    entry = spec.entry_point
    if isinstance(entry, str):
        from gymnasium.envs.registration import load_env_creator

        entry = load_env_creator(entry)
    return entry if isinstance(entry, type) else None


def make_chat_env(env_id: str, env_kwargs: dict[str, Any] | None = None, *, template_tools: bool = False,
                  call_format: str | None = None):
    """The collector's env for a chat template: ``gymnasium.make(env_id, **env_kwargs)`` (wrappers kept; the
    bare env is :func:`agentrl.envs.make_text_env`), with ``tools_in_prompt=False`` when the chat template
    renders the tool schemas itself (``template_tools``) and the caller did not choose. An env that takes no
    ``tools_in_prompt`` keyword (its ``gymnasium.make`` raises ``TypeError``) is made without it: its own prompt
    describes the tools. ``call_format`` (e.g. :attr:`~agentrl.algos.rollout.chat.ChatFormat.call_format`) goes to
    :meth:`~agentrl.envs.core.TextEnv.use_call_format` of an env that has it."""
    import gymnasium as gym

    from agentrl.envs import register_env_ref

    register_env_ref(env_id)
    kwargs = dict(env_kwargs or {})
    env = None
    if template_tools and "tools_in_prompt" not in kwargs:
        try:
            env = gym.make(env_id, tools_in_prompt=False, **kwargs)
        except TypeError:
            logger.info("%s takes no tools_in_prompt; its prompt describes the tools itself", env_id)
    env = env if env is not None else gym.make(env_id, **kwargs)
    configure_chat_env(env, call_format=call_format)
    return env


def configure_chat_env(env, *, template_tools: bool | None = None, call_format: str | None = None):
    """Set up an existing env as :func:`make_chat_env` makes one: ``tools_in_prompt = not template_tools``
    (when given and the env has that attribute) and ``call_format`` through
    :meth:`~agentrl.envs.core.TextEnv.use_call_format` (when given and the env has it). Takes effect at the
    next ``reset``; returns ``env``."""
    u = getattr(env, "unwrapped", env)
    if template_tools is not None and hasattr(u, "tools_in_prompt"):
        u.tools_in_prompt = not template_tools
    if call_format is not None and hasattr(u, "use_call_format"):
        u.use_call_format(call_format)
    return env


def resolve_call_format(setting: str, chat) -> str | None:
    """The tool-call format to impose on envs for :attr:`CollectorConfig.call_format` ``setting``: ``None`` for
    ``"env"`` (each env keeps its own), the chat template's native format (``chat.call_format``) for ``"auto"``,
    else the named format."""
    if setting == "env":
        return None
    return chat.call_format if setting == "auto" else setting


def rollout_env(executor: str, env_id: str, env_kwargs: dict[str, Any] | None = None, *, tokenizer=None,
                num_workers: int | None = None, actor_options: dict[str, Any] | None = None,
                call_format: str = "auto") -> str | Callable[[], Any]:
    """What to pass as ``collect``'s ``env`` for an executor (one of :data:`EXECUTORS`).

    * ``"local"``: ``env_id`` itself — the collector makes the envs in-process with :func:`make_chat_env`
      (pass ``env_kwargs`` to ``collect``).
    * ``"ray"``: a :class:`~agentrl.algos.integrations.ray_envs.RayEnvPool` of ``num_workers`` env actors (a
      zero-argument factory of remote envs made with ``env_kwargs``); ``tokenizer`` and ``call_format`` (a
      :attr:`CollectorConfig.call_format` setting) decide ``tools_in_prompt`` and the tool-call format the way the
      collector does for env ids. Call its ``close()`` when training ends. Any other executor: its
      :class:`EnvPool`, built the same way.

    Raises:
        ValueError: an unknown executor.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {tuple(EXECUTORS.names())}, got {executor!r}")
    pool_class = EXECUTORS.get(executor)
    if pool_class is None:
        return env_id
    template_tools, fmt = False, None
    if tokenizer is not None:
        from agentrl.algos.rollout.chat import ChatFormat

        chat = ChatFormat(tokenizer)
        template_tools, fmt = chat.supports_tools, resolve_call_format(call_format, chat)
    return pool_class(env_id, env_kwargs, num_workers=num_workers, template_tools=template_tools, call_format=fmt,
                      actor_options=actor_options)
