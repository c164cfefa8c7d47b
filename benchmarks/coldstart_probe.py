"""Which cold-start family leaves GRPO something to learn? A probe on the ToolUse-v0 *train* split.

For each candidate family F: a fresh LoRA adapter on the model is trained with the main job's cold start (SFT on
``--demos`` demonstrations of F, ``--steps`` steps of 8, lr ``--lr``); then, for every task family, the script
teacher-forces correct demonstrations of ``--tasks`` train-split tasks and prints ``log P`` of the whole
demonstration (every assistant reply), averaged as ``log mean P`` over the tasks. That probability is the chance
that one temperature-1 rollout reproduces that solution exactly: a lower bound on the chance that a GRPO group
of the family holds a correct answer. Families far below ``log P = -5`` (under 1%) give GRPO groups of 8 almost
no correct sample to learn from.

    python benchmarks/coldstart_probe.py                                   # the main job's candidates
    python benchmarks/coldstart_probe.py --families multiply add_multiply  # a subset
    python benchmarks/coldstart_probe.py --families all add_multiply       # demonstrations of every family

Never touches the test split (held-out tasks are odd indices; these are even ones from ``--start``). Prints one
table row per candidate (its time in a comment); never asserts. docs/results/coldstart_probe.md's candidates
took 48-574 s each on a 2-core CPU without bf16 units (fp32).
"""

from __future__ import annotations

import argparse
import math
import time


def demo_batch(tokenizer, tasks_per_family: int, start: int):
    """Correct demonstrations of ``tasks_per_family`` train tasks of every family, collated; with each row's family."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401 - registers the env ids
    from agentrl.algos.objectives.batching import TrainRow, collate
    from agentrl.algos.rollout.chat import ChatFormat
    from agentrl.algos.rollout.demonstrations import demonstration, render_conversation
    from agentrl.envs.tool_use.env import FAMILIES, make_tasks

    env = gym.make("AgentRL/ToolUse-v0").unwrapped
    fmt = ChatFormat(tokenizer)
    items, families = [], []
    for family in FAMILIES:
        for task in make_tasks(tasks_per_family, split="train", families=[family], start=start):
            demo = demonstration(env, task, fmt)  # the env set up as the collector sets up its envs
            ids, mask = render_conversation(fmt, demo["messages"], demo.get("tools"),
                                            tools_in_prompt=demo["tools_in_prompt"])
            items.append(TrainRow(ids, mask, [0.0] * len(ids), [0.0] * len(ids)))
            families.append(family)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return collate(items, pad), families


def family_logp(model, batch, families) -> dict[str, float]:
    """``log mean_tasks P(demonstration)`` per family (the assistant tokens only)."""
    import torch

    from agentrl.algos.objectives.logprobs import token_logprobs

    with torch.no_grad():
        lp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], positions=batch["loss_mask"])
    per_row = (lp * batch["loss_mask"]).sum(1).tolist()
    out = {}
    for f in dict.fromkeys(families):
        xs = [x for x, g in zip(per_row, families, strict=True) if g == f]
        top = max(xs)
        out[f] = top + math.log(sum(math.exp(x - top) for x in xs) / len(xs))
    return out


def main(argv=None):
    from agentrl.envs.tool_use.env import FAMILIES

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", nargs="+", default=["multiply", "add_multiply", "stock_value", "stock_total"],
                    help="cold-start candidates: ToolUse-v0 family names, several joined by '+' "
                         "(multiply+stock_value: demonstrations of both), or 'all' (every family)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--demos", type=int, default=32, help="distinct demonstrations (the main job: 32)")
    ap.add_argument("--steps", type=int, default=8,
                    help="SFT steps of 8 demonstrations (default 8, the main job's until session 7, so the "
                         "documented probes reproduce; the main job now takes 16)")
    ap.add_argument("--lr", type=float, default=5e-4, help="SFT learning rate (the main job: 5e-4)")
    ap.add_argument("--tasks", type=int, default=4, help="probe tasks per family")
    ap.add_argument("--start", type=int, default=500, help="first train-split task index of the probe")
    args = ap.parse_args(argv)
    candidates = {c: list(FAMILIES) if c == "all" else c.split("+") for c in args.families}
    unknown = {f for fams in candidates.values() for f in fams} - set(FAMILIES)
    if unknown:
        ap.error(f"unknown families {sorted(unknown)}; known: {list(FAMILIES)}")

    import tempfile

    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import LoRAConfig, apply_lora
    from agentrl.algos.objectives.sft import SFTConfig
    from agentrl.algos.training.config import TrainConfig
    from agentrl.algos.training.trainer import Trainer

    fams = list(FAMILIES)
    print(f"log mean P(correct demonstration) per family, {args.tasks} train-split tasks each, after a cold start "
          f"of {args.steps} SFT steps x 8 on {args.demos} demos (lr {args.lr}), model {args.model}\n")
    print("| cold start | " + " | ".join(fams) + " | P(other families) |")
    print("|---|" + "---:|" * (len(fams) + 1))
    batch = families = None
    for cand in ["(none)"] + list(args.families):
        t0 = time.perf_counter()
        model, tokenizer = load_model(args.model)
        model = apply_lora(model, LoRAConfig())
        if batch is None:
            batch, families = demo_batch(tokenizer, args.tasks, args.start)
        if cand != "(none)":
            with tempfile.TemporaryDirectory() as tmp:
                cfg = TrainConfig(env="AgentRL/ToolUse-v0", algo="sft", out=tmp, steps=args.steps, lr=args.lr,
                                  save_every=0, progress=False, env_kwargs={"families": candidates[cand]},
                                  algorithm=SFTConfig(batch_size=8, num_demos=args.demos))
                trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
                for _ in range(args.steps):
                    trainer.step()
        logp = family_logp(model, batch, families)
        others = sum(math.exp(v) for f, v in logp.items() if f not in candidates.get(cand, []))
        print(f"| {cand} | " + " | ".join(f"{logp[f]:.1f}" for f in fams) + f" | {others:.3f} |"
              f"  <!-- {time.perf_counter() - t0:.0f} s -->", flush=True)
    print("\nP(other families): the sum over the families the cold start did not see of exp(log P); the expected "
          "number of exactly-demonstrated correct samples per temperature-1 rollout of each such family, summed.")


if __name__ == "__main__":
    main()
