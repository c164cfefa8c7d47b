"""Without bubblewrap the code envs refuse at make time with the install line, not at every code call."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentrl.envs  # noqa: F401 - registers the AgentRL/* ids
from agentrl.envs.sandbox.config import SandboxUnavailable
from agentrl.envs.sandbox.registry import check_sandbox


@pytest.fixture
def no_bwrap(monkeypatch):
    monkeypatch.setattr("agentrl.envs.sandbox.bwrap.bwrap_available", lambda: False)


@pytest.mark.parametrize("env_id", ["AgentRL/PythonMath-v0", "AgentRL/Coding-v0"])
def test_code_envs_without_bwrap_refuse_at_make_and_say_what_to_do(no_bwrap, env_id):
    with pytest.raises(SandboxUnavailable) as e:
        gym.make(env_id)
    message = str(e.value)
    assert "\n" not in message and "apt-get install -y bubblewrap" in message
    assert '"sandbox": "remote"' in message and '"isolation": "none"' in message
    assert "docs/sandbox-security.md" in message


@pytest.mark.parametrize("kwargs", [{"sandbox_kwargs": {"isolation": "none"}},
                                    {"sandbox": "remote", "sandbox_kwargs": {"url": "http://127.0.0.1:9"}}])
def test_the_alternatives_make_without_bwrap(no_bwrap, kwargs):
    gym.make("AgentRL/PythonMath-v0", **kwargs).close()


def test_check_sandbox_passes_where_bwrap_is_installed_and_skips_instances(monkeypatch):
    monkeypatch.setattr("agentrl.envs.sandbox.bwrap.bwrap_available", lambda: True)
    check_sandbox()
    check_sandbox("bwrap", {"timeout_s": 3})
    monkeypatch.setattr("agentrl.envs.sandbox.bwrap.bwrap_available", lambda: False)
    check_sandbox(object())  # an instance is the caller's business
    with pytest.raises(SandboxUnavailable):
        check_sandbox(None)
