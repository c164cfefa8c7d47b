"""Issue 59's learning-signal targets, read from the committed metrics of a declared experiment's RL cells.

GRPO learns only from groups whose rewards differ; AXES's cells (no task sampler, a saturated cold start) had signal
in 5-7 % of their groups and changed their weights on 18-26 % of their steps. The targets, per arm (all seeds' steps
pooled), each reported met or missed beside the baseline experiment's same arm:

* **groups with signal >= 50 %** of the groups rolled out (refill rounds included: what the rollouts bought);
* **>= 90 % of steps change the weights** (a step whose groups were all equal makes no update);
* **rollouts per update <= 2x a plain step's** (a plain step: ``tasks_per_step x group_size`` rollouts, no refill).

    python benchmarks/signal_targets.py --experiment lr_edge --baseline axes
    python benchmarks/signal_targets.py --experiment edge --baseline axes

Reads ``docs/results/data/<experiment>/<arm>-s<seed>/{meta.json,metrics.jsonl}`` (what ``benchmarks/axes.py run``
commits); cells without metrics are left out and counted. Prints a markdown table; never asserts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentrl.algos.evaluation.run_log import read_metrics

DATA = Path(__file__).resolve().parent.parent / "docs" / "results" / "data"
RL_ALGOS = ("grpo", "rft", "ppo", "dpo")
JUDGED = ("grpo", "ppo", "dpo")  # the group-relative ones: an all-equal group gives them nothing
SIGNAL, UPDATES, ROLLOUTS = 0.50, 0.90, 2.0  # the targets


def step_counts(row: dict) -> tuple[float, float, float]:
    """``(groups rolled out, groups with signal, rollouts)`` of one step: the task sampler's own counts where it ran
    (refill rounds included), else the step's single batch."""
    if "signal/groups" in row:
        return row["signal/groups"], row["signal/groups_with_signal"], row["signal/rollouts"]
    groups = float(row.get("rollout/num_groups", 0.0))
    return groups, groups * (1.0 - float(row.get("rollout/degenerate_group_rate", 1.0))), \
        float(row.get("rollout/num_trajectories", 0.0))


def plain_rollouts(config: dict) -> float:
    """A plain step's rollouts: tasks per step x group size (today's config keys, else the older main-job ones)."""
    tasks = config.get("tasks_per_step", config.get("rl_tasks_per_step"))
    group = config.get("group_size", config.get("rl_group_size"))
    return float(tasks) * float(group) if tasks and group else float("nan")


def arm_figures(folder: Path) -> dict[str, dict[str, float]]:
    """Per RL arm of an experiment folder: steps, cells, signal share, share of steps with an update, rollouts per
    update and a plain step's rollouts."""
    arms: dict[str, dict[str, float]] = {}
    for meta_path in sorted(folder.glob("*-s[0-9]*/meta.json")):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        metrics = meta_path.parent / "metrics.jsonl"
        if meta.get("algo") not in RL_ALGOS or not metrics.is_file():
            continue
        a = arms.setdefault(meta["arm"], dict.fromkeys(("cells", "steps", "groups", "signal", "rollouts",
                                                        "updated_steps", "updates"), 0.0))
        a["plain"] = plain_rollouts(meta.get("config", {}))
        a["judged"] = float(meta["algo"] in JUDGED)
        a["cells"] += 1
        for row in read_metrics(metrics):  # one record per step (a resumed run's repeated steps merged)
            groups, signal, rollouts = step_counts(row)
            updates = float(row.get("train/optimizer_steps", 0.0))
            a["steps"] += 1
            a["groups"] += groups
            a["signal"] += signal
            a["rollouts"] += rollouts
            a["updates"] += updates
            a["updated_steps"] += updates > 0
    for a in arms.values():
        a["signal_share"] = a["signal"] / a["groups"] if a["groups"] else float("nan")
        a["update_share"] = a["updated_steps"] / a["steps"] if a["steps"] else float("nan")
        a["per_update"] = a["rollouts"] / a["updates"] / a["plain"] if a["updates"] else float("inf")
    return arms


def verdict(ok: bool, judged: float) -> str:
    return ("**met**" if ok else "missed") if judged else "(not judged)"


def table(name: str, arms: dict[str, dict[str, float]], base: dict[str, dict[str, float]], base_name: str
          ) -> list[str]:
    lines = [f"| {name} arm | cells | steps | groups with signal (target >= 50 %) | steps that changed the weights "
             f"(>= 90 %) | rollouts per update, x a plain step's (<= 2x) | {base_name}, same arm: signal / "
             "updated steps / rollouts per update |", "|---|---:|---:|---|---|---|---|"]
    for arm, a in sorted(arms.items()):
        b = base.get(arm) or base.get(arm.split("_lr", 1)[0])
        was = (f"{100 * b['signal_share']:.0f} % / {100 * b['update_share']:.0f} % / {b['per_update']:.2f}x"
               if b else "–")
        lines.append(f"| {arm} | {a['cells']:.0f} | {a['steps']:.0f} | {100 * a['signal_share']:.0f} % "
                     f"{verdict(a['signal_share'] >= SIGNAL, a['judged'])} | {100 * a['update_share']:.0f} % "
                     f"{verdict(a['update_share'] >= UPDATES, a['judged'])} | {a['per_update']:.2f}x "
                     f"{verdict(a['per_update'] <= ROLLOUTS, a['judged'])} | {was} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="lr_edge", help="the declared experiment's data folder name")
    parser.add_argument("--baseline", default="axes", help="the experiment to print beside it (its same arm)")
    parser.add_argument("--data", type=Path, default=DATA, help="the committed data folder")
    args = parser.parse_args(argv)
    folder = args.data / args.experiment
    if not folder.is_dir():
        parser.error(f"--experiment {args.experiment}: no folder {folder} (run benchmarks/axes.py run first)")
    arms = arm_figures(folder)
    print(f"# Learning-signal targets (issue 59): {args.experiment}, beside {args.baseline}\n")
    print(f"`python benchmarks/signal_targets.py --experiment {args.experiment} --baseline {args.baseline}`, from the "
          f"committed metrics under `{folder}`. Rejection sampling (rft) trains on its correct samples whatever the "
          "group's other rewards, so the targets judge only the group-relative algorithms.\n")
    if not arms:
        print("No RL cell with metrics is committed yet: nothing to judge.")
        return 0
    print("\n".join(table(args.experiment, arms, arm_figures(args.data / args.baseline), args.baseline)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
