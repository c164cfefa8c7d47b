"""Ray on several nodes, on one host (``ray.cluster_utils.Cluster``: a head and two worker nodes, each its own
raylet): env actors are placed on both workers by ``actor_options``, and a worker node removed in the middle of a
collect costs the episodes that were on it (``termination="error"``), never the collect or the run."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from helpers import TESTS, ScriptedPolicy  # noqa: E402

import agentrl.envs  # noqa: E402,F401
from agentrl.algos.integrations.ray_envs import RayEnvPool  # noqa: E402
from agentrl.algos.rollout.collector import CollectorConfig, collect  # noqa: E402
from agentrl.envs.tool_use.env import make_tasks  # noqa: E402

ENV = "AgentRL/ToolUse-v0"


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [c.add_node(num_cpus=2, resources={"envs": 2}) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1"}})
    yield c, workers
    ray.shutdown()
    c.shutdown()


def _node(actor) -> str:
    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


def test_env_actors_spread_over_worker_nodes_and_a_lost_node_costs_only_its_episodes(cluster, tokenizer):
    c, workers = cluster
    tasks = make_tasks(4, "train")
    scripted = ScriptedPolicy(tokenizer, tasks)
    # one env actor per worker node: each needs 2 "envs", which only the worker nodes have (2 each)
    pool = RayEnvPool(ENV, num_workers=2, actor_options={"num_cpus": 0, "resources": {"envs": 2}})
    try:
        nodes = [_node(h) for h in pool.hosts]
        assert sorted(nodes) == sorted(w.node_id for w in workers)  # one actor on each worker node
        lost = next(w for w in workers if w.node_id == nodes[1])

        class NodeLosingPolicy(ScriptedPolicy):
            def generate(self, requests, sampling):
                if not getattr(self, "removed", False):  # after every env was reset, before any step
                    c.remove_node(lost)
                    self.removed = True
                return scripted.generate(requests, sampling)

        cfg = CollectorConfig(max_new_tokens=128)
        trajs = collect(pool, NodeLosingPolicy(tokenizer, tasks), tasks, 2, cfg)
        # envs were handed out round-robin: every second one lived on the lost node
        assert len(trajs) == 8
        assert [t.termination for t in trajs] == ["answered", "error"] * 4
        assert [t.reward for t in trajs] == [1.0, 0.0] * 4

        # the run goes on: a node joins, the dead actor is replaced there and every episode is answered
        c.add_node(num_cpus=2, resources={"envs": 2})
        c.wait_for_nodes()
        again = collect(pool, ScriptedPolicy(tokenizer, tasks), tasks, 2, cfg)
        assert [t.termination for t in again] == ["answered"] * 8 and pool.replaced == 1
    finally:
        pool.close()
