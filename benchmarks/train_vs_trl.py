"""GRPO step time and training tokens/s: our trainer against TRL's ``GRPOTrainer``, same run, same work.

Both sides get the same model (the embedded SmolLM2-135M via :func:`agentrl.algos.models.load_model`, bf16
weights), the same LoRA (r=16, alpha=32, every linear layer), the same batch (4 fixed prompts x 4 generations,
exactly 64 completion tokens each: stop tokens are suppressed on both sides so the token counts are equal),
temperature 1.0, beta = 0 (no reference model), one optimizer step per batch, and the same reward (the share of
distinct words in the completion, so every group has reward variance). Single-turn, since that is what both
support.

* **ours** — :class:`~agentrl.algos.policy.HFPolicy` samples the 16 completions in one batch; the trajectories
  go through :meth:`GRPO.prepare` and :meth:`Trainer.update` (the trainer's real update: micro-batches, chunked
  LM-head logprobs over the completion tokens only, shared prompt prefix, clipping, AdamW, and the sampler
  refresh ``policy.update_weights``, which is counted as training time).
* **TRL** — ``trl.GRPOTrainer`` with ``peft_config`` (the same LoRA), ``per_device_train_batch_size=16``,
  ``num_generations=4``, ``max_completion_length=64`` and ``generation_kwargs={"min_new_tokens": 64}``. Its
  generation time is ``_generate_and_score_completions`` (sampling, rewards, advantages); training is the rest
  of the step.

The first step of each side is a warm-up and is left out of the medians. Prints a table with the medians, the
ratio and our training tokens/s (prompt + completion tokens of the batch per second of training, the trainer's
``perf/tokens_per_s``), and each side's training as a share of this machine's matmul ceiling: the update's
FLOPs, about 4 x (the model's parameters) x (tokens trained) — a forward pass (2 per parameter and token) and a
backward pass through the frozen weights to the LoRA factors (2 more; the frozen weights get no gradient, and
attention scores and the LoRA factors' own products are left out, a few percent here) — divided by its time, over
the rate of a square matmul in the same dtype measured in the same run. Goals: our step <= 0.5x TRL's; our
training >= 1,000 tokens/s on 2 cores, bf16; our update >= 50 % of the matmul rate. Never asserts.

    python benchmarks/train_vs_trl.py            # 1 warm-up + 5 measured steps per side
    python benchmarks/train_vs_trl.py --quick    # 1 warm-up + 2 measured steps per side
    python benchmarks/train_vs_trl.py --skip-trl # ours only (TRL is in the `trl` extra)
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import tempfile
import time
import warnings

PROMPTS = [
    "Write a short poem about the sea.",
    "Explain in a few sentences why the sky is blue.",
    "Give three tips for learning a new language.",
    "Describe your ideal weekend.",
]


def matmul_rate(dtype: str, size: int = 2048, repeats: int = 3) -> float:
    """This machine's measured matmul rate in FLOP/s: the best of ``repeats`` ``size``-cube matmuls in ``dtype``
    after one warm-up, on torch's threads."""
    import torch

    from agentrl.algos.models import resolve_dtype

    dt = resolve_dtype(dtype, "cpu")
    a, b = torch.randn(size, size, dtype=dt), torch.randn(size, size, dtype=dt)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * size**3 / best


def update_flops(n_params: int, tokens: float) -> float:
    """FLOPs of one LoRA update over ``tokens`` tokens (see the module docstring): forward plus the backward pass
    through the frozen weights, ``4 * n_params * tokens``."""
    return 4.0 * n_params * tokens


def distinct_word_share(text: str) -> float:
    """The reward of both sides: distinct words / words (0 for an empty completion)."""
    words = text.lower().split()
    return len(set(words)) / len(words) if words else 0.0


def chat_prompts(tokenizer) -> list[str]:
    """The prompts rendered with the model's chat template (one user turn, generation header appended)."""
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True) for p in PROMPTS]


