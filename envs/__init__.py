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
  ``gym.make``-able by id).
* `TextEnv` — the base class and contract of every env (:mod:`agentrl.envs.core`), with `Budgets` (turn,
  tool-call and length limits), `Rewards` (reward values) and `AnyText` (its text spaces).
* `ActionParser` reads a reply into a `ParsedAction` (tool calls, an answer, or an error).
* `tool` makes a typed Python function a `Tool`; a `ToolSet` runs calls and returns a `ToolResult`.
* `Sandbox` (local bubblewrap) and `RemoteSandbox` (a SandboxFusion service) run model-written code for the
  code envs (``sandbox=`` an instance, or a name with ``sandbox_kwargs``).
"""

from collections.abc import Callable
from importlib.metadata import entry_points

from gymnasium.envs.registration import register, registry

from agentrl.envs import vector as _vector  # noqa: F401  (async vector envs return real text)
from agentrl.envs.core import AnyText, Budgets, Rewards, TextEnv
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.sandbox.pool import Sandbox
from agentrl.envs.sandbox.remote import RemoteSandbox
from agentrl.envs.tools import Tool, ToolResult, ToolSet, tool

__all__ = ["ENVS", "ActionParser", "AnyText", "Budgets", "ParsedAction", "RemoteSandbox", "Rewards", "Sandbox",
           "TextEnv", "Tool", "ToolResult", "ToolSet", "register_env", "tool"]

#: The built-in environments: id -> (entry point, one-line description). Registered lazily: the module behind
#: an entry point is imported only when the env is made.
ENVS: dict[str, tuple[str, str]] = {
    "AgentRL/ToolUse-v0": ("agentrl.envs.tool_use:ToolUseEnv",
                           "answer questions by calling tools (mock arithmetic/inventory/units/dates, or yours)"),
    "AgentRL/PythonMath-v0": ("agentrl.envs.python_math.env:PythonMathEnv",
                              "solve math problems with a sandboxed Python interpreter (ReTool; +1/-1 reward)"),
    "AgentRL/Coding-v0": ("agentrl.envs.coding.env:CodingEnv",
                          "write a program that passes hidden stdin/stdout tests (reward: fraction passed)"),
    "AgentRL/Search-v0": ("agentrl.envs.search.env:SearchEnv",
                          "answer questions with a search tool (offline BM25 over Wikipedia, or online backends)"),
    "AgentRL/OpenEnv-v0": ("agentrl.envs.bridges.openenv_client:OpenEnvTextEnv",
                           "play a running OpenEnv server (url=...; needs the [openenv] extra)"),
}

#: Environments added by :func:`register_env` or an entry point: id -> (entry point, description).
_ADDED: dict[str, tuple[str, str]] = {}


def register_env(id: str, entry_point: str | Callable[..., TextEnv], description: str = "") -> None:
    """Make ``gym.make(id)`` build ``entry_point`` (``"package.module:EnvClass"`` or a callable) and list it
    in ``agentrl-env list``; it replaces an env of the same id."""
    register(id=id, entry_point=entry_point, disable_env_checker=False)
    if not isinstance(entry_point, str):
        path = f"{entry_point.__module__}:{entry_point.__qualname__}"
    else:
        path = entry_point
    _ADDED[id] = (path, description)


for _id, (_entry, _) in ENVS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, disable_env_checker=False)
# A third party's ``[project.entry-points."agentrl.envs"] "Their/Env-v0" = "pkg.module:Env"`` (gymnasium 1.x
# loads no plugins itself).
for _ep in entry_points(group="agentrl.envs"):
    if _ep.name not in registry:
        register_env(_ep.name, _ep.value, f"from the package {_ep.dist.name}" if _ep.dist else "")
