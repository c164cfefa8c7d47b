"""Soak: servers under sustained load and injected faults (issue 60, part 5). Never a test; bounded in clients and
time; loopback only.

    python benchmarks/soak.py [--target openenv|retriever|sandbox|all] [--clients 8] [--minutes 1] [--faults]

* ``openenv``: ``agentrl-env serve AgentRL/ToolUse-v0 --openenv`` as its own process; ``--clients`` threads, each
  playing episodes (reset, the demonstration's steps) through ``AgentRL/OpenEnv-v0`` for ``--minutes``. With
  ``--faults``, one client in four opens a session, sends a reset and drops its socket mid-request.
* ``retriever``: ``agentrl-env serve-retriever`` (the default Wikipedia BM25 index) as its own process;
  ``--clients`` threads, each posting one question of the Search env's dev split to ``/retrieve`` (topk 3) on a
  fresh connection and checking it gets three documents back. With ``--faults``, one request in four sends half its
  body and drops its socket, and one in ten sends a body that is not JSON and must get HTTP 400.
* ``sandbox``: one :class:`agentrl.envs.Sandbox`, ``--clients`` threads each running ``print(1)``; with
  ``--faults``, every 5 s a run kills its own worker (``os.kill(os.getppid(), 9)``) and every 5 s one fills the
  sandbox's ``/tmp`` (``FILL_TMP``); by time, not one request in N, so that most readings see a warm pool (a
  restarted worker holds a fraction of its memory until its interpreter has started). The start reading comes after
  2 s of runs (every worker started).

For each: requests, errors, p50/p99 latency, and the server's resources (RSS MiB, open files, child processes; from
/proc, the server process and its children), read every ``run/60`` seconds (0.5-5 s), reported three ways: at the
start (before the first request: the old column, which counts warm-up as growth), warm (the median of the readings
from ``--warmup`` to twice ``--warmup`` of the run's time, 10-20 % by default: caches, pools and allocator arenas
filled) and at the end, with the growth from warm to end and the RSS slope over the second half (Theil-Sen: the
median of the pairwise slopes, in MiB a minute). Warm and slope use only the readings with at least the start's
child processes (one taken while a killed worker restarts is left out), and the sandbox's mid-run readings stop at
its pool's own processes (the process each run forks below its worker comes and goes with every request; the idle
start and end read the whole tree, so one left behind shows). Flat (no leak) means growth from warm near 0 and a
slope near 0, and open files and children back where they were. Prints a markdown table with the command, the
machine and the date; injected faults are not timed, and any error of the timed requests after a fault counts. The
sandbox pool runs in this process, so its RSS includes the clients' latency list (8 bytes a request). Not covered:
the managed engine (``--engine managed``: a vLLM server this 2-core machine cannot load under 8 clients; its restart
and SIGTERM paths have tests in tests/algos), a full disk under a trainer's run folder (needs a size-limited mount;
the sandbox's full ``/tmp`` is the only full disk here), and a killed worker of the OpenEnv and retriever servers
(each is one process: killing it is killing the server).
"""

from __future__ import annotations

import argparse
import array
import datetime
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def resources(pid: int, max_depth: int | None = None) -> dict[str, float]:
    """RSS (MiB) of ``pid`` and its descendants (down to ``max_depth`` levels below it), their open files, and the
    number of those descendants."""
    todo, seen = [(pid, 0)], []
    while todo:
        p, depth = todo.pop()
        seen.append(p)
        if max_depth is None or depth < max_depth:
            todo += [(c, depth + 1) for c in _children(p)]
    rss = files = 0
    for p in seen:
        try:
            rss += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            files += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return {"rss_mib": rss / 2**20, "open_files": files, "children": len(seen) - 1}


def hammer(clients: int, seconds: float, work, read=None):
    """``clients`` threads calling ``work(rng)`` until ``seconds`` pass: (latencies of the successes, errors,
    readings), where readings are ``(seconds since the start, read())`` taken by this thread every
    ``seconds / 60`` (0.5-5 s) while the clients run (none without ``read``)."""
    lat, errors, lock = array.array("d"), [0], threading.Lock()
    t_start = time.monotonic()
    end = t_start + seconds

    def loop(k: int) -> None:
        rng = random.Random(k)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            try:
                counted = work(rng) is not False  # False: an injected fault, not a request to time
            except Exception:
                with lock:
                    errors[0] += 1
                continue
            if counted:
                with lock:
                    lat.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    readings, every = [], min(5.0, max(0.5, seconds / 60))
    while read is not None and time.monotonic() < end:
        time.sleep(min(every, max(0.0, end - time.monotonic())))
        readings.append((time.monotonic() - t_start, read()))
    for t in threads:
        t.join()
    return lat, errors[0], readings  # an array of doubles: 8 bytes a request in the process it runs in