def run_ours(args, lora) -> dict:
    import torch

    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import apply_lora
    from agentrl.algos.policy.base import GenerationRequest, SamplingParams
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.rollout.trajectory import Trajectory
    from agentrl.algos.training.config import TrainConfig
    from agentrl.algos.training.trainer import Trainer

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    model = apply_lora(model, lora)
    policy = HFPolicy(model, tokenizer)
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in chat_prompts(tokenizer)]
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(algo="grpo", out=out, lr=args.lr, tasks_per_step=len(PROMPTS), group_size=args.group_size,
                          lora=lora, progress=False, report_to=["none"], seed=0)
        trainer = Trainer(cfg, model=model, tokenizer=tokenizer, policy=policy)
        refresh = {"s": 0.0}
        inner_refresh = policy.update_weights

        def timed_refresh(source):  # the merged-copy refresh inside Trainer.update, reported separately
            t = time.perf_counter()
            inner_refresh(source)
            refresh["s"] += time.perf_counter() - t

        policy.update_weights = timed_refresh
        sampling = SamplingParams(temperature=1.0, stop_token_ids=())  # no stop: exactly max_new_tokens each
        rows = []
        for step in range(args.steps + 1):
            t0 = time.perf_counter()
            requests = [GenerationRequest(ids, args.completion_tokens, seed=(step * 1000 + i * 10 + j))
                        for i, ids in enumerate(prompt_ids) for j in range(args.group_size)]
            results = policy.generate(requests, sampling)
            t_gen = time.perf_counter() - t0
            trajs = []
            for k, (req, res) in enumerate(zip(requests, results, strict=True)):
                n_p, n_c = len(req.prompt_ids), len(res.token_ids)
                text = tokenizer.decode(res.token_ids, skip_special_tokens=True)
                trajs.append(Trajectory(token_ids=req.prompt_ids + res.token_ids, loss_mask=[0] * n_p + [1] * n_c,
                                        logprobs=[0.0] * n_p + list(res.logprobs), prompt_len=n_p,
                                        reward=distinct_word_share(text), group_id=k // args.group_size, task={}))
            t1 = time.perf_counter()
            refresh["s"] = 0.0
            units, _ = trainer.algo.prepare(trajs)
            m = trainer.apply_update_rows(units, 1.0)
            t_train = time.perf_counter() - t1
            rows.append({"step": time.perf_counter() - t0, "gen": t_gen, "train": t_train, "refresh": refresh["s"],
                         "tokens": m["train/real_tokens"], "completion": sum(t.num_action_tokens for t in trajs),
                         "reward": statistics.mean(t.reward for t in trajs)})
            print(f"  ours step {step}{' (warm-up)' if step == 0 else ''}: {rows[-1]['step']:.2f} s "
                  f"(generation {t_gen:.2f} s, training {t_train:.2f} s of which merged-copy refresh "
                  f"{refresh['s']:.2f} s, "
                  f"{m['train/real_tokens']} tokens, "
                  f"reward {rows[-1]['reward']:.3f})", flush=True)
    del trainer, policy, model
    gc.collect()
    torch.set_grad_enabled(True)
    return summarize(rows[1:])


def run_trl(args, lora) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.algos.models import load_model

    model, tokenizer = load_model(args.model, dtype=args.dtype)  # the loader clears the stale GGUF flag
    prompts = chat_prompts(tokenizer)
    n_steps = args.steps + 1
    # One step = one batch of the 4 prompts; the dataset holds them n_steps times over, in order.
    data = Dataset.from_dict({"prompt": [p for _ in range(n_steps) for p in prompts]})

    def reward(completions, **kwargs):
        return [distinct_word_share(c) for c in completions]

    rows: list[dict] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            rows.append({"t0": time.perf_counter(), "gen": 0.0})

        def on_step_end(self, *a, **k):
            rows[-1]["step"] = time.perf_counter() - rows[-1]["t0"]

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, use_cpu=True, bf16=False, report_to=[], save_strategy="no", logging_steps=1,
            max_steps=n_steps, per_device_train_batch_size=len(PROMPTS) * args.group_size,
            gradient_accumulation_steps=1, num_generations=args.group_size,
            max_completion_length=args.completion_tokens,
            generation_kwargs={"min_new_tokens": args.completion_tokens}, temperature=1.0, beta=0.0,
            learning_rate=args.lr, max_grad_norm=1.0, seed=0, dataloader_num_workers=0, disable_tqdm=True,
            shuffle_dataset=False)
        peft = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                          target_modules=lora.target_modules, task_type="CAUSAL_LM")
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward, args=config,
                              train_dataset=data, peft_config=peft, callbacks=[Timer()])
        inner = trainer._generate_and_score_completions

        def timed(*a, **k):
            t0 = time.perf_counter()
            result = inner(*a, **k)
            rows[-1]["gen"] += time.perf_counter() - t0
            mask = result.get("completion_mask")
            rows[-1]["completion"] = int(mask.sum()) if mask is not None else None
            rows[-1]["prompt"] = int(result["prompt_mask"].sum()) if "prompt_mask" in result else None
            return result

        trainer._generate_and_score_completions = timed
        trainer.train()
    for i, r in enumerate(rows):
        r["train"] = r["step"] - r["gen"]
        r["tokens"] = (r.get("prompt") or 0) + (r.get("completion") or 0)
        print(f"  TRL  step {i}{' (warm-up)' if i == 0 else ''}: {r['step']:.2f} s (generation {r['gen']:.2f} s, "
              f"training {r['train']:.2f} s, {r['tokens']} tokens)", flush=True)
    del trainer, model
    gc.collect()
    torch.set_grad_enabled(True)
    return summarize(rows[1:])


