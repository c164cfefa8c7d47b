"""Ray executor on a local Ray instance: remote envs equal local ones, a dead actor costs its episodes and is
replaced, the trainer with --executor ray equals local."""

from __future__ import annotations

import gymnasium as gym
import pytest

ray = pytest.importorskip("ray")

from helpers import TESTS, ScriptedPolicy, tiny_train_config, tiny_train_model  # noqa: E402

import agentrl.envs  # noqa: E402,F401
from agentrl.algos.integrations.ray_envs import RayEnvPool, RemoteEnv  # noqa: E402
from agentrl.algos.rollout.collector import CollectorConfig, collect  # noqa: E402
from agentrl.algos.rollout.env_factory import rollout_env  # noqa: E402
from agentrl.envs.tool_use.env import make_tasks  # noqa: E402

ENV = "AgentRL/ToolUse-v0"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # workers import the test helpers (helpers.ScriptedPolicy) by name, so they get this folder on their path
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


def _comparable(info: dict) -> dict:
    """``info`` without timings (tool latency differs between runs)."""
    out = dict(info)
    out["metrics"] = {k: v for k, v in (info.get("metrics") or {}).items() if "latency" not in k}
    return out


def _play(env, task, actions, seed):
    obs, info = env.reset(seed=seed, options={"task": task})
    steps = [(obs, _comparable(info))]
    for a in actions:
        obs, reward, term, trunc, info = env.step(a)
        steps.append((obs, reward, term, trunc, _comparable(info)))
        if term or trunc:
            break
    return steps


def test_remote_env_episodes_equal_local_episodes():
    local = gym.make(ENV)
    remote = RemoteEnv(ENV)
    try:
        assert remote.unwrapped is remote
        assert remote.tools_in_prompt == local.unwrapped.tools_in_prompt
        assert remote.rewards == local.unwrapped.rewards
        for seed, task in enumerate(make_tasks(3, "train")):
            actions = local.unwrapped.demo_actions(task)
            wrong = actions[:-1] + ["Answer: 0.5"]
            for acts in (actions, wrong, ["no tool call, no answer"]):
                assert _play(remote, task, acts, seed) == _play(local, task, acts, seed)
        # envs that sample their own task from the seed agree too, and any env method is reachable
        assert remote.reset(seed=11)[0] == local.reset(seed=11)[0]
        assert remote.call("demo_actions", make_tasks(1)[0]) == local.unwrapped.demo_actions(make_tasks(1)[0])
        # a step the env cannot parse never raises through the proxy either
        obs, reward, term, _, info = remote.step("<tool_call>{not json</tool_call>")
        assert term and reward == local.unwrapped.rewards.invalid
    finally:
        remote.close()
        local.close()


def test_collect_with_remote_envs_equals_local(tokenizer):
    tasks = make_tasks(4, "train")
    cfg = CollectorConfig(max_new_tokens=128, env_threads=4)
    local = collect(ENV, ScriptedPolicy(tokenizer, tasks), tasks, 2, cfg)
    with RayEnvPool(ENV, num_workers=2) as pool:
        remote = collect(pool, ScriptedPolicy(tokenizer, tasks), tasks, 2, cfg)
        # the collector closed its envs; the actors stay up for the next call
        assert ray.get([h.num_envs.remote() for h in pool.hosts]) == [0, 0]
        again = collect(pool, ScriptedPolicy(tokenizer, tasks[:1]), tasks[:1], 1, cfg)
    assert len(remote) == len(local) == 8
    assert all(t.reward == 1.0 for t in remote)
    for a, b in zip(local, remote, strict=True):
        assert a.token_ids == b.token_ids and a.loss_mask == b.loss_mask and a.logprobs == b.logprobs
        assert (a.reward, a.group_id, a.termination, a.task) == (b.reward, b.group_id, b.termination, b.task)
        assert [t.observation for t in a.turns] == [t.observation for t in b.turns]
        assert {k: v for k, v in a.metrics.items() if "latency" not in k} == \
            {k: v for k, v in b.metrics.items() if "latency" not in k}
    assert again[0].token_ids == local[0].token_ids


def test_rollout_env(tokenizer):
    assert rollout_env("local", ENV, {}) == ENV
    with pytest.raises(ValueError, match="executor"):
        rollout_env("dask", ENV, {})
    pool = rollout_env("ray", ENV, {"families": ["multiply"]}, tokenizer=tokenizer, num_workers=1)
    try:
        env = pool()
        _, info = env.reset(seed=0)
        assert info["task_id"].startswith("multiply")
        # SmolLM2's ChatML template has no tools section: the env keeps describing its tools in the prompt
        assert env.tools_in_prompt and "multiply" in info["messages"][0]["content"]
        env.close()
    finally:
        pool.close()


