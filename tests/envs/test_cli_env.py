"""agentrl-env: list the environments and play one from the terminal."""

import os
import subprocess
import sys

from agentrl.envs import ENVS
from agentrl.envs.tool_use import ToolUseEnv


def run_cli(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "agentrl.envs.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_list_names_every_env():
    out = run_cli("list")
    assert out.returncode == 0
    for env_id in ENVS:
        assert env_id in out.stdout


def test_play_a_whole_episode_from_stdin():
    env = ToolUseEnv()
    env.reset(seed=5)
    task = env.task
    replies = env.demo_actions(task)
    stdin = "".join(r + "\n.\n" for r in replies)
    out = run_cli("play", "AgentRL/ToolUse-v0", "--seed", "5", stdin=stdin)
    assert out.returncode == 0, out.stderr
    assert task["query"] in out.stdout and "--- system ---" in out.stdout
    assert "[parsed as tool_call]" in out.stdout
    assert "episode over: answered · reward +1.00 · correct True" in out.stdout


def test_play_reports_invalid_replies_and_eof():
    out = run_cli("play", "AgentRL/ToolUse-v0", "--seed", "0", stdin="no idea\n.\n")
    assert "[parsed as invalid: no tool call and no final answer found]" in out.stdout
    assert "reward -0.10" in out.stdout
    out = run_cli("play", "AgentRL/ToolUse-v0", "--seed", "0", stdin="")
    assert out.returncode == 1 and "episode abandoned" in out.stdout


def test_play_an_unregistered_env_factory_by_module_reference(tmp_path):
    (tmp_path / "my_play_env.py").write_text(
        "from agentrl.envs.tool_use import ToolUseEnv\n\n\n"
        "def make(**kw):\n    return ToolUseEnv(families=['multiply'], **kw)\n")
    env = ToolUseEnv(families=["multiply"])
    env.reset(seed=3)
    stdin = "".join(r + "\n.\n" for r in env.demo_actions(env.task))
    out = subprocess.run([sys.executable, "-m", "agentrl.envs.cli", "play", "my_play_env:make", "--seed", "3"],
                         input=stdin, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr  # was refused: env_id had to be one of the registered ids
    assert env.task["query"] in out.stdout and "correct True" in out.stdout
    out = run_cli("play", "AgentRL/ToolUsee-v0")
    assert out.returncode == 2 and "unknown environment 'AgentRL/ToolUsee-v0'" in out.stderr
    assert "package.module:factory" in out.stderr
