"""Ray environment workers: the cost of a remote step, and the gain when tools are CPU-bound.

1. Latency: one ToolUse-v0 step in-process vs through :class:`RemoteEnv` (one actor), sequential, demo actions.
2. Throughput with a CPU-bound tool (a pure-Python loop holding the GIL for ~``--tool-ms`` ms): ``--envs`` episodes
   stepped from a thread pool the way the collector steps them, in-process (threads share the GIL) vs on a
   :class:`RayEnvPool` of ``--workers`` actors (separate processes).

Prints both figures side by side with the ratio. Never asserts; the gain is bounded by the free cores.

    python benchmarks/ray_env_overhead.py [--steps 300] [--envs 16] [--workers 2] [--tool-ms 20]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym

import agentrl.envs  # noqa: F401
from agentrl.algos.integrations.ray_envs import RayEnvPool, RemoteEnv
from agentrl.envs.tool_use.env import make_tasks
from agentrl.envs.tools import tool

ENV = "AgentRL/ToolUse-v0"
SPIN = {"n": 1}


@tool
def checksum(text: str) -> int:
    """A deliberately slow checksum of a text.

    Args:
        text: the text.
    """
    total = 0
    for i in range(SPIN["n"]):
        total = (total * 31 + i + len(text)) % 1_000_003
    return total


def calibrate(ms: float) -> int:
    n = 200_000
    t0 = time.perf_counter()
    SPIN["n"] = n
    checksum("x")
    dt = time.perf_counter() - t0
    return max(1, int(n * ms / 1000 / dt))


def latency(env, plans, steps: int) -> float:
    done, t0 = 0, time.perf_counter()
    while done < steps:
        for task, actions in plans:
            env.reset(options={"task": task})
            for a in actions:
                _, _, term, trunc, _ = env.step(a)
                done += 1
                if term or trunc:
                    break
    return (time.perf_counter() - t0) / done


def throughput(make, n_envs: int, calls: int) -> float:
    envs = [make() for _ in range(n_envs)]
    task = {"id": "c", "query": "checksum of hello", "answer": "0"}
    call = '<tool_call>\n{"name": "checksum", "arguments": {"text": "hello"}}\n</tool_call>'

    def episode(env):
        env.reset(options={"task": task})
        for _ in range(calls):
            env.step(call)
        env.step("Answer: 0")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(episode, envs))
    dt = time.perf_counter() - t0
    for e in envs:
        e.close()
    return n_envs * calls / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tool-ms", type=float, default=20.0)
    ap.add_argument("--calls", type=int, default=3, help="tool calls per episode in the throughput test")
    args = ap.parse_args()

    import ray

    ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=False, configure_logging=False)
    local = gym.make(ENV)
    plans = [(t, local.unwrapped.demo_actions(t)) for t in make_tasks(20, "train")]
    remote = RemoteEnv(ENV)
    latency(remote, plans, 20)  # warm up
    t_local, t_remote = latency(local, plans, args.steps), latency(remote, plans, args.steps)
    remote.close()
    print(f"step latency   local {t_local * 1e3:8.3f} ms   RemoteEnv {t_remote * 1e3:8.3f} ms   "
          f"overhead {(t_remote - t_local) * 1e3:.3f} ms/step   ratio {t_remote / t_local:.1f}x")

    SPIN["n"] = calibrate(args.tool_ms)
    kwargs = {"tools": [checksum], "dataset": [{"query": "checksum of hello", "answer": "0"}],
              "max_tool_calls": args.calls + 1, "max_turns": args.calls + 2}
    spin = SPIN["n"]

    def make_local():
        SPIN["n"] = spin
        return gym.make(ENV, **kwargs)

    r_local = throughput(make_local, args.envs, args.calls)
    with RayEnvPool(ENV, kwargs, num_workers=args.workers) as pool:
        throughput(pool, 2, 1)  # warm up the actors
        r_ray = throughput(pool, args.envs, args.calls)
    print(f"CPU-bound tool (~{args.tool_ms:.0f} ms): local threads {r_local:7.1f} calls/s   "
          f"RayEnvPool({args.workers}) {r_ray:7.1f} calls/s   ratio {r_ray / r_local:.2f}x")
    ray.shutdown()


if __name__ == "__main__":
    main()