def test_ray_envs_use_the_chat_templates_call_format(template_tokenizers):
    pool = rollout_env("ray", ENV, {"families": ["multiply"]}, tokenizer=template_tokenizers["llama3_1"],
                       num_workers=1)
    try:
        assert pool.call_format == "llama3_json"  # the collector would impose the same on a local env
        env = pool()
        env.reset(seed=0)
        obs, _, done, _, info = env.step('{"name": "multiply", "parameters": {"a": 3, "b": 4}}')
        assert not done and info["obs_role"] == "tool" and obs.strip() == "12"
        env.close()
    finally:
        pool.close()


def test_a_dead_env_actor_ends_its_trajectories_with_error(tokenizer):
    tasks = make_tasks(2, "train")
    scripted = ScriptedPolicy(tokenizer, tasks)
    pool = RayEnvPool(ENV, num_workers=2)

    class KillingPolicy(ScriptedPolicy):
        def generate(self, requests, sampling):
            if not getattr(self, "killed", False):
                ray.kill(pool.hosts[1])  # the actor of the 2nd and 4th env dies after reset, before any step
                self.killed = True
            return scripted.generate(requests, sampling)

    try:
        trajs = collect(pool, KillingPolicy(tokenizer, tasks), tasks, 2, CollectorConfig(max_new_tokens=128))
        assert [t.termination for t in trajs] == ["answered", "error", "answered", "error"]
        assert [t.reward for t in trajs] == [1.0, 0.0, 1.0, 0.0]
        # the next collect replaces the dead actor: the run goes on with every episode answered
        again = collect(pool, ScriptedPolicy(tokenizer, tasks), tasks, 2, CollectorConfig(max_new_tokens=128))
        assert [t.termination for t in again] == ["answered"] * 4 and pool.replaced == 1
    finally:
        pool.close()


def test_trainer_with_ray_executor_matches_local(tokenizer, tmp_path):
    """`agentrl train --executor ray`: the same step as the local executor, with the envs in Ray actors."""
    from agentrl.algos.training.trainer import Trainer

    runs = {}
    for executor in ("local", "ray"):
        options = {"num_cpus": 0.5} if executor == "ray" else None
        cfg = tiny_train_config(tmp_path / executor, env=ENV, executor=executor, env_workers=2, group_size=2,
                                env_actor_options=options, collector=CollectorConfig(max_new_tokens=8, max_turns=2))
        trainer = Trainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
        if executor == "ray":  # the config's actor options reach every env actor
            assert isinstance(trainer.rollout_env, RayEnvPool) and trainer.rollout_env.actor_options == options
        runs[executor] = trainer.train()[0]
    keys = [k for k in runs["local"] if k.startswith(("reward/", "rollout/")) and "time" not in k]
    assert keys and {k: runs["ray"][k] for k in keys} == {k: runs["local"][k] for k in keys}


def test_declared_capabilities_travel_through_the_ray_proxy(tokenizer):
    # issue 60 (N3): BFCL grades a reply cut by the token budget (grades_cut_replies); through executor=ray the
    # proxy dropped the declaration and the same episodes ended truncated at reward 0
    from agentrl.algos.models import tiny_model
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.envs.capabilities import CAPABILITIES, capabilities

    env_id, kwargs = "AgentRL/BFCL-v0", {"category": "irrelevance"}
    local_env = gym.make(env_id, **kwargs)
    remote_env = RemoteEnv(env_id, kwargs)
    try:
        assert capabilities(remote_env) == capabilities(local_env) == {name: name == "grades_cut_replies"
                                                                      for name in CAPABILITIES}
    finally:
        remote_env.close()
        local_env.close()
    policy = HFPolicy(tiny_model(tokenizer, hidden_size=32), tokenizer)
    tasks = [{"id": f"irrelevance_{i}"} for i in range(3)]
    cfg = CollectorConfig(max_new_tokens=4, temperature=0.0)  # every reply is cut
    local = collect(env_id, policy, tasks, 1, cfg, env_kwargs=kwargs)
    with RayEnvPool(env_id, kwargs, num_workers=1) as pool:
        remote = collect(pool, policy, tasks, 1, cfg)
    assert all(t.turns[-1].finish_reason != "stop" for t in local)
    assert [(t.termination, t.reward) for t in remote] == [(t.termination, t.reward) for t in local]
    assert all(t.termination != "truncated" for t in remote)  # graded, not cut off
