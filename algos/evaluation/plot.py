"""PNG figures of a run: training curves from ``metrics.jsonl`` and an evaluation comparison chart.

* :func:`plot_run` writes one PNG per metric group (the name before the first ``/``: ``reward``, ``rollout``,
  ``train``, ``time``, ``env``, …) into ``<run_dir>/plots/``. Each metric gets a panel with the raw curve (thin,
  faint) and a smoothed one (thick); metrics that differ only by a ``_low``/``_high``/``_mean``/``_max``/``_min``
  suffix share a panel (``train/clip_frac_low`` and ``train/clip_frac_high`` → ``train/clip_frac``), and so do
  the per-env curves of a mixture run (``reward/mean@Search-v0`` beside ``reward/mean``, labelled "all"). Evaluation
  summaries found in the run directory (``*.summary.json``, written by
  :func:`~agentrl.algos.evaluation.evaluate.evaluate`) are drawn as ``plots/eval_comparison.png``.
* :func:`plot_eval` draws a grouped bar chart comparing :class:`~agentrl.algos.evaluation.report.EvalReport` rows
  (e.g. base → SFT → RL).
* :func:`plot_stages` draws the main curves (reward, format rate, loss per step) of consecutive training stages
  (the main job's SFT, then GRPO) in one figure, each stage after the one before.

matplotlib runs with the non-interactive Agg backend; nothing opens a window.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.report import EvalReport, load_report
from agentrl.algos.evaluation.run_log import METRICS_FILE, read_metrics

logger = logging.getLogger(__name__)

#: Groups drawn first, in this order; any other group follows alphabetically.
GROUP_ORDER = ("reward", "rollout", "train", "time", "perf", "eval", "env")
#: Panels drawn first within a group (by the name after ``/``, suffix stripped); the rest keep log order.
PANEL_ORDER = ("mean", "correct", "format", "loss", "kl", "entropy", "clip_frac", "ratio", "grad_norm",
               "logprob_gap", "valid_tool_call_rate", "tool_calls", "turns")
#: Panels per figure; a larger group is split over several files (``env.png``, ``env_2.png``, …).
MAX_PANELS = 12
_SHARED_SUFFIX = re.compile(r"_(low|high|mean|max|min)$")
#: Bookkeeping values that are logged but not worth a panel.
_NON_METRIC_KEYS = {"step", "wall_time", "rollout/num_trajectories", "rollout/num_groups", "train/data_position"}


def headless_pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display), imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int) -> Path:
    """Write ``fig`` to ``path`` (its folder made), close it, return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    headless_pyplot().close(fig)
    return path


def smooth(values: Sequence[float], weight: float | None = None) -> list[float]:
    """Debiased exponential moving average (TensorBoard's smoothing).

    ``s_t = w·s_{t-1} + (1-w)·x_t`` divided by ``1 - w^t`` so early points are not pulled towards 0. With
    ``weight=None`` it is chosen from the number of points: none below 5 points, then ``1 - 4/len`` clamped to
    [0.5, 0.8] (a cap that keeps the smoothed curve's lag behind a trend to about ``w/(1-w)`` = 4 steps).
    """
    n = len(values)
    if weight is None:
        weight = 0.0 if n < 5 else min(0.8, max(0.5, 1.0 - 4.0 / n))
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    out, acc = [], 0.0
    for t, x in enumerate(values, 1):
        acc = weight * acc + (1.0 - weight) * x
        out.append(acc / (1.0 - weight**t))
    return out


