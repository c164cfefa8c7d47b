"""Peak memory (RSS) and time of one GRPO training step at 16 x 512 tokens: how logprobs and activations are kept.

Each variant runs in a fresh subprocess (so one variant's peak cannot hide another's) and reports the process's
peak resident set size (``VmHWM`` from ``/proc/self/status``, falling back to ``ru_maxrss``) after one training
step, and its growth over the RSS measured just before the step (model, LoRA and batch already in memory).

One step: LoRA (r=16, all-linear) on the model, a batch of ``--rows`` x ``--seq`` token ids (distinct random rows,
so no shared prefix helps any variant, unless ``--shared N`` makes every row open with the same ``N`` tokens as a
system prompt with tools does; the first ``--prompt`` tokens of each row are prompt, the rest actions),
per-token log-probabilities, the GRPO loss (random +-1 advantages), backward and an AdamW step. The variants:

* ``full logits``     — the naive way, written here: ``model(ids).logits`` (``[B, T, V]``), ``log_softmax`` in fp32,
  gather the sampled tokens, :func:`agentrl.algos.objectives.grpo.grpo_loss`;
* ``chunked, all``    — :func:`agentrl.algos.objectives.logprobs.token_logprobs` over every position (LM head on 1,024
  positions at a time, hand-written backward), same loss;
* ``chunked, actions`` — the trainer's update (:func:`agentrl.algos.training.update.apply_update`: micro-batches,
  LM head on the action tokens only) with the settings before memory budgets: ``micro_batch_tokens=16384`` (here one
  micro-batch of 8,192 tokens), no checkpointing, ``logprob_chunk=1024``. **Today's configuration**: the ratios
  are taken to it;
* ``chunked, actions, checkpointed`` — the same with gradient checkpointing of the decoder layers and
  TrainConfig's ``logprob_chunk`` (256);
* ``auto micro-batch`` — the same with TrainConfig's defaults: ``micro_batch_tokens`` and
  ``gradient_checkpointing`` resolved from ``memory_budget_gb``
  (:func:`agentrl.algos.training.memory_plan.memory_plan`) and glibc's mmap threshold at
  ``malloc_mmap_threshold_mb`` (as the Trainer sets it), so freed transients leave the RSS. The rows' common
  prefix (``--shared``) runs once for all micro-batches
  (:func:`agentrl.algos.training.update.update_prefix`);
* ``auto micro-batch, prefix per micro-batch`` — the same, but every micro-batch runs the common prefix itself
  (the update before the prefix ran once per update): the baseline of the row above.

The update variants train on old logprobs of 0 (``sampled=False``): the ratio is not 1, which changes the loss
value, not what is computed or kept.

    python benchmarks/memory.py                 # every variant: 16 x 512 tokens, SmolLM2-135M bf16
    python benchmarks/memory.py --quick         # the three trainer-update variants only
    python benchmarks/memory.py --quick --rows 64 --seq 800 --prompt 650 --shared 600   # main-job-like rows
    python benchmarks/memory.py --quick --rows 64 --episodes runs/main/eval/rl.jsonl    # the main job's own rows

``--episodes FILE`` takes the first ``--rows`` saved episodes of an ``agentrl eval`` / main-job run (their token
ids and loss masks: real lengths, real shared prefixes) instead of random rows; ``--seq``/``--prompt``/``--shared``
are then ignored.

Prints a table (peak RSS, growth during the step, step time, micro-batches) and the ratios to today's
configuration; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

TODAY = "chunked, actions"
PER_MICRO_BATCH = "auto micro-batch, prefix per micro-batch"
VARIANTS = ("full logits", "chunked, all", TODAY, "chunked, actions, checkpointed", PER_MICRO_BATCH,
            "auto micro-batch")
QUICK = (TODAY, "chunked, actions, checkpointed", PER_MICRO_BATCH, "auto micro-batch")


def rss_kb(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of this process in kB (``ru_maxrss`` for VmHWM where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def naive_logprobs(model, ids, mask):
    """The baseline: full ``[B, T, V]`` logits, fp32 log-softmax, gather (position 0 gets 0)."""
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([lp.new_zeros(ids.shape[0], 1), lp], dim=1)


def trainer_step(model, opt, seqs: list[list[int]], masks: list[list[int]], adv, variant: str,
                 budget: float | None = None) -> dict:
    """One step through the trainer's update code path; returns the step's settings and train metrics."""
    from agentrl.algos.objectives.batching import TrainRow, token_weights
    from agentrl.algos.objectives.grpo import GRPO, GRPOConfig
    from agentrl.algos.training.config import TrainConfig
    from agentrl.algos.training.memory_plan import (
        memory_plan,
        set_gradient_checkpointing,
        set_malloc_mmap_threshold,
    )
    from agentrl.algos.training.update import apply_update, micro_batches

    cfg = TrainConfig(**({"memory_budget_gb": budget} if budget else {}))
    auto = variant in ("auto micro-batch", PER_MICRO_BATCH)
    trim = auto and cfg.malloc_mmap_threshold_mb is not None
    if variant == PER_MICRO_BATCH:  # the update before the PrefixPass: each micro-batch runs the common prefix
        from agentrl.algos.training import update

        update.update_prefix = lambda batches: 0
    if auto:
        if trim:  # as the Trainer does: the threshold once, the heap trimmed after every micro-batch
            set_malloc_mmap_threshold(cfg.malloc_mmap_threshold_mb)
        ckpt, tokens = memory_plan(model, gradient_checkpointing=cfg.gradient_checkpointing,
                                   micro_batch_tokens=cfg.micro_batch_tokens, memory_budget_gb=cfg.memory_budget_gb)
    else:
        ckpt, tokens = variant.endswith("checkpointed"), 16384
    set_gradient_checkpointing(model, ckpt)
    weights = token_weights(masks)
    rows = [[TrainRow(token_ids=seqs[r], loss_mask=masks[r], old_logprobs=[0.0] * len(seqs[r]),
                     weights=weights[r], advantage=float(adv[r]))] for r in range(len(seqs))]
    chunk = 1024 if variant == TODAY else cfg.logprob_chunk  # today's default was 1024
    out = apply_update(model, opt, GRPO(GRPOConfig(beta=0.0)), rows, lr=1e-5, temperature=1.0, pad_id=0,
                       micro_batch_tokens=tokens, logprob_chunk=chunk, max_grad_norm=1.0, sampled=False, trim=trim)
    return {"checkpointing": ckpt, "micro_batch_tokens": tokens, "logprob_chunk": chunk,
            "micro_batches": len(micro_batches(rows, tokens)), "loss": out["train/loss"]}


def load_episodes(path: str, n: int) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids and loss masks of the first ``n`` episodes saved in ``path`` (JSON lines with ``token_ids`` and
    ``loss_mask``, as ``agentrl eval`` and the main job write them)."""
    seqs, masks = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if len(seqs) == n:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                ids, mask = list(row["token_ids"]), list(row["loss_mask"])
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{lineno}: not an episode with token_ids and loss_mask ({e})") from None
            if len(ids) != len(mask) or len(ids) < 2:
                raise SystemExit(f"{path}:{lineno}: token_ids and loss_mask must have the same length >= 2")
            seqs.append(ids)
            masks.append(mask)
    if len(seqs) < n:
        raise SystemExit(f"--episodes {path}: {len(seqs)} episodes, --rows asks for {n}")
    return seqs, masks


