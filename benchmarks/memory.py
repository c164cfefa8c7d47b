"""Peak memory (RSS) of one GRPO training step at 16 x 512 tokens: chunked logprobs vs full logits.

Each variant runs in a fresh subprocess (so one variant's peak cannot hide another's) and reports the process's
peak resident set size (``VmHWM`` from ``/proc/self/status``, falling back to ``ru_maxrss``) after one training
step, and its growth over the RSS measured just before the step (model, LoRA and batch already in memory).

One step: LoRA (r=16, all-linear) on the model, a batch of ``--rows`` x ``--seq`` token ids (distinct random rows,
so no shared prefix helps either side; the first ``--prompt`` tokens of each row are prompt, the rest actions),
per-token log-probabilities, the GRPO loss (:func:`agentrl.algos.objectives.grpo.grpo_loss`, random +-1 advantages), backward
and an AdamW step. The variants differ only in how the log-probabilities are computed:

* ``full logits``     — the naive way, written here: ``model(ids).logits`` (``[B, T, V]``), ``log_softmax`` in fp32,
  gather the sampled tokens;
* ``chunked, all``    — :func:`agentrl.algos.objectives.logprobs.token_logprobs` over every position (LM head on 1,024
  positions at a time, hand-written backward);
* ``chunked, actions`` — the same with ``positions=loss_mask``, as the trainer calls it (the LM head skips the
  prompt).

    python benchmarks/memory.py                 # 16 x 512 tokens, SmolLM2-135M bf16
    python benchmarks/memory.py --quick         # the same shape, without the 'chunked, all' variant

Prints a table (peak RSS, growth during the step, step time) and the ratio to the naive baseline; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

VARIANTS = ("full logits", "chunked, all", "chunked, actions")


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
    ids = torch.randint(0, len(tokenizer), (args.rows, args.seq), generator=gen)
    mask = torch.ones_like(ids)
    loss_mask = torch.zeros_like(ids)
    loss_mask[:, args.prompt:] = 1
    old = torch.zeros(ids.shape, dtype=torch.float32)
    adv = (torch.randint(0, 2, (args.rows, 1), generator=gen).float() * 2 - 1).expand(-1, args.seq)
    weights = loss_mask.float() / loss_mask.sum()
    model.train()
    before = rss_kb("VmRSS")
    t0 = time.perf_counter()
    if args.variant == "full logits":
        lp = naive_logprobs(model, ids, mask)
    else:
        lp = token_logprobs(model, ids, mask, chunk_size=1024,
                            positions=loss_mask if args.variant == "chunked, actions" else None)
    # pi_old := the current policy (detached), as on the first epoch of an on-policy step
    old = lp.detach() * loss_mask
    loss, _ = grpo_loss(lp, old, adv, weights, GRPOConfig(beta=0.0))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step_s = time.perf_counter() - t0
    print(json.dumps({"variant": args.variant, "before_kb": before, "peak_kb": rss_kb("VmHWM"),
                      "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "step_s": step_s,
                      "loss": float(loss)}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="model alias, hub id or path")
    ap.add_argument("--dtype", default="bf16", help="bf16 | fp32 | auto (default bf16)")
    ap.add_argument("--rows", type=int, default=16, help="sequences in the batch (default 16)")
    ap.add_argument("--seq", type=int, default=512, help="tokens per sequence (default 512)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per sequence (default 128)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--quick", action="store_true", help="skip the 'chunked, all' variant")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args(argv)
    if args.variant:
        child(args)
        return
    variants = [v for v in VARIANTS if not (args.quick and v == "chunked, all")]
    print(f"one GRPO step (LoRA r=16 all-linear, backward + AdamW), {args.model} {args.dtype}, "
          f"{args.rows} x {args.seq} tokens ({args.seq - args.prompt} action tokens per row); "
          f"each variant in a fresh process", flush=True)
    results = {}
    for v in variants:
        cmd = [sys.executable, os.path.abspath(__file__), "--variant", v, "--model", args.model, "--dtype", args.dtype,
               "--rows", str(args.rows), "--seq", str(args.seq), "--prompt", str(args.prompt),
               "--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            print(f"  {v}: failed (exit {proc.returncode}): {' / '.join(tail)}", flush=True)
            continue
        results[v] = json.loads(lines[-1])
        r = results[v]
        print(f"  {v}: peak {r['peak_kb'] / 2**20:.2f} GiB, +{(r['peak_kb'] - r['before_kb']) / 2**20:.2f} GiB "
              f"during the step, {r['step_s']:.1f} s", flush=True)
    base = results.get("full logits")
    print()
    print("| logprobs | peak RSS GiB | growth during step GiB | step s | peak / full logits | growth / full logits |")
    print("|---|---:|---:|---:|---:|---:|")
    for v, r in results.items():
        growth = r["peak_kb"] - r["before_kb"]
        ratio = f"{r['peak_kb'] / base['peak_kb']:.2f}x" if base else "–"
        gratio = f"{growth / (base['peak_kb'] - base['before_kb']):.2f}x" if base else "–"
        print(f"| {v} | {r['peak_kb'] / 2**20:.2f} | {growth / 2**20:.2f} | {r['step_s']:.1f} | {ratio} | {gratio} |")


if __name__ == "__main__":
    main()
