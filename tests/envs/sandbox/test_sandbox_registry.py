"""The sandbox registry: ``SANDBOXES``, ``register_sandbox`` and the entry-point group ``agentrl.sandboxes``;
the code envs take ``sandbox=NAME`` with ``sandbox_kwargs`` (JSON-able); a sandbox has the ``CodeSandbox``
protocol (the contract)."""

from __future__ import annotations

import copy
import json
import sys

import gymnasium as gym
import pytest
from helpers import run_with_plugin

import agentrl.envs  # noqa: F401  (registers the ids)
from agentrl.envs import RemoteSandbox, Sandbox
from agentrl.envs.sandbox import registry
from agentrl.envs.sandbox.registry import SANDBOXES, make_sandbox, register_sandbox

PLUGIN = '''
from types import SimpleNamespace

from agentrl.envs.sandbox.config import ExecResult


class EchoSandbox:
    """Prints the code instead of running it."""

    def __init__(self, prefix="echo", timeout_s=5.0, max_concurrency=2):
        self.prefix = prefix
        self.config = SimpleNamespace(timeout_s=timeout_s, max_concurrency=max_concurrency)
        self.calls = 0
        self.closed = False

    def run(self, code, timeout=None, *, stdin=None):
        self.calls += 1
        return ExecResult(stdout=f"{self.prefix}: {code}\\n", stderr="", status="ok", returncode=0)

    def stats(self):
        return {"calls": self.calls}

    def close(self):
        self.closed = True
'''


def _call(code):
    call = json.dumps({"name": "code_interpreter", "arguments": {"code": code}})
    return f"<tool_call>\n{call}\n</tool_call>"


@pytest.fixture
def echo_sandbox(tmp_path, monkeypatch):
    """``echo_sandbox.py`` on sys.path, and a copy of the registry that undoes registrations."""
    (tmp_path / "echo_sandbox.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "SANDBOXES", copy.deepcopy(SANDBOXES))
    yield
    sys.modules.pop("echo_sandbox", None)


def test_builtin_sandboxes():
    assert SANDBOXES.names()[:2] == ["bwrap", "remote"] and SANDBOXES.group == "agentrl.sandboxes"
    assert SANDBOXES.get("bwrap") is Sandbox and SANDBOXES.get("remote") is RemoteSandbox


def test_the_code_envs_take_a_registered_sandbox_by_name(echo_sandbox):
    register_sandbox("echo", "echo_sandbox:EchoSandbox")
    kwargs = json.loads('{"sandbox": "echo", "sandbox_kwargs": {"prefix": "ran"}}')  # what --env-kwargs gives
    env = gym.make("AgentRL/PythonMath-v0", dataset=[{"question": "What is 6*7?", "answer": "42"}], **kwargs)
    env.reset(seed=0)
    obs, *_ = env.step(_call("print(6*7)"))
    assert obs.strip() == "ran: print(6*7)"
    sandbox = env.unwrapped.sandbox
    assert type(sandbox).__name__ == "EchoSandbox"
    coding = gym.make("AgentRL/Coding-v0", **kwargs)
    assert coding.unwrapped.sandbox is sandbox  # one instance per name and kwargs
    assert make_sandbox("echo", prefix="ran", shared=False) is not sandbox


def test_sandbox_names_and_kwargs_are_checked(echo_sandbox):
    with pytest.raises(ValueError, match=r"unknown sandbox 'nope'; choose one of \['bwrap', 'remote'"):
        gym.make("AgentRL/PythonMath-v0", sandbox="nope")
    sb = RemoteSandbox("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="sandbox_kwargs apply to a sandbox name"):
        gym.make("AgentRL/PythonMath-v0", sandbox=sb, sandbox_kwargs={"url": "http://x"})
    assert make_sandbox(sb) is sb
    register_sandbox("notasandbox", "json:dumps")
    with pytest.raises(TypeError, match="CodeSandbox protocol"):
        make_sandbox("notasandbox", obj=1)
    sb.close()


def test_a_third_party_entry_point_is_picked_up(tmp_path, monkeypatch):
    """A package declaring ``[project.entry-points."agentrl.sandboxes"]``: the code envs take its name."""
    code = ("import json, gymnasium as gym, agentrl.envs\n"
            "from agentrl.envs.sandbox.registry import SANDBOXES\nprint(SANDBOXES.names())\n"
            "env = gym.make('AgentRL/PythonMath-v0', sandbox='echo', sandbox_kwargs={'prefix': 'plug'})\n"
            "env.reset(seed=0)\n"
            "call = '<tool_call>' + json.dumps({'name': 'code_interpreter', 'arguments': {'code': 'x'}})"
            " + '</tool_call>'\n"
            "obs, *_ = env.step(call)\nprint(obs.strip())")
    out = run_with_plugin(tmp_path, "agentrl.sandboxes", "echo = echo_sandbox:EchoSandbox",
                          "echo_sandbox", PLUGIN, code)
    assert out.splitlines() == ["['bwrap', 'remote', 'echo']", "plug: x"]
