"""The rollout executor registry (agentrl.algos.rollout.env_factory.EXECUTORS) and its EnvPool contract."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
from helpers import install_entry_point

from agentrl.algos.rollout import env_factory
from agentrl.algos.rollout.chat import ChatFormat
from agentrl.algos.rollout.env_factory import EXECUTORS, EnvPool, register_executor, rollout_env

ENV = "AgentRL/ToolUse-v0"

PLUGIN = '''
from agentrl.algos.rollout.env_factory import make_chat_env


class LocalPool:
    """A third-party executor: envs made in this process, counted."""

    def __init__(self, env_id, env_kwargs, *, num_workers, template_tools, call_format, actor_options):
        self.args = (env_id, env_kwargs, num_workers, template_tools, call_format, actor_options)
        self.made, self.closed = 0, False

    def __call__(self):
        self.made += 1
        env_id, env_kwargs, _, template_tools, call_format = self.args[:5]
        return make_chat_env(env_id, env_kwargs, template_tools=template_tools, call_format=call_format)

    def close(self):
        self.closed = True
'''


def test_builtin_executors_and_unknown_names():
    assert EXECUTORS.names()[:2] == ["local", "ray"] and EXECUTORS.group == "agentrl.executors"
    assert rollout_env("local", ENV) == ENV  # the collector makes the envs in-process
    with pytest.raises(ValueError, match=r"executor must be one of \('local', 'ray'"):
        rollout_env("nope", ENV)


def test_a_registered_pool_gets_the_rollout_settings(tmp_path, monkeypatch, tokenizer):
    (tmp_path / "local_pool.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(env_factory, "EXECUTORS", copy.deepcopy(EXECUTORS))  # the registration is undone
    register_executor("mine", "local_pool:LocalPool")
    pool = rollout_env("mine", ENV, {"families": ["multiply"]}, tokenizer=tokenizer, num_workers=3,
                       actor_options={"num_cpus": 1})
    chat = ChatFormat(tokenizer)
    assert isinstance(pool, EnvPool)
    assert pool.args == (ENV, {"families": ["multiply"]}, 3, chat.supports_tools,
                         env_factory.resolve_call_format("auto", chat), {"num_cpus": 1})
    env = pool()
    env.reset(seed=0)
    env.close()
    pool.close()
    assert pool.made == 1 and pool.closed
    sys.modules.pop("local_pool", None)


def test_a_third_party_entry_point_is_picked_up(tmp_path, monkeypatch):
    """What ``pip install`` of a package declaring ``[project.entry-points."agentrl.executors"]`` leaves: a fresh
    process lists the executor and ``rollout_env`` builds its pool, a zero-argument env factory."""
    (tmp_path / "local_pool.py").write_text(PLUGIN)
    install_entry_point(tmp_path, monkeypatch, "agentrl.executors", "mine", "local_pool:LocalPool")
    code = ("from agentrl.algos.rollout.env_factory import EXECUTORS, EnvPool, rollout_env\n"
            f"pool = rollout_env('mine', {ENV!r})\n"
            "env = pool(); env.reset(seed=0); pool.close()\n"
            "print(EXECUTORS.names(), isinstance(pool, EnvPool), pool.made, pool.closed)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(tmp_path)])}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == "['local', 'ray', 'mine'] True 1 True", run.stdout


def test_env_actor_options_must_be_a_mapping_and_need_the_ray_executor(tmp_path):
    from agentrl.algos.training.config import TrainConfig

    TrainConfig(out=str(tmp_path), executor="ray", env_actor_options={"num_cpus": 1}).validate()
    with pytest.raises(ValueError, match=r"^env_actor_options must be a mapping of Ray actor options"):
        TrainConfig(out=str(tmp_path), executor="ray", env_actor_options=[1]).validate()
    with pytest.raises(ValueError, match=r"^env_actor_options places Ray env actors: set executor=ray"):
        TrainConfig(out=str(tmp_path), env_actor_options={"num_cpus": 1}).validate()
