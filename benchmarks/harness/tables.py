"""Pieces every results page shares: table cells, the commit line, verdicts, the per-family signal table of an
RL stage, the rates the results table does not show and an engine run's step-by-step training table."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness.data import grpo_metrics
from harness.figures import plot_engine_training


def cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def commit_text(run: dict[str, Any]) -> str:
    commit = run.get("commit")
    if not commit:
        return "commit not recorded"
    return (f"commit `{commit[:10]}`" + (" (uncommitted changes)" if run.get("dirty") else "")
            + (f", recorded {run['commit_recorded']}" if run.get("commit_recorded") else ""))


def verdict(c) -> str:
    """A comparison's verdict cell: *tie* where the tie rule holds (``harness.data.TIE_RULE``), none for rows from
    runs with other cold starts, else met/missed, whether the interval decides it and the one seed that carries it
    (``carried_by``), if one does."""
    if not getattr(c, "comparable", True):
        return "no verdict (the cold starts differ)"
    if getattr(c, "tie", False):
        return f"**tie** ({c.better} vs {c.worse} tasks, p = {c.p:.2g})"
    carried = f", carried by {c.carried_by} alone" if getattr(c, "carried_by", "") else ""
    return f"**{c.verdict}**{' (decided)' if c.decided else ' (not decided)'}{carried}"


def seed_spread(spread: tuple[list[float], list[float]] | None) -> str:
    """The seed-spread cell: each row's standard deviation over its seeds (points), or why there is none."""
    if spread is None:
        return "–"
    parts = [f"{100 * statistics.stdev(s):.1f}" if len(s) >= 2 else "1 seed" for s in spread]
    return f"A {parts[0]}, B {parts[1]}"


def extra_table(rows) -> str:
    """Rates the main table does not show: tool use, valid calls, self-correction, reward, truncation."""
    has_sc = any("self_correction" in r.env_metrics for _, r in rows)
    head = (["Model", "Tool use", "Valid tool calls", "Mean reward", "Truncated"]
            + (["Self-correction"] if has_sc else []))
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for label, r in rows:
        cells = [label, f"{100 * r.tool_use_rate:.1f}%", f"{100 * r.valid_tool_call_rate:.1f}%",
                 f"{r.mean_reward:+.3f}", f"{100 * r.truncated_rate:.1f}%"]
        if has_sc:
            cells.append(f"{100 * r.env_metrics.get('self_correction', 0.0):.1f}%")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The GRPO metrics an engine run's training table shows per step: (metrics key, column title, format).
ENGINE_COLUMNS = (("reward/mean", "reward (this run)", "{:.3f}"), ("train/logprob_gap", "logprob gap, mean", "{:.4f}"),
                  ("train/logprob_gap_max", "logprob gap, max", "{:.3f}"),
                  ("train/is_weight_mean", "IS weight, mean", "{:.3f}"),
                  ("train/is_clipped_frac", "IS clipped, fraction", "{:.4f}"), ("time/rollout", "rollout s", "{:.0f}"))


def engine_training(run: dict[str, Any], exp_dir: Path, plain: tuple[dict[str, Any], Path] | None,
                    plot: Path | None = None) -> list[str]:
    """An engine run's GRPO stage beside the in-process plain recipe's, step by step, from both runs'
    committed metrics: the training reward of each, and the engine run's sampler/trainer log-probability gap
    and truncated importance weights (``train/*``). ``plot``: also draw both reward curves and the gap there
    (a PNG)."""
    mine = grpo_metrics(exp_dir)
    if not run.get("engine") or not mine:
        return []
    theirs = {m["step"]: m for m in grpo_metrics(plain[1])} if plain else {}
    head = ["step", *(["reward (in process)"] if theirs else []), *(title for _, title, _ in ENGINE_COLUMNS)]
    lines = [f"GRPO, step by step, sampled by the {run['engine']} server (this run) and in process (the plain "
             "recipe's run, its own cold start): training reward of each step's rollouts; the log-probability "
             "gap |sampler - trainer| per token and the truncated importance weights of this run "
             "([docs/engines.md](../engines.md)):", "", "| " + " | ".join(head) + " |",
             "|" + "---:|" * len(head)]
    for m in mine:
        cells = [str(m["step"])]
        if theirs:
            cells.append(f"{theirs[m['step']]['reward/mean']:.3f}" if m["step"] in theirs else "-")
        cells += [fmt.format(m[key]) if key in m else "-" for key, _, fmt in ENGINE_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    if plot is not None:
        plot_engine_training(run["engine"], mine, theirs, plot)
    return lines + [""]


def signal_table(steps: list[dict[str, Any]], who: str = "GRPO") -> list[str]:
    """Where ``who``'s learning signal was, per task family, from an RL stage's metrics (one record per step)
    and their ``family/*`` counts (:func:`~agentrl.algos.evaluation.metrics.metrics_by_family`): groups
    sampled, those whose rewards differed (the only ones a group-relative advantage learns from), and the
    rollouts' success in the first and last quarter of the steps. Empty for runs logged before those metrics
    existed."""
    families = sorted({k.split("@", 1)[1] for m in steps for k in m if k.startswith("family/groups@")})
    if not families:
        return []
    quarter = max(1, len(steps) // 4)
    lines = [f"Where {who}'s signal was, per task family (training rollouts; a group teaches only when its samples' "
             "rewards differ):", "", "| Family | groups | with a signal | rollout success, first / last quarter |",
             "|---|---:|---:|---|"]

    def success(part: list[dict[str, Any]], family: str) -> str:
        # the mean over the quarter's trajectories of that family (each step's rate weighted by its groups)
        pairs = [(m[f"family/correct@{family}"], m[f"family/groups@{family}"]) for m in part
                 if f"family/groups@{family}" in m]
        n = sum(g for _, g in pairs)
        return f"{sum(c * g for c, g in pairs) / n:.0%}" if n else "-"

    for f in families:
        groups = sum(m.get(f"family/groups@{f}", 0) for m in steps)
        signal = sum(m.get(f"family/signal_groups@{f}", 0) for m in steps)
        lines.append(f"| {f} | {groups:.0f} | {signal:.0f} ({signal / groups:.0%}) | "
                     f"{success(steps[:quarter], f)} / {success(steps[-quarter:], f)} |")
    return lines + [""]
