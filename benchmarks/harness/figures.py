"""The plots the pages draw from committed data (matplotlib, headless)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness.experiments import COMPARE


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display)."""
    from agentrl.algos.evaluation.plot import headless_pyplot

    return headless_pyplot()


def plot_engine_training(engine: str, mine: list[dict[str, Any]], theirs: dict[int, dict[str, Any]],
                          path: Path) -> None:
    """Both runs' training reward per step (left) and the engine run's logprob gap, mean and max (right)."""
    plt = pyplot()
    steps = [m["step"] for m in mine]
    fig, (ax, gap) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax.plot(steps, [m["reward/mean"] for m in mine], marker="o", label=f"{engine} server")
    if theirs:
        ax.plot(sorted(theirs), [theirs[k]["reward/mean"] for k in sorted(theirs)], marker="s", label="in process")
    ax.set(xlabel="GRPO step", ylabel="training reward (mean)", title="reward of each step's rollouts")
    ax.legend()
    for key, marker, label in (("train/logprob_gap", "o", "mean"), ("train/logprob_gap_max", ".", "max")):
        gap.plot(steps, [m.get(key, float("nan")) for m in mine], marker=marker, label=label)
    gap.set(xlabel="GRPO step", ylabel="|log p sampler - log p trainer|", yscale="log",
            title=f"{engine} vs trainer, per token")
    gap.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def compare_plots(summary: dict[str, Any], metrics: Path, dest: Path) -> list[Path]:
    """Held-out success against training wall time (mean over seeds, min..max bars), and rollout reward
    against step (one line per seed, from ``metrics/<algo>-s<seed>.jsonl``); written to ``dest``."""
    from agentrl.algos.evaluation.run_log import read_metrics

    plt = pyplot()
    labels = COMPARE.labels_of(summary)
    dest.mkdir(parents=True, exist_ok=True)
    cold = summary["cold_start"]["average_at_n"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for algo, runs in summary["runs"].items():
        n_points = min(len(r["points"]) for r in runs)
        xs, ys, lo, hi = [0.0], [cold], [0.0], [0.0]
        for i in range(n_points):
            vals = [r["points"][i]["average_at_n"] for r in runs]
            m = statistics.fmean(vals)
            xs.append(statistics.fmean(r["points"][i]["train_seconds"] for r in runs) / 60)
            ys.append(m)
            lo.append(m - min(vals))
            hi.append(max(vals) - m)
        ax.errorbar(xs, [100 * y for y in ys], yerr=[[100 * v for v in lo], [100 * v for v in hi]], marker="o",
                    capsize=3, label=labels[algo])
    ax.axhline(100 * cold, color="grey", linestyle=":", label="cold start")
    ax.set_xlabel("training wall time (min)")
    ax.set_ylabel(f"held-out Average@{summary['eval_n']} (%)")
    ax.set_title(f"{COMPARE.env}: {summary['tasks']} held-out tasks, mean of {len(summary['seeds'])} seeds "
                 "(bars: min..max)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    heldout_png = dest / "heldout_vs_time.png"
    fig.savefig(heldout_png, dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (algo, runs) in enumerate(summary["runs"].items()):
        for j, r in enumerate(runs):
            path = metrics / f"{algo}-s{r['seed']}.jsonl"
            recs = [m for m in read_metrics(path) if "reward/mean" in m] if path.is_file() else []
            if recs:
                ax.plot([m["step"] for m in recs], [m["reward/mean"] for m in recs], color=f"C{i}", alpha=0.8,
                        linestyle=("-", "--", ":", "-.")[j % 4], label=f"{labels[algo]} seed {r['seed']}")
    ax.set_xlabel("step")
    ax.set_ylabel("rollout reward (mean)")
    ax.set_title("rollout reward of the RL algorithms (SFT has no rollouts)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    reward_png = dest / "reward_vs_step.png"
    fig.savefig(reward_png, dpi=110)
    plt.close(fig)
    return [heldout_png, reward_png]