def warm_and_slope(readings: list, seconds: float, warmup: float, start: dict) -> tuple[dict | None, float, int]:
    """The warm-up reading: the median of each resource over the readings from ``warmup`` to twice ``warmup`` of
    the run's time (the last reading if none), the RSS slope in MiB a minute over the second half's readings,
    Theil-Sen (the median of the pairwise slopes; nan with fewer than 3), and how many readings were used: those
    with at least the start's child processes (a reading taken while a killed worker restarts is left out)."""
    readings = [(t, r) for t, r in readings if r["children"] >= start["children"]]
    window = [r for t, r in readings if warmup * seconds <= t <= 2 * warmup * seconds] or [r for _, r in readings[-1:]]
    warm = {k: statistics.median(r[k] for r in window) for k in window[0]} if window else None
    half = [(t / 60, r["rss_mib"]) for t, r in readings if t >= seconds / 2]
    pairs = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(half) for x2, y2 in half[i + 1:] if x2 > x1]
    return warm, statistics.median(pairs) if len(half) >= 3 and pairs else float("nan"), len(readings)


def soak_openenv(clients: int, seconds: float, faults: bool) -> dict:
    import gymnasium as gym

    import agentrl.envs
    from agentrl.envs.bridges.openenv import wait_until_serving

    gym.register_envs(agentrl.envs)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "agentrl.envs.cli", "serve", "AgentRL/ToolUse-v0", "--openenv",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_serving(url, server)
        start = resources(server.pid)

        def episode(rng: random.Random) -> None:
            if faults and rng.random() < 0.25:  # a client that vanishes mid-request
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    c.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"seed\":")
                return False
            env = gym.make("AgentRL/OpenEnv-v0", url=url, timeout_s=30)
            try:
                env.reset(seed=rng.randrange(10**6))
                local = env.unwrapped
                for action in gym.make("AgentRL/ToolUse-v0").unwrapped.demo_actions(local.task) or ["Answer: 0"]:
                    *_, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        break
            finally:
                env.close()

        lat, errors, readings = hammer(clients, seconds, episode, lambda: resources(server.pid))
        time.sleep(2)  # sessions closed by the clients wind down
        return {"target": "openenv (ToolUse-v0 episodes)", "lat": lat, "errors": errors, "start": start,
                "readings": readings, "end": resources(server.pid), "alive": server.poll() is None}
    finally:
        server.terminate()
        server.wait(timeout=30)


def soak_retriever(clients: int, seconds: float, faults: bool) -> dict:
    import http.client
    import json

    from agentrl.envs.bridges.openenv import wait_until_serving

    questions = [json.loads(line)["question"] for line in
                 (Path(__file__).resolve().parents[1] / "envs/search/search_dev.jsonl").read_text().splitlines()]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "agentrl.envs.cli", "serve-retriever", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", server, timeout_s=600)  # a cold index builds first
        start = resources(server.pid)
        counts = {"dropped": 0, "bad_json": 0}

        def post(body: bytes) -> tuple[int, dict]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())
            finally:
                conn.close()

        def query(rng: random.Random) -> None:
            roll = rng.random()
            if faults and roll < 0.25:  # a client that vanishes mid-request
                counts["dropped"] += 1
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    c.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"queries\":")
                return False
            if faults and roll < 0.35:  # a broken body: refused, the server goes on
                counts["bad_json"] += 1
                status, _ = post(b"{not json")
                if status != 400:
                    raise RuntimeError(f"a body that is not JSON got HTTP {status}, not 400")
                return False
            status, payload = post(json.dumps({"queries": [rng.choice(questions)], "topk": 3}).encode())
            if status != 200 or len(payload["result"]) != 1 or len(payload["result"][0]) != 3:
                raise RuntimeError(f"HTTP {status}: {str(payload)[:200]}")

        lat, errors, readings = hammer(clients, seconds, query, lambda: resources(server.pid))
        time.sleep(2)  # handler threads of the last connections wind down
        return {"target": f"retriever (one question a request; faults: {counts})", "lat": lat, "errors": errors,
                "start": start, "readings": readings, "end": resources(server.pid), "alive": server.poll() is None}
    finally:
        server.terminate()
        server.wait(timeout=30)


#: Fills the sandbox's 64 MiB ``/tmp`` in 1 MiB writes to files under its 16 MiB file-size limit (a 1 GiB buffer
#: would stop at that limit instead, and its RSS would swamp the readings).
FILL_TMP = ("for i in range(8):\n    with open(f'/tmp/fill{i}', 'wb') as f:\n"
            "        for _ in range(15): f.write(b'0' * (1 << 20))")


