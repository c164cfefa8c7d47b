"""KL(adapter || base) on episodes: the shared prompt prefix run once into a KV cache vs two full forwards per episode.

The forgetting metric of the axes experiments (:func:`agentrl.algos.evaluation.kl.kl_to_base`) scores each
adapter's own greedy episodes under the adapter and under the base. ToolUse-v0's episodes open with the same
system prompt and tool descriptions, so :func:`~agentrl.algos.evaluation.kl.kl_to_base` runs that prefix once per
model and each episode's own tokens on top of it, with logits at the reply positions only. The baseline is the
definition: :func:`~agentrl.algos.evaluation.kl.sequence_kl`, two full forwards per episode.

Episodes: the model's own greedy replies to ``--episodes`` ToolUse-v0 test tasks (the main job's budgets: 96
tokens a reply, 4 replies); the adapter: a LoRA whose weights are drawn at random (seeded), so that the KL is not
0. Prints both times, the ratio (baseline / cached) and the largest difference between the two KLs.

    python benchmarks/kl_speed.py                   # 64 episodes
    python benchmarks/kl_speed.py --episodes 8      # CI-sized
    python benchmarks/kl_speed.py --adapter runs/lr_choice/cold_start/adapter \
        --episodes-file runs/lr_choice/evals/cold_start/train-greedy.jsonl   # a trained adapter, its own episodes

Never asserts.
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--adapter", help="a trained LoRA adapter folder instead of random LoRA weights")
    ap.add_argument("--episodes-file", help="stored episodes (JSONL trajectories) instead of sampling new ones")
    args = ap.parse_args(argv)

    import torch

    from agentrl.algos.evaluation.kl import kl_to_base, sequence_kl
    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import apply_lora, load_adapter
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.rollout.collector import CollectorConfig, collect
    from agentrl.algos.rollout.trajectory import load_trajectories, shared_prefix_len
    from agentrl.envs.tool_use.env import ToolUseEnv

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    if args.episodes_file:
        episodes = load_trajectories(args.episodes_file)[: args.episodes]
    else:
        policy = HFPolicy(model, tokenizer)
        episodes = collect("AgentRL/ToolUse-v0", policy, ToolUseEnv().test_tasks(args.episodes, seed=0), 1,
                           CollectorConfig(max_turns=4, max_new_tokens=96, temperature=0.0))
        policy.close()
    if args.adapter:
        model = load_adapter(model, args.adapter)
    else:
        model = apply_lora(model)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=generator).to(p.dtype) * 0.01)
    model.eval()

    t0 = time.perf_counter()
    pairs = [sequence_kl(model, t.token_ids, t.loss_mask) for t in episodes]
    baseline = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = kl_to_base(model, episodes)
    cached = time.perf_counter() - t0

    tokens = sum(len(t.token_ids) for t in episodes)
    prefix = shared_prefix_len([t.token_ids for t in episodes])
    by_definition = sum(s for s, _ in pairs) / sum(n for _, n in pairs)
    worst = max(abs(a - s / n) for a, (s, n) in zip(report.per_episode, [p for p in pairs if p[1]], strict=True))
    source = args.episodes_file or "ToolUse-v0 test tasks, greedy"
    weights = args.adapter or "random LoRA weights"
    print(f"{len(episodes)} episodes ({source}; adapter: {weights}; {tokens} tokens, {report.tokens} reply tokens, "
          f"shared prefix {prefix} tokens), {args.model} in {next(model.parameters()).dtype}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'':44s} {'seconds':>8s} {'KL/token':>10s}")
    print(f"{'two full forwards per episode (baseline)':44s} {baseline:8.2f} {by_definition:10.6f}")
    print(f"{'shared prefix cached, reply logits only':44s} {cached:8.2f} {report.token_mean:10.6f}")
    print(f"ratio baseline / cached: {baseline / cached:.2f}x; largest per-episode KL difference {worst:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
