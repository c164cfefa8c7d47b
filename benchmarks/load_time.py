"""Load time of the default model: a second run (de-quantized weights read from the cache) vs de-quantizing the GGUF.

Each measurement is a fresh Python process (as a new ``agentrl`` run is) that times, in order:

* ``imports`` — ``import torch, transformers`` and :mod:`agentrl.algos.models`;
* ``model code`` — transformers' Llama modelling modules (``LlamaForCausalLM``: transformers imports them lazily,
  on the first model built, and they pull in much of torch: ~3 s on a 2-core CPU);
* ``load_model`` — :func:`~agentrl.algos.models.load_model` of ``--model``: weights and tokenizer, eval mode.

The first two are paid by every run that builds a Llama with transformers, whatever the weights' source; the
cache can only shorten the third.

Rows: ``cache off`` (``AGENTRL_NO_WEIGHT_CACHE=1``: the GGUF is de-quantized, the baseline) and ``cache warm``
(the de-quantized weights read back; one un-timed process fills the cache first). ``--repeats`` processes each;
the median is printed, with the ratio baseline / cached. The cache lives in a temporary ``$AGENTRL_CACHE_DIR`` so
the user's cache is neither read nor written (the GGUF file's hash is memoised there, so the warm rows include
only a stat of the file, as a second run does).

    python benchmarks/load_time.py                 # 3 processes per row
    python benchmarks/load_time.py --repeats 1     # CI-sized

Prints a table; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, transformers  # noqa: E401,F401
from agentrl.algos.models import load_model
t1 = time.perf_counter()
from transformers import LlamaForCausalLM  # noqa: F401 - the lazy import of the modelling code
t2 = time.perf_counter()
model, tokenizer = load_model(sys.argv[1], dtype=sys.argv[2])
t3 = time.perf_counter()
print("RESULT " + json.dumps({"imports": t1 - t0, "model_code": t2 - t1, "load_model": t3 - t2,
                              "dtype": str(model.dtype), "parameters": sum(p.numel() for p in model.parameters())}))
"""


def measure(model: str, dtype: str, cache_dir: str, cache: bool) -> dict:
    """One fresh process: its import and load_model seconds."""
    env = {**os.environ, "AGENTRL_CACHE_DIR": cache_dir, "AGENTRL_NO_WEIGHT_CACHE": "0" if cache else "1",
           "TRANSFORMERS_VERBOSITY": "error"}
    out = subprocess.run([sys.executable, "-c", _CHILD, model, dtype], env=env, capture_output=True, text=True,
                         check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the measuring process failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="model alias or .gguf path (a GGUF: the cache applies)")
    ap.add_argument("--dtype", default="auto", help="auto, bf16 or fp32")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per row (the median is printed)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")

    with tempfile.TemporaryDirectory(prefix="agentrl-load-time-") as cache_dir:
        rows = {"cache off (de-quantize the GGUF)": [measure(args.model, args.dtype, cache_dir, False)
                                                     for _ in range(args.repeats)]}
        measure(args.model, args.dtype, cache_dir, True)  # fills the cache (not timed)
        rows["cache warm (a second run)"] = [measure(args.model, args.dtype, cache_dir, True)
                                             for _ in range(args.repeats)]
    first = next(iter(rows.values()))[0]
    print(f"load_model({args.model!r}, dtype={args.dtype!r}): {first['parameters'] / 1e6:.1f}M parameters in "
          f"{first['dtype']}; medians of {args.repeats} fresh processes each")
    print(f"{'':36s} {'imports':>9s} {'model code':>11s} {'load_model':>11s} {'total':>8s}")
    medians = {}
    for label, ms in rows.items():
        imp, code, load = (statistics.median(m[k] for m in ms) for k in ("imports", "model_code", "load_model"))
        medians[label] = load
        print(f"{label:36s} {imp:8.2f}s {code:10.2f}s {load:10.2f}s {imp + code + load:7.2f}s")
    base, warm = medians.values()
    print(f"load_model: cache warm is {base / warm:.1f}x faster than de-quantizing ({warm:.2f} s vs {base:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
