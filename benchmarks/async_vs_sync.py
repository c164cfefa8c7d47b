"""Step time of the synchronous training loop against the asynchronous one (``--async``), same config, same run.

Both arms start from the same weights (the base model plus one short SFT cold start, so that GRPO groups have
different rewards and every step really trains) and run the same GRPO config on ToolUse-v0:

* ``sync``  — :class:`agentrl.algos.training.trainer.Trainer`: rollout, then update, then rollout with the new weights;
* ``async`` — :class:`agentrl.algos.training.async_trainer.AsyncTrainer` (``queue_size=1``, ``max_staleness=1``): a
  producer thread collects batch k+1 while the trainer updates on batch k.

Reported per arm: wall time of ``train()``, the mean step time over the steps after the first (the first async
step cannot overlap anything), the mean rollout and update times, the trainer's waits (for a batch; for the lock
to publish), optimizer steps and the mean reward. The sync arm's ``rollout + train`` over ``max(rollout, train)``
is the best overlap possible; the measured ratio shows how much of it the machine delivered. On a CPU the two
threads share the same cores, so generation and training slow each other down: report what you see.

Threads: ``--threads 1`` (the default) gives each Python thread one torch thread, so on a 2-core machine the
rollout and the update each get a core. With torch's default (one OpenMP thread per core) in the main thread and
the machine shared with other jobs, OpenMP spin-waiting can slow the main thread's matmuls several-fold while a
second Python thread runs at single-thread speed — which would make the async arm look far better than overlap
explains. Compare arms only at equal thread settings.

    python benchmarks/async_vs_sync.py                 # smollm2-135m, 6 steps
    python benchmarks/async_vs_sync.py --quick         # CI-sized: a tiny random model, 4 steps

Never asserts.
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import tempfile
import time
from pathlib import Path


def _mean(xs):
    xs = list(xs)
    return statistics.fmean(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny random model, short run")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps per arm (default 6; quick 4)")
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="per reply (default 64; quick 24)")
    ap.add_argument("--sft-steps", type=int, default=None, help="cold-start SFT steps before both arms "
                                                                 "(default 8; quick 5)")
    ap.add_argument("--adapter", help="start both arms from this adapter instead of running the SFT cold start")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per Python thread (default 1: one core for rollout, one for the update; "
                         "0 leaves torch's default)")
    ap.add_argument("--out", default=None, help="run directories (default: a temporary folder)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import torch

    import agentrl.envs  # noqa: F401
    from agentrl.algos.rollout.collector import CollectorConfig
    from agentrl.algos.training.async_trainer import AsyncTrainer
    from agentrl.algos.training.config import AsyncConfig, TrainConfig
    from agentrl.algos.training.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)  # (a new Python thread gets its own OpenMP team; see the docstring)
    steps = args.steps or (4 if args.quick else 6)
    max_new = args.max_new_tokens or (24 if args.quick else 64)
    sft_steps = args.sft_steps if args.sft_steps is not None else (5 if args.quick else 8)
    out = Path(args.out or tempfile.mkdtemp(prefix="async-vs-sync-"))

    if args.quick:
        # The end-to-end learning test's setup: one fixed ToolUse task answered directly, a tiny random model
        # with an untied, scaled head (so SFT can make its replies valid and GRPO groups get different rewards).
        import json

        from agentrl.algos.models import load_tokenizer, tiny_model
        from agentrl.envs.tool_use.env import INVENTORY, stock

        tokenizer = load_tokenizer()
        base = tiny_model(tokenizer, hidden_size=64, seed=0)
        base.config.tie_word_embeddings = False
        head = base.get_input_embeddings().weight.detach().clone() * 16.0
        stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        head[stop] = torch.randn(head.shape[1], generator=torch.Generator().manual_seed(0)) * head.std()
        base.lm_head.weight = torch.nn.Parameter(head)
        out.mkdir(parents=True, exist_ok=True)
        row = {"id": "t7", "query": "How many units of item t7 are in stock?", "answer": str(INVENTORY["t7"]),
               "calls": []}
        (out / "task.jsonl").write_text(json.dumps(row) + "\n")
        env_kwargs = {"tools": [stock], "dataset": str(out / "task.jsonl"), "max_turns": 3}
        sft_data = {"batch_size": 1, "num_demos": 1}
        model_name = "tiny random Llama (hidden 64, 2 layers), one fixed ToolUse task"
    else:
        from agentrl.algos.models import load_model

        base, tokenizer = load_model(args.model)
        env_kwargs = {"families": ["multiply"]}
        sft_data = {"batch_size": 4, "num_demos": 16}
        model_name = f"{args.model} ({next(base.parameters()).dtype}), ToolUse-v0 multiply family"

    common = dict(env="AgentRL/ToolUse-v0", env_kwargs=env_kwargs, model=args.model, progress=False,
                  report_to=["none"], save_every=0, seed=0)
    adapter = args.adapter
    if adapter is None:
        t0 = time.perf_counter()
        sft = Trainer(TrainConfig(**common, algo="sft", steps=sft_steps, lr=1e-2 if args.quick else 5e-4,
                                  out=str(out / "sft"), algorithm=sft_data),
                      model=copy.deepcopy(base), tokenizer=tokenizer)
        sft.train()
        adapter = str(out / "sft" / "adapter")
        print(f"SFT cold start: {sft_steps} steps in {time.perf_counter() - t0:.1f} s -> {adapter}")

    collector = CollectorConfig(max_new_tokens=max_new, max_turns=3, temperature=1.0)
    rows = []
    for mode in ("sync", "async"):
        cfg = TrainConfig(**common, algo="grpo", steps=steps, tasks_per_step=args.tasks_per_step,
                          group_size=args.group_size, lr=1e-4 if not args.quick else 1e-3, adapter=adapter,
                          out=str(out / mode), collector=collector,
                          asynchronous=AsyncConfig(enabled=mode == "async", queue_size=1, max_staleness=1))
        cls = AsyncTrainer if mode == "async" else Trainer
        trainer = cls(cfg, model=copy.deepcopy(base), tokenizer=tokenizer)
        t0 = time.perf_counter()
        hist = trainer.train()
        wall = time.perf_counter() - t0
        later = hist[1:] or hist
        rows.append({
            "mode": mode, "wall": wall, "step": _mean(h["time/step"] for h in later),
            "rollout": _mean(h["time/rollout"] for h in later), "train": _mean(h["time/train"] for h in later),
            "wait": _mean(h.get("async/wait_s", 0.0) for h in later),
            "publish": _mean(h.get("async/publish_wait_s", 0.0) for h in later),
            "opt": sum(h["train/optimizer_steps"] for h in hist),
            "reward": _mean(h["reward/mean"] for h in hist),
            "stale": _mean(h.get("async/staleness_mean", 0.0) for h in hist),
            "tokens": sum(h.get("rollout/response_length", 0) * h.get("rollout/num_trajectories", 0) for h in hist),
        })

    sync, asyn = rows
    print()
    print(f"model: {model_name}; torch threads: {torch.get_num_threads()}; GRPO {steps} steps x "
          f"{args.tasks_per_step} tasks x {args.group_size} samples, <= {max_new} tokens/reply")
    print()
    print("| loop  | wall s | step s (steps 2..) | rollout s | update s | wait for batch s | wait to publish s "
          "| optimizer steps | mean reward | mean staleness |")
    print("|-------|-------:|-------------------:|----------:|---------:|-----------------:|------------------:"
          "|----------------:|------------:|---------------:|")
    for r in rows:
        print(f"| {r['mode']:<5} | {r['wall']:.1f} | {r['step']:.2f} | {r['rollout']:.2f} | {r['train']:.2f} | "
              f"{r['wait']:.2f} | {r['publish']:.2f} | {r['opt']} | {r['reward']:.3f} | {r['stale']:.2f} |")
    ideal = (sync["rollout"] + sync["train"]) / max(sync["rollout"], sync["train"])
    print()
    print(f"step time sync / async (steps 2..): {sync['step'] / asyn['step']:.2f}x; "
          f"wall sync / async: {sync['wall'] / asyn['wall']:.2f}x")
    print(f"best possible from the sync arm's split (rollout + update) / max(rollout, update): {ideal:.2f}x")
    print(f"async rollout took {asyn['rollout'] / sync['rollout']:.2f}x and update "
          f"{asyn['train'] / sync['train']:.2f}x "
          "their sync times (the threads share the cores; update time includes waiting to publish)")


if __name__ == "__main__":
    main()
