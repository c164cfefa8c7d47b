"""Sandbox latency and throughput: the isolated warm-worker sandbox vs a plain subprocess, in the same run.

    python benchmarks/sandbox_latency.py [--n 40] [--compute-n 6] [--isolation bwrap]

For each snippet — ``print(1)``, ``import numpy`` (if installed) and a ~0.5 s compute loop — it runs the
snippet ``n`` times through :class:`agentrl.envs.sandbox.Sandbox` and ``n`` times as a plain, unisolated
``python -c`` of the same interpreter (``subprocess.run``), and prints p50/p95 latency of each and the ratio
(sandbox / plain; below 1 means the sandbox is faster). Then the sandbox's throughput with 1, 2 and 4
executions in flight (``print(1)`` and the compute snippet). Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from agentrl.envs import Sandbox

COMPUTE = "s = 0\nfor i in range(N):\n    s += i * i\nprint(s % 7)"


def calibrate_compute(target_s: float = 0.5) -> str:
    """The compute snippet with N chosen so it takes about ``target_s`` in this interpreter."""
    n = 200_000
    while True:
        t = time.perf_counter()
        exec(compile(COMPUTE.replace("N", str(n)), "<c>", "exec"), {"print": lambda *a: None})
        dt = time.perf_counter() - t
        if dt > 0.05:
            return COMPUTE.replace("N", str(int(n * target_s / dt)))
        n *= 4


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def time_plain(code: str, n: int) -> list[float]:
    out = []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for _ in range(n):
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env)
        out.append(time.perf_counter() - t)
        assert p.returncode == 0, p.stderr
    return out


def time_sandbox(sb: Sandbox, code: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        r = sb.run(code, timeout=30)
        if r.status != "ok":
            raise RuntimeError(f"sandbox run failed: {r}")
        out.append(r.latency_s)
    return out


def throughput(sb: Sandbox, code: str, concurrency: int, total: int) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda _: sb.run(code, timeout=30), range(total)))
    dt = time.perf_counter() - t
    assert all(r.ok for r in results)
    return total / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="runs per snippet for the fast snippets")
    ap.add_argument("--compute-n", type=int, default=6, help="runs of the ~0.5 s compute snippet")
    ap.add_argument("--isolation", default="bwrap", choices=["bwrap", "none"])
    args = ap.parse_args()

    compute = calibrate_compute()
    snippets = [("print(1)", "print(1)", args.n)]
    if importlib.util.find_spec("numpy"):
        snippets.append(("import numpy", "import numpy; print(numpy.__version__)", args.n))
    if importlib.util.find_spec("sympy"):
        snippets.append(("import sympy", "import sympy; print(sympy.__version__)", max(5, args.n // 4)))
    snippets.append(("compute ~0.5 s", compute, args.compute_n))

    print(f"python {sys.version.split()[0]} at {sys.executable}; {os.cpu_count()} CPUs; isolation={args.isolation}")
    with Sandbox(isolation=args.isolation, max_concurrency=4) as sb:
        t = time.perf_counter()
        preloaded = sb.warm_up()
        print(f"warm-up of 4 workers: {time.perf_counter() - t:.2f} s (preloaded: {', '.join(preloaded) or '-'})\n")
        print(f"{'snippet':<16}{'n':>4}  {'sandbox p50':>12}{'p95':>9}  {'plain p50':>10}{'p95':>9}  {'ratio p50':>9}")
        for label, code, n in snippets:
            time_sandbox(sb, code, 2)  # page in
            s = time_sandbox(sb, code, n)
            p = time_plain(code, n)
            print(f"{label:<16}{n:>4}  {pct(s, 50) * 1e3:>10.1f}ms{pct(s, 95) * 1e3:>7.1f}ms  "
                  f"{pct(p, 50) * 1e3:>8.1f}ms{pct(p, 95) * 1e3:>7.1f}ms  {pct(s, 50) / pct(p, 50):>9.2f}")
        print(f"\n{'throughput':<16}{'in flight':>10}  {'print(1) /s':>12}  {'compute /s':>11}")
        for c in (1, 2, 4):
            fast = throughput(sb, "print(1)", c, max(40, args.n))
            slow = throughput(sb, compute, c, max(4, 2 * c))
            print(f"{'':<16}{c:>10}  {fast:>12.1f}  {slow:>11.2f}")
        st = sb.stats()
        print(f"\nsandbox stats (all calls): calls={st['calls']} ok={st['ok']} "
              f"timeouts={st['timeouts']} worker_starts={st['worker_starts']}")


if __name__ == "__main__":
    main()
