"""Env steps per second of AgentRL/ToolUse-v0 driven by its oracle (no model), on one core.

Prints steps/s through ``gymnasium.make`` (with its default wrappers: order enforcing and the passive env
checker) and on the raw env, with the ratio. Goal: >= 10,000 steps/s raw. Never asserts.

    python benchmarks/env_throughput.py [--episodes 4000]
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym

import agentrl.envs
from agentrl.envs.tool_use.env import ToolUseEnv, make_tasks

gym.register_envs(agentrl.envs)


def run(env, tasks, plans) -> tuple[int, float]:
    steps = 0
    t0 = time.perf_counter()
    for task, plan in zip(tasks, plans, strict=True):
        env.reset(options={"task": task})
        for action in plan:
            steps += 1
            _, _, term, trunc, _ = env.step(action)
            if term or trunc:
                break
    return steps, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=4000)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the goal says
    tasks = make_tasks(args.episodes, "test")
    plans = [ToolUseEnv().demo_actions(t) for t in tasks]
    rows = []
    for label, env in [("raw ToolUseEnv", ToolUseEnv()),
                       ("gymnasium.make (default wrappers)", gym.make("AgentRL/ToolUse-v0"))]:
        run(env, tasks[:200], plans[:200])  # warm-up
        steps, secs = run(env, tasks, plans)
        rows.append((label, steps, secs, steps / secs))
    print(f"{'env':<36} {'steps':>8} {'seconds':>8} {'steps/s':>10}")
    for label, steps, secs, rate in rows:
        print(f"{label:<36} {steps:>8} {secs:>8.3f} {rate:>10,.0f}")
    print(f"ratio raw / wrapped: {rows[0][3] / rows[1][3]:.2f}x   (goal: raw >= 10,000 steps/s on one core)")


if __name__ == "__main__":
    main()
