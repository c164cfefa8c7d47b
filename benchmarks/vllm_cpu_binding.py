"""vLLM's CPU build on a small machine: its own thread binding (``auto``) against the managed engine's (every CPU).

``VLLM_CPU_OMP_THREADS_BIND=auto`` reserves a core for vLLM's scheduler; on a 2-core machine the model then
runs on one. :func:`agentrl.algos.policy.engine_node.cpu_thread_binding` binds every usable CPU on machines with at
most :data:`~agentrl.algos.policy.engine_node.SMALL_MACHINE_CPUS` of them. This script starts the managed server
(:class:`~agentrl.algos.policy.engine.VLLMEngine`, the default model exported to a model folder) once per row and
times ``--requests`` concurrent completions of ``--tokens`` sampled tokens each (``ignore_eos``: every request
samples exactly that many), ``--repeats`` times; the server's start-up is not counted.

Rows: ``auto`` (vLLM's binding: the baseline) and ``all CPUs`` (what the managed engine does here). Tokens/s is
the median over repeats; the ratio is ``all CPUs / auto``. On a machine with more than ``SMALL_MACHINE_CPUS``
CPUs both rows use vLLM's own binding, and the script says so.

    python benchmarks/vllm_cpu_binding.py                      # 32 requests x 200 tokens, 2 repeats
    python benchmarks/vllm_cpu_binding.py --requests 8 --tokens 64 --repeats 1

Needs ``.venv-vllm`` (docs/engines.md). Prints a table; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from unittest import mock


def measure(env: dict[str, str], args) -> tuple[float, str]:
    """Median sampled tokens/s of a server started with ``env`` set, and the binding its log reports."""
    from agentrl.algos.models.export import engine_model_dir
    from agentrl.algos.policy.engine import VLLMEngine

    with mock.patch.dict(os.environ, env):  # the server's environment is this process's, plus the binding
        engine = VLLMEngine(engine_model_dir(args.model), max_lora_rank=None).start()

    def complete(i: int) -> int:
        body = json.dumps({"model": engine.served_model_name, "prompt": f"Story {i}: a long tale of tools.",
                           "max_tokens": args.tokens, "temperature": 0.7, "seed": i, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"{engine.url}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())["usage"]["completion_tokens"]

    rates = []
    try:
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.requests) as pool:
                tokens = sum(pool.map(complete, range(args.requests)))
            rates.append(tokens / (time.perf_counter() - t0))
    finally:
        engine.stop()
    bound = [line.split("core ids=", 1)[1].strip() for line in engine.log_path.read_text().splitlines()
             if "core ids=" in line]
    return statistics.median(rates), (bound[0] if bound else "?")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    from agentrl.algos.policy.engine_node import SMALL_MACHINE_CPUS, cpu_thread_binding

    managed = cpu_thread_binding({})
    if not managed:
        print(f"more than {SMALL_MACHINE_CPUS} usable CPUs: the managed engine keeps vLLM's own binding here")
    base, base_cores = measure({"VLLM_CPU_OMP_THREADS_BIND": "auto"}, args)
    rows = [("auto (vLLM's binding)", base_cores, base, 1.0)]
    if managed:
        rate, cores = measure(managed, args)
        rows.append(("all CPUs (managed engine)", cores, rate, rate / base))
    print(f"\n{args.requests} concurrent requests x {args.tokens} sampled tokens, {args.repeats} repeat(s), "
          f"{os.cpu_count()} CPUs\n")
    print("| binding | cores the worker used | tokens/s | vs auto |\n|---|---|---:|---:|")
    for name, cores, rate, ratio in rows:
        print(f"| {name} | {cores} | {rate:.0f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