def _series(records: list[dict[str, Any]]) -> dict[str, tuple[list[int], list[float]]]:
    """metric -> (steps, values), numeric finite values only."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for rec in records:
        for key, v in rec.items():
            if key.partition("@")[0] in _NON_METRIC_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if not math.isfinite(v):
                continue
            steps, vals = out.setdefault(key, ([], []))
            steps.append(int(rec["step"]))
            vals.append(float(v))
    return out


def _group_panels(names: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """group -> panel title -> metric names (in first-seen order)."""
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name in names:
        group = name.split("/", 1)[0] if "/" in name else "other"
        groups[group][_SHARED_SUFFIX.sub("", name.partition("@")[0])].append(name)
    return groups


def _panel_rank(panel: tuple[str, list[str]]) -> int:
    short = panel[0].split("/", 1)[-1]
    return PANEL_ORDER.index(short) if short in PANEL_ORDER else len(PANEL_ORDER)


def _ordered(groups) -> list[str]:
    first = [g for g in GROUP_ORDER if g in groups]
    return first + sorted(g for g in groups if g not in GROUP_ORDER)


def plot_run(run_dir: str | Path, *, smoothing: float | None = None, dpi: int = 110) -> list[Path]:
    """Write training-curve PNGs, one per metric group, and ``eval_comparison.png`` if eval summaries exist.

    Args:
        run_dir: a run directory holding ``metrics.jsonl`` (and optionally ``*.summary.json`` eval reports).
        smoothing: EMA weight in [0, 1) for the thick curves (``None``: chosen from the number of points).
        dpi: resolution of the PNGs.

    Returns:
        The paths written, in ``<run_dir>/plots/``; empty (with a warning) when the directory holds neither
        ``metrics.jsonl`` nor evaluation summaries.

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run directory {run_dir}")
    out_dir = run_dir / "plots"
    reports = find_eval_reports(run_dir)
    if not (run_dir / METRICS_FILE).exists() and not reports:
        logger.warning("nothing to plot in %s: no %s and no *.summary.json", run_dir, METRICS_FILE)
        return []
    written: list[Path] = []
    if (run_dir / METRICS_FILE).exists():
        series = _series(read_metrics(run_dir))
        groups = _group_panels(list(series))
        plt = headless_pyplot()
        for group in _ordered(groups):
            panels = sorted(groups[group].items(), key=_panel_rank)
            for part in range(0, len(panels), MAX_PANELS):
                chunk = panels[part:part + MAX_PANELS]
                suffix = "" if part == 0 else f"_{part // MAX_PANELS + 1}"
                path = out_dir / f"{_safe(group)}{suffix}.png"
                _plot_group(plt, group, chunk, series, path, run_dir.name, smoothing, dpi)
                written.append(path)
    if reports:
        written.append(plot_eval(reports, out_dir / "eval_comparison.png", dpi=dpi))
    return written


def figure_names(records: list[dict[str, Any]]) -> list[str]:
    """The files :func:`plot_run` writes for these metrics records (one per group, ``<group>_2.png`` … when a group
    has more than :data:`MAX_PANELS` panels), without drawing them; the eval chart is not among them."""
    groups = _group_panels(list(_series(records)))
    return [f"{_safe(group)}{'' if part == 0 else f'_{part + 1}'}.png" for group in _ordered(groups)
            for part in range(math.ceil(len(groups[group]) / MAX_PANELS))]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "metrics"


def _plot_group(plt, group, panels, series, path: Path, run_name: str, smoothing, dpi) -> None:
    from matplotlib.ticker import MaxNLocator

    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.4 * nrows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, names) in zip(axes.flat, panels, strict=False):
        for i, name in enumerate(names):
            steps, vals = series[name]
            color = colors[i % len(colors)]
            base, _, env = name.partition("@")  # per-env curves of a mixture share the overall one's panel
            label = env or ("all" if any("@" in n for n in names) else base.rsplit("/", 1)[-1])
            if len(vals) == 1:
                ax.plot(steps, vals, "o", color=color, label=label)
                continue
            ax.plot(steps, vals, color=color, alpha=0.3, linewidth=1.0)
            ax.plot(steps, smooth(vals, smoothing), color=color, linewidth=2.0, label=label)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useOffset=False)
        if len(names) > 1:
            ax.legend(fontsize=8, frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"{run_name} — {group}   (faint: raw, bold: smoothed)", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.4 * nrows)))
    save_figure(fig, path, dpi)


