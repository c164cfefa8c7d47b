"""Where does the main job's cold start sit against the edge of competence? Pass rate and signal per candidate
family, on a train-split sample, for choosing the GRPO mix of the main job and of the EDGE experiment (issue 59).

GRPO learns only from groups whose rewards differ (docs/sampler.md). A family the cold start always solves, or
never does, gives it nothing. This script rolls out ``G`` samples (temperature 1, the main job's GRPO rollout
settings: its collector, 4 turns of at most 96 tokens) on ``N`` tasks of the **train split** of each candidate and
reports, per candidate: the pass rate (the episodes' binary ``correct``, as the task sampler counts a success),
the share of groups with signal (rewards not all equal: the sampler's own test, ``SignalSampler.observe``), and
whether the pass rate sits in the 10-90 % band. Candidates (``--candidates`` picks some by name):

* ``default``: each of the nine default families (``stock_total`` among them);
* ``axis:<axis>``: each family of the four generalisation axes, drawn from the axis's train split (even indices;
  the committed held-out sets hold test tasks, odd indices);
* ``procedural``: the four procedural families (each task brings its own functions);
* ``dial``: the default mixture with the dial on (``distractors=4``, ``distractors=8``, ``failure_rate=0.2``,
  ``failure_rate=0.5``; envs/tool_use/dial.py).

    python benchmarks/edge_mix.py --train-cold-start --sample-out docs/results/data/edge_mix/sample.jsonl \\
        --out docs/results/data/edge_mix/results.json       # the main job's cold start, trained first
    python benchmarks/edge_mix.py --adapter runs/main/sft/adapter --sample docs/results/data/edge_mix/sample.jsonl
    python benchmarks/edge_mix.py --tasks 2 --candidates stock_total depth   # a quick look at two candidates

``--sample-out`` writes the tasks it used (one JSON line per task: ``candidate``, ``kind``, ``env_kwargs``,
``task``), so the measurement is on a committed train-split sample that ``--sample`` replays. Trailing
``key=value`` arguments change the main job's config (``stages.sft.steps=8``, ``seed=1``) as on
``agentrl main-job``. Prints a markdown table with the command, machine and date; never asserts.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The pass-rate band of a family at the edge of competence (inclusive): GRPO's groups of 8 then hold a success
#: and a failure often enough to learn from.
BAND = (0.10, 0.90)
#: The dial's settings measured as extra candidates, each over the default mixture.
DIAL_SETTINGS: tuple[dict[str, Any], ...] = ({"distractors": 4}, {"distractors": 8}, {"failure_rate": 0.2},
                                              {"failure_rate": 0.5})


@dataclass(frozen=True)
class Candidate:
    """A training-mix candidate: the train-split tasks of ``families`` (None: the default mixture) of ``axis``
    (None: the default generator), played with ``env_kwargs``."""

    name: str
    kind: str
    families: tuple[str, ...] | None = None
    axis: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def tasks(self, n: int) -> list[dict[str, Any]]:
        from agentrl.envs.tool_use.env import make_tasks

        return make_tasks(n, split="train", families=self.families, axis=self.axis)


def candidates() -> list[Candidate]:
    """Every default candidate, in table order (see the module docstring)."""
    from agentrl.envs.tool_use.axes import AXIS_FAMILIES
    from agentrl.envs.tool_use.env import FAMILIES
    from agentrl.envs.tool_use.procedural import FAMILIES as PROCEDURAL

    out = [Candidate(f, "default", (f,)) for f in FAMILIES]
    out += [Candidate(f, f"axis:{axis}", (f,), axis) for axis, fams in AXIS_FAMILIES.items() for f in fams]
    out += [Candidate(f, "procedural", (f,)) for f in PROCEDURAL]
    out += [Candidate(",".join(f"{k}={v}" for k, v in d.items()), "dial", None, None, dict(d)) for d in DIAL_SETTINGS]
    return out


def pick(names: list[str] | None) -> list[Candidate]:
    """The candidates named (a candidate's name, its kind, or an axis name); all when ``names`` is None."""
    every = candidates()
    if not names:
        return every
    chosen = [c for c in every if any(n in (c.name, c.kind, c.kind.removeprefix("axis:")) for n in names)]
    unknown = [n for n in names if not any(n in (c.name, c.kind, c.kind.removeprefix("axis:")) for c in every)]
    if unknown:
        raise SystemExit(f"--candidates: no candidate {unknown}; names: {[c.name for c in every]}, kinds: "
                         f"{sorted({c.kind for c in every})}")
    return chosen


# ---------------------------------------------------------------------------------------------- the sample


def draw_sample(chosen: list[Candidate], n: int) -> list[dict[str, Any]]:
    """``n`` train-split tasks of each candidate, one record each (``candidate``, ``kind``, ``env_kwargs``,
    ``task``)."""
    return [{"candidate": c.name, "kind": c.kind, "env_kwargs": c.env_kwargs, "task": t}
            for c in chosen for t in c.tasks(n)]


def read_sample(path: str | Path) -> list[dict[str, Any]]:
    """The records of a sample file written by ``--sample-out`` (the library's JSONL reader: a bad line raises
    naming the file and line)."""
    from agentrl.envs.datasets import load_jsonl

    return load_jsonl(path, required=("candidate", "kind", "env_kwargs", "task"))


def write_sample(records: list[dict[str, Any]], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")


# ---------------------------------------------------------------------------------------------- the measure


def in_band(pass_rate: float, band: tuple[float, float] = BAND) -> bool:
    """Whether a pass rate sits in the band (bounds included)."""
    return band[0] <= pass_rate <= band[1]


def summarize(name: str, kind: str, env_kwargs: dict[str, Any], trajectories: list) -> dict[str, Any]:
    """One candidate's row from its groups (``group_id``: one per task): pass rate (binary ``correct`` over the
    episodes that did not end in an env error), share of groups with unequal rewards, equal groups all solved /
    all failed, format rate, and whether the pass rate is in :data:`BAND`. The success and signal tests are the
    task sampler's (:class:`~agentrl.algos.training.sampler.SignalSampler`)."""
    from agentrl.algos.training.sampler import SignalSampler

    sampler = SignalSampler()
    seen = sampler.observe(trajectories, step=0)
    episodes = sum(s.rollouts for s in sampler.keys.values())
    passed = sum(s.successes for s in sampler.keys.values())
    groups = len(seen["signal"])
    pass_rate = passed / episodes if episodes else 0.0
    fmt = [t.metrics.get("format_ok", 0.0) for t in trajectories if t.termination != "error"]
    return {"candidate": name, "kind": kind, "env_kwargs": env_kwargs, "tasks": groups, "episodes": episodes,
            "errors": len(trajectories) - episodes, "pass_rate": pass_rate,
            "signal_share": sum(seen["signal"].values()) / groups if groups else 0.0,
            "all_pass_groups": seen["all_pass"], "all_fail_groups": seen["all_fail"],
            "format_rate": sum(fmt) / len(fmt) if fmt else 0.0, "in_band": in_band(pass_rate),
            "by_key": {k: s.successes / s.rollouts for k, s in sorted(sampler.keys.items()) if s.rollouts}}


def measure(env: str, policy, records: list[dict[str, Any]], group_size: int, collector, *,
            progress: bool = False) -> list[dict[str, Any]]:
    """Roll out ``group_size`` samples of every record's task with the library's collector (one ``collect`` per
    distinct ``env_kwargs``, so the policy batches across candidates) and summarize each candidate, in the order
    the candidates first appear in ``records``."""
    from agentrl.algos.rollout.collector import collect

    by_kwargs: dict[str, list[int]] = {}
    for i, rec in enumerate(records):
        by_kwargs.setdefault(json.dumps(rec["env_kwargs"], sort_keys=True), []).append(i)
    trajs_of: dict[int, list] = {}
    for key, idx in by_kwargs.items():
        trajs = collect(env, policy, [records[i]["task"] for i in idx], group_size, collector,
                        env_kwargs=json.loads(key), progress=progress)
        for t in trajs:  # group_id: the task's position in this call
            trajs_of.setdefault(idx[t.group_id], []).append(t)
    rows = []
    for name in dict.fromkeys(r["candidate"] for r in records):
        idx = [i for i, r in enumerate(records) if r["candidate"] == name]
        rows.append(summarize(name, records[idx[0]]["kind"], records[idx[0]]["env_kwargs"],
                              [t for i in idx for t in trajs_of[i]]))
    return rows


def table(result: dict[str, Any]) -> list[str]:
    """The markdown table of a result, its command, machine and date above it."""
    lo, hi = result["band"]
    lines = [f"`{result['command']}`", "", f"{result['date']}; {result['policy']}; {result['group_size']} samples "
             f"per task at temperature {result['collector']['temperature']:g}, at most "
             f"{result['collector']['max_turns']} turns of {result['collector']['max_new_tokens']} tokens; "
             f"{result['seconds']['measure']:.0f} s of rollouts", "", *result["machine"], "",
             f"| candidate | kind | tasks x G | pass rate | groups with signal | all solved / all failed | format | "
             f"in {lo:.0%}-{hi:.0%} |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        lines.append(f"| `{r['candidate']}` | {r['kind']} | {r['tasks']} x {result['group_size']} | "
                     f"{r['pass_rate']:.0%} | {r['signal_share']:.0%} | {r['all_pass_groups']} / "
                     f"{r['all_fail_groups']} | {r['format_rate']:.0%} | {'**yes**' if r['in_band'] else 'no'} |")
    return lines


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", help="key=value changes to the main job's config (stages.sft.steps=8)")
    start = ap.add_mutually_exclusive_group()
    start.add_argument("--adapter", help="the cold start's LoRA adapter folder (e.g. runs/main/sft/adapter)")
    start.add_argument("--train-cold-start", action="store_true",
                       help="train the main job's SFT cold start first, into --work/sft")
    ap.add_argument("--work", default="runs/edge_mix", help="work folder of --train-cold-start")
    ap.add_argument("--model", help="base model (default: the main job's)")
    ap.add_argument("--device", help="device (default: the main job's)")
    ap.add_argument("--dtype", help="dtype (default: the main job's)")
    ap.add_argument("--tasks", type=int, default=8, help="train-split tasks per candidate (N)")
    ap.add_argument("--group-size", type=int, help="samples per task (G; default: the main job's GRPO group)")
    ap.add_argument("--candidates", nargs="+", help="candidate names, kinds (default, procedural, dial) or axes")
    ap.add_argument("--sample", help="replay this sample file (from --sample-out) instead of drawing tasks")
    ap.add_argument("--sample-out", help="write the tasks used here (JSONL, one line per task)")
    ap.add_argument("--out", help="write the result here (JSON)")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args(argv)
    if args.tasks < 1 or (args.group_size is not None and args.group_size < 2):
        ap.error("--tasks must be >= 1 and --group-size >= 2 (a group of one never has signal)")

    from harness.machine import machine

    from agentrl.algos.config import apply_overrides, config_from_dict
    from agentrl.algos.recipes.main_job import MainJobConfig, stage_config

    header = machine()  # the load average and commit the run starts with
    given = {k: v for k, v in (("model", args.model), ("device", args.device), ("dtype", args.dtype)) if v}
    job = config_from_dict(MainJobConfig, apply_overrides({**given, "out": args.work, "progress": args.progress,
                                                           "report_to": ["none"]}, args.overrides))
    rl = stage_config(job, "rl", Path(args.work) / "grpo")
    collector = dataclasses.replace(rl.collector, temperature=1.0)
    group_size = args.group_size or rl.group_size
    records = read_sample(args.sample) if args.sample else draw_sample(pick(args.candidates), args.tasks)
    if args.sample and args.candidates:
        names = {c.name for c in pick(args.candidates)}
        records = [r for r in records if r["candidate"] in names]
    if args.sample_out:
        write_sample(records, args.sample_out)

    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import apply_lora, load_adapter
    from agentrl.algos.policy.hf import HFPolicy

    seconds: dict[str, float] = {}
    model, tokenizer = load_model(job.model, dtype=job.dtype, device=job.device,
                                  attn_implementation=job.attn_implementation)
    if args.adapter:
        model = load_adapter(model, args.adapter)
        policy_label = f"{job.model} + adapter {args.adapter}"
    else:
        model = apply_lora(model, job.lora)  # zero-initialised: the base model until the cold start trains it
        policy_label = f"{job.model} (base model)"
    if args.train_cold_start:
        from agentrl.algos.training.checkpoint import refuse_fresh_start
        from agentrl.algos.training.trainer import Trainer

        sft = stage_config(job, "sft", Path(args.work) / "sft")
        refuse_fresh_start([sft.out], args.work)  # never trains over an earlier cold start: another --work
        t0 = time.perf_counter()
        Trainer(sft, model=model, tokenizer=tokenizer).train()
        seconds["cold_start"] = time.perf_counter() - t0
        policy_label = (f"{job.model} + the main job's cold start ({sft.steps} SFT steps, trained here into "
                        f"{Path(args.work) / 'sft'})")
    model.eval()
    policy = HFPolicy(model, tokenizer, share_weights=rl.policy_shares_weights,
                      max_batch_tokens=rl.policy_max_batch_tokens)
    t0 = time.perf_counter()
    rows = measure(job.env, policy, records, group_size, collector, progress=args.progress)
    seconds["measure"] = time.perf_counter() - t0
    argv_shown = sys.argv[1:] if argv is None else argv
    result = {"command": " ".join(["python benchmarks/edge_mix.py", *argv_shown]),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": header, "policy": policy_label, "env": job.env, "group_size": group_size,
              "collector": {k: getattr(collector, k) for k in ("temperature", "max_turns", "max_new_tokens",
                                                                "max_total_tokens", "seed")},
              "band": list(BAND), "sample": args.sample or args.sample_out, "seconds": seconds, "rows": rows,
              "in_band": [r["candidate"] for r in rows if r["in_band"]]}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print("\n".join(table(result)))
    return result


if __name__ == "__main__":
    main()