def child(args) -> None:
    import torch

    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import LoRAConfig, apply_lora
    from agentrl.algos.objectives.grpo import GRPOConfig, grpo_loss
    from agentrl.algos.objectives.logprobs import token_logprobs

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, dtype=args.dtype)
    model = apply_lora(model, LoRAConfig(r=16, alpha=32, target_modules="all-linear"))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    gen = torch.Generator().manual_seed(0)
    if args.episodes:
        seqs, masks = load_episodes(args.episodes, args.rows)
    else:
        ids = torch.randint(0, len(tokenizer), (args.rows, args.seq), generator=gen)
        if args.shared:  # every row opens with the same tokens (the update then computes them once)
            if not 0 < args.shared <= args.prompt:
                raise SystemExit(f"--shared must be in 1..--prompt ({args.prompt}), got {args.shared}")
            ids[:, : args.shared] = ids[0, : args.shared]
        seqs = ids.tolist()
        masks = [[0] * args.prompt + [1] * (args.seq - args.prompt) for _ in seqs]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)  # right-padded, as the update collates
    mask = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids)
    for r, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[r, : len(s)] = torch.tensor(s)
        mask[r, : len(s)] = 1
        loss_mask[r, : len(s)] = torch.tensor(m)
    adv = torch.randint(0, 2, (len(seqs),), generator=gen).float() * 2 - 1
    before = rss_kb("VmRSS")
    t0 = time.perf_counter()
    if args.variant in ("full logits", "chunked, all"):
        model.train()
        if args.variant == "full logits":
            lp = naive_logprobs(model, ids, mask)
        else:
            lp = token_logprobs(model, ids, mask, chunk_size=1024)
        # pi_old := the current policy (detached), as on the first epoch of an on-policy step
        old = lp.detach() * loss_mask
        weights = loss_mask.float() / loss_mask.sum()
        loss, _ = grpo_loss(lp, old, adv[:, None].expand(-1, width), weights, GRPOConfig(beta=0.0))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        info = {"checkpointing": False, "micro_batch_tokens": ids.numel(), "micro_batches": 1,
                "loss": float(loss)}
    else:
        info = trainer_step(model, opt, seqs, masks, adv, args.variant, args.budget)
    step_s = time.perf_counter() - t0
    print(json.dumps({"variant": args.variant, "before_kb": before, "peak_kb": rss_kb("VmHWM"),
                      "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "step_s": step_s, **info}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="model alias, hub id or path")
    ap.add_argument("--dtype", default="bf16", help="bf16 | fp32 | auto (default bf16)")
    ap.add_argument("--rows", type=int, default=16, help="sequences in the batch (default 16)")
    ap.add_argument("--seq", type=int, default=512, help="tokens per sequence (default 512)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per sequence (default 128)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--shared", type=int, default=0,
                    help="leading prompt tokens every row shares, like a system prompt with tools (default 0)")
    ap.add_argument("--budget", type=float, help="memory_budget_gb of the auto variant (default TrainConfig's)")
    ap.add_argument("--episodes", help="take the rows from saved episodes (JSON lines with token_ids, loss_mask)")
    ap.add_argument("--quick", action="store_true", help="only the trainer-update variants")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args(argv)
    if args.variant:
        child(args)
        return
    variants = QUICK if args.quick else VARIANTS
    if args.episodes:
        seqs, _ = load_episodes(args.episodes, args.rows)  # checked here too: a bad file fails before any child
        lengths = sorted(len(s) for s in seqs)
        shape = (f"{args.rows} saved episodes of {args.episodes} ({lengths[0]}..{lengths[-1]} tokens, "
                 f"mean {sum(lengths) / len(lengths):.0f})")
    else:
        shape = (f"{args.rows} x {args.seq} tokens ({args.seq - args.prompt} action tokens per row"
                 f"{f', the first {args.shared} shared by every row' if args.shared else ''})")
    print(f"one GRPO step (LoRA r=16 all-linear, backward + AdamW), {args.model} {args.dtype}, {shape}; "
          f"each variant in a fresh process", flush=True)
    results = {}
    for v in variants:
        cmd = [sys.executable, os.path.abspath(__file__), "--variant", v, "--model", args.model, "--dtype", args.dtype,
               "--rows", str(args.rows), "--seq", str(args.seq), "--prompt", str(args.prompt),
               "--threads", str(args.threads), "--shared", str(args.shared),
               *(["--budget", str(args.budget)] if args.budget else []),
               *(["--episodes", args.episodes] if args.episodes else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            print(f"  {v}: failed (exit {proc.returncode}): {' / '.join(tail)}", flush=True)
            continue
        results[v] = json.loads(lines[-1])
        r = results[v]
        print(f"  {v}: peak {r['peak_kb'] / 2**20:.2f} GiB, +{(r['peak_kb'] - r['before_kb']) / 2**20:.2f} GiB "
              f"during the step, {r['step_s']:.1f} s ({r['micro_batches']} micro-batches of <= "
              f"{r['micro_batch_tokens']} tokens, checkpointing {'on' if r['checkpointing'] else 'off'})", flush=True)
    base = results.get(TODAY)
    print()
    print("| variant | checkpointing | micro-batch tokens | micro-batches | peak RSS GiB | growth during step GiB "
          "| step s | peak / today | step time / today |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for v, r in results.items():
        growth = r["peak_kb"] - r["before_kb"]
        ratio = f"{r['peak_kb'] / base['peak_kb']:.2f}x" if base else "–"
        tratio = f"{r['step_s'] / base['step_s']:.2f}x" if base else "–"
        print(f"| {v} | {'on' if r['checkpointing'] else 'off'} | {r['micro_batch_tokens']} | {r['micro_batches']} "
              f"| {r['peak_kb'] / 2**20:.2f} | {growth / 2**20:.2f} | {r['step_s']:.1f} | {ratio} | {tratio} |")
    print(f"\ntoday's configuration: '{TODAY}' (micro_batch_tokens=16384, no checkpointing)")
    once, each = results.get("auto micro-batch"), results.get(PER_MICRO_BATCH)
    if once and each:
        print(f"the common prefix once per update against once per micro-batch (same run): step time "
              f"{once['step_s'] / each['step_s']:.2f}x, peak RSS {once['peak_kb'] / each['peak_kb']:.2f}x")


if __name__ == "__main__":
    main()
