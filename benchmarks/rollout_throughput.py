"""Rollout throughput: our collector against the naive way, in the same run, on multi-turn ToolUse-v0 episodes.

Three ways to roll out the same tasks (``--tasks`` x ``--group-size`` concurrent trajectories):

* ``collector``          — :func:`agentrl.algos.rollout.collector.collect` with :class:`HFPolicy`: one batch for all live
  trajectories, the group prompt prefilled once, each trajectory's KV cache kept across turns;
* ``collector, no reuse`` — the same with ``reuse_cache=False`` (every turn re-encodes its whole prompt, still
  batched);
* ``naive``              — one ``model.generate`` per trajectory per turn with the whole context re-encoded (the
  from-scratch loop of ``seeds/000`` and ToolBrain), driven by the same collector so only generation differs.

An untrained 135M model rarely writes a valid tool call, so ToolUse-v0 would end most episodes after one reply.
To measure *multi-turn* rollout the env here is ToolUse-v0 with one change: an invalid reply gets an error
observation and the episode continues (up to ``--max-turns``); prompts, tools and observations are the real ones.

    python benchmarks/rollout_throughput.py            # default model (smollm2-135m), bf16, 16 trajectories
    python benchmarks/rollout_throughput.py --quick    # CI-sized: a tiny random model, 4 trajectories

Prints tokens/s (sampled tokens / wall time) for each and the ratios; never asserts.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from agentrl.algos.policy import GenerationResult, HFPolicy, Policy
from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.envs.tool_use import ToolUseEnv, make_tasks


class KeepGoingToolUse(ToolUseEnv):
    """ToolUse-v0 where an invalid reply is answered with an error and the episode goes on (benchmark only)."""

    def _step(self, action):
        parsed = self.parser.parse(action if isinstance(action, str) else str(action))
        if parsed.kind != "invalid":
            return super()._step(action)
        self.metrics.turns += 1
        self.metrics.invalid_calls += 1
        self.messages.append({"role": "assistant", "content": action})
        obs = f"Invalid reply ({parsed.error}). Call one tool, or reply 'Answer: <answer>'."
        self.messages.append({"role": "tool", "content": obs})
        if self.metrics.turns >= self.budgets.max_turns:
            return self._finish(obs, parsed, reward=self.rewards.invalid, termination="budget", truncated=True,
                                obs_role="tool")
        return obs, 0.0, False, False, self._info(parsed, "tool")


class NaiveGeneratePolicy(Policy):
    """One ``model.generate`` call per request, whole prompt re-encoded, nothing kept between calls."""

    def __init__(self, model, tokenizer):
        self.model = model
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        import torch

        out = []
        for req in requests:
            ids = torch.tensor([req.prompt_ids], device=self.model.device)
            kwargs = dict(do_sample=sampling.temperature > 0, max_new_tokens=req.max_new_tokens,
                          eos_token_id=list(sampling.stop_token_ids), pad_token_id=self.tokenizer.pad_token_id,
                          output_scores=True, return_dict_in_generate=True)
            if sampling.temperature > 0:
                kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
            if req.seed is not None:
                torch.manual_seed(req.seed)
            with torch.inference_mode():
                gen = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
            new = gen.sequences[0, ids.shape[1]:].tolist()
            lps = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(gen.scores, new, strict=False)]
            finish = "stop" if new and new[-1] in sampling.stop_token_ids else "length"
            out.append(GenerationResult(new, lps, finish))
        return out


def run(name, policy, tasks, group_size, cfg):
    t0 = time.perf_counter()
    trajs = collect(lambda: KeepGoingToolUse(max_turns=cfg.max_turns), policy, tasks, group_size, config=cfg)
    wall = time.perf_counter() - t0
    tokens = sum(t.num_action_tokens for t in trajs)
    turns = sum(len(t.turns) for t in trajs) / len(trajs)
    ends = Counter(t.termination for t in trajs)
    stats = getattr(policy, "stats", {})
    row = {"name": name, "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall, "turns": turns,
           "ends": dict(ends), "prefill": stats.get("prefill_tokens")}
    print(f"{name:<22} {tokens:>7} tok {wall:>8.1f} s {tokens / wall:>9.1f} tok/s  mean turns {turns:.2f}  "
          f"prefilled {row['prefill'] if row['prefill'] is not None else '-':>7}  ends {dict(ends)}", flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="model alias, hub id or path (default: smollm2-135m)")
    ap.add_argument("--dtype", default="auto", help="auto | bf16 | fp32")
    ap.add_argument("--tasks", type=int, default=4, help="tasks (default 4)")
    ap.add_argument("--group-size", type=int, default=4, help="trajectories per task (default 4: 16 in all)")
    ap.add_argument("--max-turns", type=int, default=4, help="assistant turns per episode (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="tokens per reply (default 128)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--skip-naive", action="store_true", help="skip the slow naive baseline")
    ap.add_argument("--quick", action="store_true", help="CI-sized: tiny random model, 2 tasks x 2, 16 tokens")
    args = ap.parse_args(argv)

    import torch

    from agentrl.algos.models import load_model, load_tokenizer, tiny_model

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        tokenizer = load_tokenizer(args.model)
        model = tiny_model(tokenizer)
        args.tasks, args.group_size, args.max_new_tokens, args.max_turns = 2, 2, 16, 2
    else:
        model, tokenizer = load_model(args.model, dtype=args.dtype)
    tasks = make_tasks(args.tasks, "train")
    cfg = CollectorConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, max_total_tokens=4096,
                          temperature=args.temperature, seed=0)
    print(f"model {args.model}{' (tiny random, --quick)' if args.quick else ''} {next(model.parameters()).dtype}, "
          f"{args.tasks} tasks x {args.group_size} = {args.tasks * args.group_size} trajectories, up to "
          f"{args.max_turns} turns x {args.max_new_tokens} tokens, T={args.temperature}, "
          f"torch threads {torch.get_num_threads()}")

    run("warm-up", HFPolicy(model, tokenizer), tasks[:1], 1, CollectorConfig(max_turns=1, max_new_tokens=4))
    ours = run("collector", HFPolicy(model, tokenizer), tasks, args.group_size, cfg)
    no_reuse = run("collector, no reuse", HFPolicy(model, tokenizer), tasks, args.group_size,
                   CollectorConfig(**{**cfg.__dict__, "reuse_cache": False}))
    print(f"cache reuse: {ours['tok_s'] / no_reuse['tok_s']:.2f}x the tokens/s of no reuse")
    if not args.skip_naive:
        naive = run("naive generate", NaiveGeneratePolicy(model, tokenizer), tasks, args.group_size, cfg)
        print(f"collector vs naive: {ours['tok_s'] / naive['tok_s']:.1f}x tokens/s "
              f"(no reuse vs naive: {no_reuse['tok_s'] / naive['tok_s']:.1f}x)")


if __name__ == "__main__":
    main()