def soak_sandbox(clients: int, seconds: float, faults: bool) -> dict:
    from agentrl.envs import Sandbox

    with Sandbox(max_concurrency=min(clients, 4), timeout_s=10) as sb:
        hammer(min(clients, 4), 2.0, lambda rng: sb.run("print(1)"))  # every worker started before the start row
        pid = os.getpid()
        start = resources(pid)
        counts, due, lock = {"killed": 0, "disk": 0}, {"killed": 0.0, "disk": 0.0}, threading.Lock()

        def fault_due(kind: str, every_s: float) -> bool:
            """One fault of ``kind`` every ``every_s`` seconds at most: by time, not by request, so the fault rate
            does not follow the throughput and most readings see a pool whose workers are warm."""
            with lock:
                if not faults or time.monotonic() < due[kind]:
                    return False
                due[kind] = time.monotonic() + every_s
                counts[kind] += 1
                return True

        def run(rng: random.Random) -> None:
            if fault_due("killed", 5.0):
                sb.run("import os; os.kill(os.getppid(), 9)")  # a sandbox_error, then a fresh worker
                return False
            if fault_due("disk", 5.0):
                sb.run(FILL_TMP)  # an error; the next run finds /tmp wiped
                return False
            r = sb.run("print(1)")
            if r.status != "ok" or r.stdout != "1\n":
                raise RuntimeError(f"{r.status}: {r.stderr[-200:]}")

        # mid-run readings: the pool's own processes (bwrap, bwrap, worker), not the process each run forks below
        # its worker, which comes and goes with every request; start and end (idle) read the whole tree
        lat, errors, readings = hammer(clients, seconds, run, lambda: resources(pid, max_depth=3))
        hammer(min(clients, 4), 2.0, lambda rng: sb.run("print(1)"))  # killed workers restarted, as at the start
        return {"target": f"sandbox (print(1); faults: {counts})", "lat": lat, "errors": errors, "start": start,
                "readings": readings, "end": resources(pid), "alive": True}


TARGETS = {"openenv": soak_openenv, "retriever": soak_retriever, "sandbox": soak_sandbox}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (1-64)")
    ap.add_argument("--minutes", type=float, default=1.0, help="per target (at most 60)")
    ap.add_argument("--faults", action="store_true", help="inject faults (see the module docstring)")
    ap.add_argument("--warmup", type=float, default=0.1,
                    help="share of each run before the warm readings begin; they end at twice it (default 0.1)")
    args = ap.parse_args(argv)
    if not 1 <= args.clients <= 64 or not 0 < args.minutes <= 60 or not 0 <= args.warmup < 0.5:
        ap.error("--clients must be 1-64, --minutes in (0, 60] and --warmup in [0, 0.5)")
    targets = list(TARGETS) if args.target == "all" else [args.target]
    seconds = 60 * args.minutes
    rows = [TARGETS[t](args.clients, seconds, args.faults) for t in targets]
    print(f"command: python benchmarks/soak.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; "
          f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"readings every {min(5.0, max(0.5, seconds / 60)):g} s; warm: the median of the readings from "
          f"{args.warmup * seconds:.0f} s to {2 * args.warmup * seconds:.0f} s of {seconds:.0f} s "
          f"({100 * args.warmup:g}-{200 * args.warmup:g}% of the run), growth from there to the end; slope: "
          "Theil-Sen (the median of pairwise slopes) over the readings of the second half; readings with fewer "
          "child processes than at the start (a killed worker restarting) are left out; the sandbox's mid-run "
          "readings leave out the process each run forks below its worker\n")
    print("| target | requests | errors | p50 ms | p99 ms | RSS MiB start → end | RSS MiB warm → end (growth) | "
          "RSS MiB/min, 2nd half | open files start → warm → end | children start → warm → end | readings used | "
          "alive |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = sorted(r["lat"]) or [float("nan")]
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        s, e = r["start"], r["end"]
        w, slope, used = warm_and_slope(r["readings"], seconds, args.warmup, s)
        w = w or s
        print(f"| {r['target']} | {len(r['lat'])} | {r['errors']} | {1000 * statistics.median(lat):.1f} | "
              f"{1000 * p99:.1f} | {s['rss_mib']:.0f} → {e['rss_mib']:.0f} | {w['rss_mib']:.1f} → {e['rss_mib']:.1f} "
              f"({e['rss_mib'] - w['rss_mib']:+.1f}) | {slope:+.2f} | {s['open_files']} → {w['open_files']:g} → "
              f"{e['open_files']} | {s['children']} → {w['children']:g} → {e['children']} | "
              f"{used}/{len(r['readings'])} | {r['alive']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
