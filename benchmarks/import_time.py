"""Import time of ``agentrl.envs`` and of ``gymnasium.make`` of each built-in env, each in fresh processes
(issue 61, item 5): what a user waits before the first observation.

Each row is the median of ``--repeats`` fresh processes (warm caches: the datasets, the search index and the
packages' bytecode already on disk, as on any second run). A process times, in order (``time.perf_counter``):

* ``import agentrl.envs`` — the package and gymnasium (it registers the ids; the env classes load by their id);
* ``gym.make`` — ``gymnasium.make(id)``: the env's own modules and its benchmark's package, then the constructor;
* ``first reset`` — ``env.reset(seed=0)``: whatever an env defers to its first episode.

Then ``--repeats`` more processes run the same under ``python -X importtime`` (which slows imports down, so the
times above come from the plain ones): ``imports`` is the part of ``gym.make`` spent importing (the cumulative
time of each top-level import it triggered), and ``largest outside agentrl`` the heaviest import of another
package in that phase (its cumulative time, what it pulled in included). ``AgentRL/OpenEnv-v0`` plays a running
server: the script starts ``agentrl-env serve AgentRL/ToolUse-v0 --openenv`` on 127.0.0.1 first, so its
``gym.make`` includes connecting to it.

    python benchmarks/import_time.py                    # 3 processes per row
    python benchmarks/import_time.py --repeats 1 --envs AgentRL/ToolUse-v0

Prints a markdown table with the command, the machine and the date; never asserts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
from collections import Counter

_CHILD = r"""
import json, os, sys, time
env_id, kwargs = sys.argv[1], json.loads(sys.argv[2])
os.write(2, b"@@import\n")
t0 = time.perf_counter()
import agentrl.envs
t1 = time.perf_counter()
out = {"import": t1 - t0}
if env_id:
    import gymnasium as gym
    os.write(2, b"@@make\n")
    env = gym.make(env_id, **kwargs)
    t2 = time.perf_counter()
    os.write(2, b"@@reset\n")
    env.reset(seed=0)
    t3 = time.perf_counter()
    env.close()
    out.update(make=t2 - t1, reset=t3 - t2)
print(json.dumps(out))
"""


def imports(stderr: str, phase: str) -> list[tuple[str, float, bool]]:
    """The imports ``-X importtime`` reports between the marker ``@@phase`` and the next marker:
    ``(module, cumulative seconds, top-level)``; a nested import is indented under the one that triggered it."""
    rows, inside = [], False
    for line in stderr.splitlines():
        if line.startswith("@@"):
            inside = line == f"@@{phase}"
            continue
        if not inside or not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        rows.append((name.strip(), int(cumulative) / 1e6, not name[1:].startswith(" ")))
    return rows


def measure(env_id: str, kwargs: dict, repeats: int) -> dict:
    """Medians over ``repeats`` fresh processes of each phase, then over ``repeats`` more under ``-X importtime`` of
    the imports of ``gym.make`` (of ``import agentrl.envs`` for the first row)."""

    def child(*flags: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, *flags, "-c", _CHILD, env_id, json.dumps(kwargs)],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{env_id or 'import agentrl.envs'}: {proc.stderr.strip().splitlines()[-1]}")
        return proc

    plain = [json.loads(child().stdout.strip().splitlines()[-1]) for _ in range(repeats)]
    median = {k: statistics.median(r[k] for r in plain) for k in plain[0]}
    runs = []
    for _ in range(repeats):
        rows = imports(child("-X", "importtime").stderr, "make" if env_id else "import")
        foreign = [(name, s) for name, s, _ in rows if name.split(".")[0] != "agentrl"]
        runs.append({"imports": sum(s for _, s, top in rows if top),
                     "largest": max(foreign, key=lambda r: r[1], default=("-", 0.0))})
    median["imports"] = statistics.median(r["imports"] for r in runs)
    name = Counter(r["largest"][0] for r in runs).most_common(1)[0][0]  # the same module in every run, as a rule
    median["largest"] = (name, statistics.median(r["largest"][1] for r in runs if r["largest"][0] == name))
    return median


def _openenv_server() -> tuple[subprocess.Popen, str]:
    from agentrl.envs.bridges.openenv import wait_until_serving

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.envs.cli", "serve", "AgentRL/ToolUse-v0", "--openenv",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_serving(url, proc)
    return proc, url


def main(argv: list[str] | None = None) -> int:
    from agentrl.envs import ENVS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per row (the median is shown)")
    ap.add_argument("--envs", nargs="+", default=list(ENVS), metavar="ID", help="env ids (default: every built-in)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    unknown = [e for e in args.envs if e not in ENVS]
    if unknown:
        ap.error(f"unknown env ids {unknown}; choose from {list(ENVS)}")
    server = None
    try:
        rows = [("import agentrl.envs", measure("", {}, args.repeats))]
        for env_id in args.envs:
            kwargs = {}
            if env_id == "AgentRL/OpenEnv-v0":
                server, url = server or _openenv_server()
                kwargs = {"url": url}
            rows.append((f"gym.make(\"{env_id}\")", measure(env_id, kwargs, args.repeats)))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    print(f"command: python benchmarks/import_time.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}, Python "
          f"{platform.python_version()}; date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"median of {args.repeats} fresh processes\n")
    print("| what | import agentrl.envs s | gym.make s | first reset s | -X importtime: imports s "
          "| largest outside agentrl (s) |")
    print("|---|---|---|---|---|---|")
    for what, m in rows:
        name, secs = m["largest"]
        if "make" in m:
            print(f"| `{what}` | {m['import']:.2f} | {m['make']:.2f} | {m['reset']:.2f} | {m['imports']:.2f} | "
                  f"`{name}` ({secs:.2f}) |")
        else:
            print(f"| `{what}` | {m['import']:.2f} | - | - | {m['imports']:.2f} | `{name}` ({secs:.2f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