def summarize(rows: list[dict]) -> dict:
    med = {k: statistics.median(r[k] for r in rows) for k in ("step", "gen", "train")}
    med["tokens"] = statistics.median(r["tokens"] for r in rows)
    med["completion"] = statistics.median(r.get("completion") or 0 for r in rows)
    med["train_tok_s"] = med["tokens"] / med["train"] if med["train"] > 0 else float("nan")
    med["refresh"] = statistics.median(r.get("refresh", 0.0) for r in rows)
    med["steps"] = len(rows)
    return med


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="model alias, hub id or path")
    ap.add_argument("--dtype", default="bf16", help="bf16 | fp32 | auto (default bf16, as in the goal)")
    ap.add_argument("--steps", type=int, default=5, help="measured steps per side, after one warm-up (default 5)")
    ap.add_argument("--group-size", type=int, default=4, help="generations per prompt (default 4)")
    ap.add_argument("--completion-tokens", type=int, default=64, help="tokens per completion (default 64)")
    ap.add_argument("--lr", type=float, default=1e-5, help="learning rate of both sides")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--skip-trl", action="store_true", help="measure ours only")
    ap.add_argument("--quick", action="store_true", help="CI-sized: 2 measured steps per side")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps = 2
    import torch

    from agentrl.algos.models.lora import LoRAConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    lora = LoRAConfig(r=16, alpha=32, target_modules="all-linear")
    print(f"GRPO step, {args.model} {args.dtype}, LoRA r={lora.r} all-linear, {len(PROMPTS)} prompts x "
          f"{args.group_size} generations x {args.completion_tokens} tokens, beta=0, torch threads "
          f"{torch.get_num_threads()}; medians over {args.steps} steps after 1 warm-up", flush=True)
    ours = run_ours(args, lora)
    trl = None
    if not args.skip_trl:
        try:
            import trl as _trl  # noqa: F401
        except ImportError:
            print("TRL is not installed (pip install -e '.[trl]'); showing ours only")
        else:
            trl = run_trl(args, lora)

    from agentrl.algos.models import load_model

    n_params = sum(p.numel() for p in load_model(args.model, dtype=args.dtype)[0].parameters())
    rate = matmul_rate(args.dtype)

    def ceiling(r):
        flops = update_flops(n_params, r["tokens"])
        return (f"{flops / 1e12:.2f} TFLOP in {r['train']:.2f} s = {flops / r['train'] / 1e9:.0f} GFLOP/s, "
                f"{flops / r['train'] / rate:.0%} of the measured matmul rate")

    def cells(r):
        return (f"{r['step']:.2f}", f"{r['gen']:.2f}", f"{r['train']:.2f}", f"{r['tokens']:.0f}",
                f"{r['completion']:.0f}", f"{r['train_tok_s']:.0f}")

    print()
    print("| trainer | step s (median) | generation s | training s | tokens trained | completion tokens | "
          "training tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("| agentrl | " + " | ".join(cells(ours)) + " |")
    if trl:
        print("| TRL GRPOTrainer | " + " | ".join(cells(trl)) + " |")
        print(f"| ratio agentrl / TRL | {ours['step'] / trl['step']:.2f}x | {ours['gen'] / trl['gen']:.2f}x | "
              f"{ours['train'] / trl['train']:.2f}x | | | {ours['train_tok_s'] / trl['train_tok_s']:.2f}x |")
    print()
    print(f"our training time includes the merged-copy refresh (LoRA merged into the copy it samples with): median "
          f"{ours['refresh']:.2f} s; TRL samples with the unmerged PEFT model and has no such cost")
    print(f"update vs the matmul ceiling ({args.dtype} {2048}^3 matmul: {rate / 1e9:.0f} GFLOP/s; update FLOPs "
          f"~ 4 x {n_params / 1e6:.1f}M parameters x tokens trained): ours {ceiling(ours)}"
          + (f"; TRL {ceiling(trl)}" if trl else ""))
    print(f"goal: our step <= 0.5x TRL's -> "
          f"{'%.2fx' % (ours['step'] / trl['step']) if trl else 'TRL not measured'}; "
          f"our training >= 1,000 tokens/s -> {ours['train_tok_s']:.0f} tokens/s; "
          f"our update >= 50% of the matmul rate -> "
          f"{update_flops(n_params, ours['tokens']) / ours['train'] / rate:.0%}")


if __name__ == "__main__":
    main()
