"""agentrl.envs — Gymnasium environments where a language-model agent acts in text.

Importing this package registers every environment::

    import gymnasium as gym
    import agentrl.envs

    gym.register_envs(agentrl.envs)          # the documented idiom; keeps linters from dropping the import
    env = gym.make("AgentRL/ToolUse-v0")

``gym.make("agentrl.envs:AgentRL/ToolUse-v0")`` works without the import. The environments need no torch.
The contract they all follow is in :mod:`agentrl.envs.core`.
"""

from gymnasium.envs.registration import register, registry

from agentrl.envs import vector as _vector  # noqa: F401  (async vector envs return real text)
from agentrl.envs.core import AnyText, Budgets, Rewards, TextEnv
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.sandbox.pool import Sandbox
from agentrl.envs.sandbox.remote import RemoteSandbox
from agentrl.envs.tools import Tool, ToolResult, ToolSet, tool

__all__ = ["ENVS", "ActionParser", "AnyText", "Budgets", "ParsedAction", "RemoteSandbox", "Rewards", "Sandbox",
           "TextEnv", "Tool", "ToolResult", "ToolSet", "tool"]

#: Every environment of the package: id -> (entry point, one-line description). Registered lazily: the
#: module behind an entry point is imported only when the env is made.
ENVS: dict[str, tuple[str, str]] = {
    "AgentRL/ToolUse-v0": ("agentrl.envs.tool_use:ToolUseEnv",
                           "answer questions by calling tools (mock arithmetic/inventory/units/dates, or yours)"),
    "AgentRL/PythonMath-v0": ("agentrl.envs.python_math:PythonMathEnv",
                              "solve math problems with a sandboxed Python interpreter (ReTool; +1/-1 reward)"),
    "AgentRL/Coding-v0": ("agentrl.envs.coding:CodingEnv",
                          "write a program that passes hidden stdin/stdout tests (reward: fraction passed)"),
    "AgentRL/Search-v0": ("agentrl.envs.search.env:SearchEnv",
                          "answer questions with a search tool (offline BM25 over Wikipedia, or online backends)"),
}

for _id, (_entry, _) in ENVS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, disable_env_checker=False)
