"""Adding an environment: ``register_env`` at run time, or an entry point in the group ``agentrl.envs`` that
``import agentrl.envs`` reads (gymnasium 1.x loads no plugins itself)."""

from __future__ import annotations

import gymnasium as gym
from helpers import run_with_plugin

import agentrl.envs
from agentrl.envs import ENVS, register_env
from agentrl.envs.cli import main as env_cli
from agentrl.envs.tool_use import ToolUseEnv

PLUGIN = '''
from agentrl.envs.tool_use import ToolUseEnv


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
    out = run_with_plugin(tmp_path, monkeypatch, "agentrl.envs", "PluginEnv-v0 = plugin_env:PluginEnv",
                          "plugin_env", PLUGIN, code)
    lines = out.splitlines()
    assert lines[0] == "PluginEnv True", out
    listed = [line for line in lines if line.startswith("PluginEnv-v0")]
    assert listed and "agentrl-plugin-PluginEnv-v0" in listed[0], lines
