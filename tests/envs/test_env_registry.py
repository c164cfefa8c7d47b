"""Adding an environment: ``register_env`` at run time, or an entry point in the group ``agentrl.envs`` that
``import agentrl.envs`` reads (gymnasium 1.x loads no plugins itself)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from helpers import run_with_plugin

import agentrl.envs
from agentrl.envs import ENVS, register_env
from agentrl.envs.cli import main as env_cli
from agentrl.envs.tool_use.env import ToolUseEnv

PLUGIN = '''
from agentrl.envs.tool_use.env import ToolUseEnv


class PluginEnv(ToolUseEnv):
    """A third party's env."""
'''


def test_register_env_makes_an_id_gym_makeable_and_listed(monkeypatch, capsys, request):
    monkeypatch.setattr(agentrl.envs, "_ADDED", {})  # the registration is undone with the table...
    request.addfinalizer(lambda: gym.registry.pop("Test/Mine-v0", None))  # ...and with gymnasium's entry
    register_env("Test/Mine-v0", ToolUseEnv, "my tool-use variant")
    env = gym.make("Test/Mine-v0", families=["multiply"])
    assert isinstance(env.unwrapped, ToolUseEnv)
    assert "Test/Mine-v0" not in ENVS  # ENVS stays the table of built-ins
    assert env_cli(["list"]) == 0
    assert "Test/Mine-v0" in capsys.readouterr().out


def test_a_third_party_entry_point_is_picked_up_at_import(tmp_path, monkeypatch):
    """What ``pip install`` of a package declaring ``[project.entry-points."agentrl.envs"]`` leaves: a fresh
    process that imports agentrl.envs can ``gym.make`` the id, and ``agentrl-env list`` shows it."""
    code = ("import gymnasium as gym, agentrl.envs\nfrom agentrl.envs.core import TextEnv\n"
            "env = gym.make('PluginEnv-v0')\nenv.reset(seed=0)\n"
            "print(type(env.unwrapped).__name__, isinstance(env.unwrapped, TextEnv))\n"
            "from agentrl.envs.cli import main\nmain(['list'])")
    out = run_with_plugin(tmp_path, "agentrl.envs", "PluginEnv-v0 = plugin_env:PluginEnv",
                          "plugin_env", PLUGIN, code)
    lines = out.splitlines()
    assert lines[0] == "PluginEnv True", out
    listed = [line for line in lines if line.startswith("PluginEnv-v0")]
    assert listed and "agentrl-plugin-PluginEnv-v0" in listed[0], lines


FACTORIES = """
from agentrl.envs.tool_use.env import ToolUseEnv


class MulOnly(ToolUseEnv):
    def __init__(self, **kw):
        super().__init__(families=["multiply"], **kw)


def make_add(**kw):
    return ToolUseEnv(families=["add_multiply"], **kw)


NOT_CALLABLE = 3
"""


def test_a_module_factory_reference_is_gym_makeable(tmp_path, monkeypatch, request):
    """"module:factory" (a TextEnv class or a function) that no registration names becomes gym.make-able under
    that string; "module:Id" and what is not callable are left to gymnasium; two factories of one name refuse."""
    monkeypatch.setattr(agentrl.envs, "_ADDED", {})
    for name in ("MulOnly", "make_add"):
        request.addfinalizer(lambda name=name: gym.registry.pop(name, None))
    (tmp_path / "my_factories.py").write_text(FACTORIES)
    (tmp_path / "other_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    from agentrl.envs import register_env_ref

    assert register_env_ref("my_factories:MulOnly") == "my_factories:MulOnly"
    env = gym.make("my_factories:MulOnly").unwrapped
    _, info = env.reset(seed=0)
    assert env.task["family"] == "multiply"
    env = gym.make(register_env_ref("my_factories:make_add"), max_turns=2).unwrapped
    env.reset(seed=0)
    assert env.task["family"] == "add_multiply" and env.budgets.max_turns == 2
    assert register_env_ref("my_factories:make_add") == "my_factories:make_add"  # again: nothing changes
    with pytest.raises(ValueError, match="already makes 'my_factories:make_add'"):
        register_env_ref("other_factories:make_add")
    for untouched in ("my_factories:NOT_CALLABLE", "no_such_module_q:make", "AgentRL/ToolUse-v0",
                      "agentrl.envs:AgentRL/ToolUse-v0"):
        assert register_env_ref(untouched) == untouched
    assert "NOT_CALLABLE" not in gym.registry


def test_make_text_env_makes_the_bare_text_env_behind_an_id(request):
    env = agentrl.envs.make_text_env("AgentRL/ToolUse-v0", {"families": ["multiply"]})
    assert type(env) is ToolUseEnv and env.families == ["multiply"]  # no Gymnasium wrapper around it
    env.step("Answer: 1")  # a step before reset: the bare env keeps the never-raise contract (wrappers would not)
    request.addfinalizer(lambda: gym.registry.pop("Test/NotText-v0", None))
    gym.register("Test/NotText-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    with pytest.raises(TypeError, match=r"^Test/NotText-v0 is a CartPoleEnv, not an agentrl TextEnv$"):
        agentrl.envs.make_text_env("Test/NotText-v0")