# ---------------------------------------------------------------------------------------------- stages


#: The curves :func:`plot_stages` draws by default: metric -> panel title.
STAGE_METRICS = {"reward/mean": "reward", "reward/format": "format rate", "train/loss": "loss"}


def plot_stages(stages: Sequence[tuple[str, str | Path]], path: str | Path, *, metrics: dict[str, str] | None = None,
                title: str | None = None, smoothing: float | None = None, dpi: int = 110) -> Path | None:
    """One figure of the training curves of consecutive stages, a panel per metric (default
    :data:`STAGE_METRICS`: reward, format rate and loss per step). Each stage's steps follow the previous
    stage's last step, in its own colour, with a dashed line where it begins; a stage that did not log a
    metric (SFT has no reward) is absent from that panel.

    Args:
        stages: ``(label, run directory)`` pairs in the order they ran; a directory without ``metrics.jsonl``
            is skipped.
        path: the PNG to write (parent folders are created).

    Returns:
        ``path``, or ``None`` (nothing written) when no stage logged any of the metrics.
    """
    metrics = dict(metrics or STAGE_METRICS)
    curves: list[tuple[str, int, dict[str, tuple[list[int], list[float]]]]] = []  # (label, offset, series)
    offset = 0
    for label, run_dir in stages:
        if not (Path(run_dir) / METRICS_FILE).exists():
            continue
        series = _series(read_metrics(run_dir))
        curves.append((label, offset, {k: v for k, v in series.items() if k in metrics}))
        offset += max((max(steps) for steps, _ in series.values() if steps), default=0)
    shown = [m for m in metrics if any(m in c for _, _, c in curves)]
    if not shown:
        return None
    plt = headless_pyplot()
    fig, axes = plt.subplots(1, len(shown), figsize=(5.0 * len(shown), 3.6), squeeze=False)
    for ax, metric in zip(axes.flat, shown, strict=True):
        for i, (label, start, series) in enumerate(curves):
            ax.axvline(start, color="0.6", linestyle="--", linewidth=0.8)
            if metric not in series:
                continue
            steps, vals = series[metric]
            xs = [start + s for s in steps]
            color = f"C{i % 10}"
            if len(vals) > 1:
                ax.plot(xs, vals, color=color, alpha=0.3, linewidth=1.0)
            ax.plot(xs, smooth(vals, smoothing), "-o" if len(vals) < 5 else "-", color=color, linewidth=2.0,
                    label=label, markersize=3)
        ax.set_title(metrics[metric], fontsize=11)
        ax.set_xlabel("step (stages one after another)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    fig.suptitle(title or "Training curves   (faint: raw, bold: smoothed)", x=0.01, ha="left", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return save_figure(fig, path, dpi)


# ---------------------------------------------------------------------------------------------- eval chart


def find_eval_reports(run_dir: str | Path) -> list[tuple[str, EvalReport]]:
    """The ``*.summary.json`` evaluation reports under ``run_dir`` (any depth, ``plots/`` excluded), oldest
    first (so base → SFT → RL when evaluated in that order), labelled by file name without ``.summary.json``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    paths = [p for p in run_dir.rglob("*.summary.json") if "plots" not in p.relative_to(run_dir).parts]
    rows = []
    for p in sorted(paths, key=lambda p: (p.stat().st_mtime, p.name)):
        try:
            rows.append((p.name[: -len(".summary.json")], load_report(p)))
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            logger.warning("skipping %s: not an evaluation summary (%s)", p, e)
    return rows


def plot_eval(rows: Sequence[tuple[str, EvalReport | dict[str, Any]]], path: str | Path, *,
              title: str | None = None, dpi: int = 110) -> Path:
    """A grouped bar chart comparing evaluation reports, one colour per row (e.g. base, SFT, RL).

    Top left: Average@N, Pass@N, format rate, valid tool-call rate and Macro-EM (when any report has sources),
    in percent. Top right: mean tool calls and mean turns per episode. Below, when any report has data sources:
    EM per source. Each bar is labelled with its value.

    Args:
        rows: ``(label, report)`` pairs; a report may also be a dict from ``EvalReport.to_dict()``.
        path: the PNG to write (parent folders are created).
        title: the figure title (default: "Evaluation (N = …)").
    """
    if not rows:
        raise ValueError("plot_eval needs at least one (label, report) row")
    rows = [(label, r if isinstance(r, EvalReport) else EvalReport.from_dict(r)) for label, r in rows]
    plt = headless_pyplot()
    sources = sorted({s for _, r in rows for s in r.em_by_source})
    ns = sorted({r.n for _, r in rows})
    n_label = str(ns[0]) if len(ns) == 1 else "N"

    rate_names = [f"Average@{n_label}", f"Pass@{n_label}", "Format", "Valid tool calls"]
    rate_vals = [[r.average_at_n, r.pass_at_n, r.format_rate, r.valid_tool_call_rate] for _, r in rows]
    if sources:
        rate_names.append("Macro-EM")
        for vals, (_, r) in zip(rate_vals, rows, strict=True):
            vals.append(r.macro_em if r.macro_em is not None else math.nan)
    cost_names = ["Tool calls", "Turns"]
    cost_vals = [[r.mean_tool_calls, r.mean_turns] for _, r in rows]

    fig = plt.figure(figsize=(12, 8.5 if sources else 4.8))
    grid = fig.add_gridspec(2 if sources else 1, 3)
    ax_rate = fig.add_subplot(grid[0, :2])
    ax_cost = fig.add_subplot(grid[0, 2])
    labels = [label for label, _ in rows]
    _bars(ax_rate, rate_names, [[100 * v for v in vals] for vals in rate_vals], labels, "{:.1f}")
    ax_rate.set_ylabel("% of episodes / tasks")
    ax_rate.set_ylim(0, 112)
    ax_rate.set_title("Success and format")
    _bars(ax_cost, cost_names, cost_vals, labels, "{:.2f}")
    ax_cost.set_ylabel("per episode")
    ax_cost.set_title("Tool use")
    ymax = max((v for vals in cost_vals for v in vals), default=0.0)
    ax_cost.set_ylim(0, max(1.0, ymax) * 1.18)
    if sources:
        ax_src = fig.add_subplot(grid[1, :])
        src_vals = [[100 * r.em_by_source.get(s, math.nan) for s in sources] for _, r in rows]
        _bars(ax_src, sources, src_vals, labels, "{:.0f}")
        ax_src.set_ylabel("EM (%)")
        ax_src.set_ylim(0, 112)
        ax_src.set_title("Exact match per data source")
    handles, leg_labels = ax_rate.get_legend_handles_labels()
    fig.legend(handles, leg_labels, loc="upper right", ncol=min(len(labels), 4), frameon=False)
    fig.suptitle(title or f"Evaluation (N = {', '.join(map(str, ns))} samples per task)", x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return save_figure(fig, path, dpi)


def _bars(ax, categories: list[str], values: list[list[float]], labels: list[str], fmt: str) -> None:
    """One group of bars per category, one bar per label; ``values[label_index][category_index]``."""
    k = len(labels)
    width = 0.8 / k
    for i, (label, vals) in enumerate(zip(labels, values, strict=True)):
        xs = [c + (i - (k - 1) / 2) * width for c in range(len(categories))]
        bars = ax.bar(xs, [0.0 if math.isnan(v) else v for v in vals], width * 0.95, label=label,
                      color=f"C{i % 10}")
        for bar, v in zip(bars, vals, strict=True):
            text = "–" if math.isnan(v) else fmt.format(v)
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)
    long = max(map(len, categories)) > 12
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=20 if long else 0, ha="right" if long else "center")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
