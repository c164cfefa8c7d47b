"""Per-rank memory ceiling of one GRPO update on 1B- and 7B-shaped models: what a GPU holds, beside what the
memory planner predicts.

Each shape is a random-init Llama with the layer sizes of a public model of that size (``1b``: Llama-3.2-1B's,
``7b``: Llama-2-7B's; ``tiny`` for CI), built directly on ``--device`` in ``--dtype``, with the trainer's LoRA
(r=16, every linear layer). For each ``--tokens`` budget it runs one real update (``Trainer.apply_update_rows``
over GRPO rows of ``--row-tokens`` tokens, half prompt, half action; micro-batches of that many tokens; gradient
checkpointing as the planner decides for it) and prints: the peak memory (GPU: ``torch.cuda.max_memory_allocated``;
CPU: peak RSS of the process), the weights' share, the planner's activation estimate
(:func:`~agentrl.algos.training.memory_plan.activation_bytes_per_token` x tokens), the update's time and its
FLOP rate (4 x parameters x tokens, as ``train_vs_trl.py`` counts). A shape or budget that runs out of memory is
reported as such and the next one runs. Needs no network: token ids are random, the tokenizer is only the
trainer's (``--tokenizer-dir``, as for ``gpu_check.py``).

::

    python benchmarks/gpu_memory.py --tokenizer-dir gpu_check_tokenizer                 # 1b and 7b on cuda
    python benchmarks/gpu_memory.py --device cpu --shapes tiny --tokens 512 --dtype fp32  # CI size

Never asserts; exits non-zero only when every measurement failed.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time

#: name -> (hidden, layers, intermediate, heads, kv heads, vocab, tied embeddings)
SHAPES: dict[str, tuple[int, int, int, int, int, int, bool]] = {
    "tiny": (64, 2, 128, 4, 2, 49152, True),
    "1b": (2048, 16, 8192, 32, 8, 128256, True),
    "7b": (4096, 32, 11008, 32, 32, 32000, False),
}


def build(shape: str, device: str, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, inter, heads, kv, vocab, tied = SHAPES[shape]
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=8192,
                      tie_word_embeddings=tied, torch_dtype=dtype)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    return model


def measure(shape: str, tokens: int, args, tok) -> dict:
    import torch

    from agentrl.algos.evaluation.process_memory import process_memory
    from agentrl.algos.models import resolve_dtype
    from agentrl.algos.models.lora import LoRAConfig, apply_lora
    from agentrl.algos.rollout.trajectory import Trajectory
    from agentrl.algos.training.config import TrainConfig
    from agentrl.algos.training.memory_plan import activation_bytes_per_token
    from agentrl.algos.training.trainer import Trainer

    cuda = args.device.startswith("cuda")
    dtype = resolve_dtype(args.dtype, args.device)
    row: dict = {"shape": shape, "tokens": tokens}
    model = trainer = None
    try:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model = build(shape, args.device, dtype)
        n_params = sum(p.numel() for p in model.parameters())
        row["params_m"] = n_params / 1e6
        row["weights_gib"] = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
        lora = LoRAConfig(r=16, alpha=32, target_modules="all-linear")
        model = apply_lora(model, lora)
        with tempfile.TemporaryDirectory() as out:
            cfg = TrainConfig(algo="grpo", out=out, lr=1e-5, tasks_per_step=1, group_size=2, lora=lora,
                              progress=False, report_to=["none"], seed=0, device=args.device, dtype=args.dtype,
                              micro_batch_tokens=tokens, gradient_checkpointing="auto",
                              memory_budget_gb=args.memory_budget_gb)
            trainer = Trainer(cfg, model=model, tokenizer=tok)
            row["checkpointing"] = bool(trainer.checkpointing)
            row["planned_act_gib"] = activation_bytes_per_token(model, row["checkpointing"]) * tokens / 2**30
            n_rows = max(2, tokens // args.row_tokens)
            half = args.row_tokens // 2
            gen = torch.Generator().manual_seed(0)
            trajs = []
            for i in range(n_rows):
                ids = torch.randint(0, len(tok), (args.row_tokens,), generator=gen).tolist()
                trajs.append(Trajectory(token_ids=ids, loss_mask=[0] * half + [1] * (args.row_tokens - half),
                                        logprobs=[0.0] * half + [-2.0] * (args.row_tokens - half), prompt_len=half,
                                        reward=float(i % 2), group_id=i // 2, task={}))
            units, _ = trainer.algo.prepare(trajs)
            t = time.perf_counter()
            trainer.apply_update_rows(units, 1.0)
            if cuda:
                torch.cuda.synchronize()
            row["seconds"] = time.perf_counter() - t
            row["tokens_run"] = n_rows * args.row_tokens
            row["tflops"] = 4 * n_params * row["tokens_run"] / row["seconds"] / 1e12
        row["peak_gib"] = (torch.cuda.max_memory_allocated() / 2**30 if cuda
                           else process_memory().get("perf/peak_rss_gib", float("nan")))
        row["status"] = "ok"
    except torch.OutOfMemoryError:
        row["status"] = "out of memory"
    except Exception as e:  # reported in the table; the next measurement runs
        row["status"] = f"FAILED: {type(e).__name__}: {str(e)[:120]}"
    finally:
        del model, trainer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--shapes", default="1b,7b", help=f"comma-separated, of {sorted(SHAPES)} (default 1b,7b)")
    ap.add_argument("--tokens", default="4096,16384,65536", help="micro-batch token budgets (default 4096,16384,65536)")
    ap.add_argument("--row-tokens", type=int, default=1024, help="tokens per trajectory (default 1024)")
    ap.add_argument("--memory-budget-gb", type=float, default=16.0,
                    help="the planner's activation budget, which decides checkpointing (default 16)")
    ap.add_argument("--tokenizer-dir", help="the SmolLM2 tokenizer as a folder (gpu_check.py --save-tokenizer)")
    args = ap.parse_args(argv)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        ap.error(f"--shapes: unknown {unknown}; choose from {sorted(SHAPES)}")
    try:
        budgets = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        ap.error(f"--tokens must be comma-separated integers, got {args.tokens!r}")
    from gpu_check import load_check_tokenizer, versions

    tok = load_check_tokenizer(args.tokenizer_dir)
    print(versions())
    rows = [measure(s, t, args, tok) for s in shapes for t in budgets]
    print(f"\nOne GRPO update per row: LoRA r=16 all-linear, {args.dtype}, rows of {args.row_tokens} tokens "
          f"(half action), micro-batch = the token budget, checkpointing as the planner decides\n")
    print("| shape | params (M) | tokens | checkpointing | peak memory (GiB) | weights (GiB) | planned activations "
          "(GiB) | update s | TFLOP/s | status |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---|")
    def num(r: dict, key: str, fmt: str) -> str:
        return format(r[key], fmt) if key in r else "-"

    for r in rows:
        print(f"| {r['shape']} | {num(r, 'params_m', '.0f')} | {r['tokens']} | {r.get('checkpointing', '-')} | "
              f"{num(r, 'peak_gib', '.2f')} | {num(r, 'weights_gib', '.2f')} | {num(r, 'planned_act_gib', '.2f')} | "
              f"{num(r, 'seconds', '.2f')} | {num(r, 'tflops', '.1f')} | {r['status']} |")
    return 0 if any(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
