"""What a bridge costs: env steps per second through each peer's interface against ``gymnasium.make``, same run.

The same scripted episodes (ToolUse-v0 by default: seeded tasks, each played with its ``demo_actions`` — tool
calls, then the answer) are stepped

* ``gymnasium.make``      — in-process, the baseline;
* ``SkyRL-gym``           — ``skyrl_gym.make`` of the registration
  :func:`~agentrl.envs.bridges.skyrl.register_skyrl_envs` makes (in-process: the overhead is the wrapping);
* ``OpenEnv``             — ``AgentRL/OpenEnv-v0`` (OpenEnv's ``GenericEnvClient`` over a WebSocket) against
  ``agentrl-env serve ID --openenv``, a server process on 127.0.0.1 started before the timing and stopped after.

The verifiers bridge runs in its own virtualenv (docs/bridges/verifiers.md) and is driven through a model server,
so it has no row here. Prints steps/s and episodes/s per row and ``gym ÷ this`` (above 1: the bridge is slower);
every row's rewards are checked equal to the baseline's (a bridge that changed them would be a bug, not a speed).

    python benchmarks/bridge_overhead.py                     # 200 ToolUse-v0 episodes
    python benchmarks/bridge_overhead.py --episodes 50 --env AgentRL/Search-v0
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time

import gymnasium as gym

import agentrl.envs

gym.register_envs(agentrl.envs)


def scripts(env_id: str, seeds) -> dict[int, tuple[dict, list[str]]]:
    """Each seed's task and scripted actions, computed once, outside every timing."""
    env = gym.make(env_id).unwrapped
    out = {}
    for seed in seeds:
        env.reset(seed=seed)
        out[seed] = (env.task, env.demo_actions(env.task))
    env.close()
    return out


def play(reset, step, script) -> tuple[int, list[float], float]:
    """Play each seed's scripted episode: ``(steps, final rewards, seconds)``."""
    steps, rewards = 0, []
    t0 = time.perf_counter()
    for seed, (task, actions) in script.items():
        reset(seed, task)
        reward = 0.0
        for action in actions:
            reward, done = step(action)
            steps += 1
            if done:
                break
        rewards.append(reward)
    return steps, rewards, time.perf_counter() - t0


def gym_row(env_id: str, script, **kwargs):
    """``gymnasium.make(env_id, **kwargs)`` (``AgentRL/OpenEnv-v0`` with ``url``: the OpenEnv client): reset by seed."""
    env = gym.make(env_id, **kwargs)

    def step(action):
        _, r, term, trunc, _ = env.step(action)
        return r, term or trunc

    try:
        return play(lambda seed, task: env.reset(seed=seed), step, script)
    finally:
        env.close()


def skyrl_row(env_id: str, script):
    """One ``skyrl_gym`` env per episode, as SkyRL's generator makes one per dataset row (the row pins the task)."""
    import skyrl_gym

    from agentrl.envs.bridges.skyrl import register_skyrl_envs

    register_skyrl_envs([env_id])
    state = {}

    def reset(seed, task):
        state["env"] = skyrl_gym.make(env_id, env_config={}, extras={"task": task})
        state["env"].init([])

    def step(action):
        out = state["env"].step(action)
        return out["reward"], out["done"]

    return play(reset, step, script)


@contextlib.contextmanager
def openenv_server(env_id: str):
    """``agentrl-env serve ENV --openenv`` as a process on a free 127.0.0.1 port, once ``/health`` answers."""
    from agentrl.envs.bridges.openenv import wait_until_serving

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.envs.cli", "serve", env_id, "--openenv", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="AgentRL/ToolUse-v0", help="a registered env id with demo_actions")
    ap.add_argument("--episodes", type=int, default=200)
    args = ap.parse_args(argv)
    seeds = list(range(args.episodes))
    rows = []

    def record(name, result):
        steps, rewards, seconds = result
        rows.append({"name": name, "steps": steps, "rewards": rewards, "seconds": seconds,
                     "steps_s": steps / seconds, "episodes_s": len(rewards) / seconds})
        print(f"{name:<16} {steps:>6} steps {seconds:>7.2f} s {steps / seconds:>9.1f} steps/s", flush=True)

    script = scripts(args.env, seeds)
    warm = dict(list(script.items())[:5])
    gym_row(args.env, warm)  # warm-up: imports and the env's first-use caches
    record("gymnasium.make", gym_row(args.env, script))
    record("SkyRL-gym", skyrl_row(args.env, script))
    with openenv_server(args.env) as url:
        gym_row("AgentRL/OpenEnv-v0", warm, url=url)  # warm-up: the client's imports and first session
        record("OpenEnv", gym_row("AgentRL/OpenEnv-v0", script, url=url))
    base = rows[0]
    for r in rows[1:]:
        if r["rewards"] != base["rewards"]:
            raise AssertionError(f"{r['name']} changed the rewards: a bridge bug")
    print(f"\n{args.env}, {args.episodes} scripted episodes (mean reward "
          f"{sum(base['rewards']) / len(base['rewards']):.3f} on every row)\n")
    print("| interface | steps | seconds | steps/s | episodes/s | gym ÷ this |\n|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['steps']} | {r['seconds']:.2f} | {r['steps_s']:.1f} | {r['episodes_s']:.1f} | "
              f"{base['steps_s'] / r['steps_s']:.2f}x |")
    return rows


if __name__ == "__main__":
    main()
