"""The figures of the results pages, drawn from committed data only (matplotlib, headless).

No figure is committed: the pages link ``<experiment>/<name>.png`` beside them (``docs/results/``), and
:func:`draw_all` draws every one of them from ``docs/results/data/<experiment>/`` (and the speed history from
``benchmarks/speed_history.jsonl``), byte for byte the figures the runs drew (same code, same data). The site's
build draws them into the built site (``docs/_mkdocs/figures.py``); ``python benchmarks/learning.py --figures``
draws them into ``docs/results/`` (ignored by git) to read the pages in a checkout.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.experiments import COMPARE, TEXT_LABELS
from harness.layout import cell, metrics_files

#: A learning run's held-out chart (``learning_exec``'s copy of ``<out>/plots/eval_comparison.png``).
EVAL_CHART = "eval_eval_comparison.png"
#: The text-only pipeline's own chart (PythonMath-v0: ``<out>/text_only/plots/eval_comparison.png``).
TEXT_CHART = "text_only_eval_comparison.png"
#: An engine run's GRPO stage beside the in-process run's (:func:`plot_engine_training`).
ENGINE_CHART = "grpo_engine_vs_in_process.png"
#: The algorithms comparison's two figures (:func:`compare_plots`).
COMPARE_CHARTS = ("heldout_vs_time.png", "reward_vs_step.png")
#: The speed history's figure, relative to ``docs/`` (``harness.suite``'s section of docs/results.md).
SPEED_CHART = "results/speed_history.png"


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


def compare_plots(summary: dict[str, Any], folder: Path, dest: Path) -> list[Path]:
    """Held-out success against training wall time (mean over seeds, min..max bars), and rollout reward
    against step (one line per seed, from ``<algo>-s<seed>/metrics.jsonl`` in the comparison's data
    ``folder``); written to ``dest``."""
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
            path = folder / cell(algo, r["seed"]) / "metrics.jsonl"
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


def _group(key: str) -> str:
    """The figure a metric is drawn in (``plot_run``'s group: the name before the first ``/``)."""
    return key.split("/", 1)[0] if "/" in key else "other"


def stage_figures(metrics: Path, dest: Path, only: set[str] | None = None, stage: str | None = None) -> list[Path]:
    """``agentrl plot``'s curves of one training stage (:func:`~agentrl.algos.evaluation.plot.plot_run`) from its
    committed metrics (``stage``: its name, by default the file's stem; a learning run's from
    :func:`harness.layout.metrics_files`), named as the run's copy named them: ``<dest>/<stage>_<group>.png``
    (``benchmarks/harness/learning_exec.py``'s ``copy_plots``). ``only``: just the groups whose files are among
    these names (a group's figure depends on its own metrics alone: the same bytes)."""
    from agentrl.algos.evaluation.plot import figure_names as stage_names
    from agentrl.algos.evaluation.plot import plot_run
    from agentrl.algos.evaluation.run_log import METRICS_FILE, read_metrics

    stage = stage or metrics.stem
    records = read_metrics(metrics)
    if only is not None:
        keys = {k for r in records for k in r if k != "step"}
        keep = {g for g in {_group(k) for k in keys}
                if {f"{stage}_{n}" for n in stage_names([{k: v for k, v in r.items() if k == "step"
                                                                  or _group(k) == g} for r in records])} & only}
        if not keep:
            return []
        records = [{k: v for k, v in r.items() if k == "step" or _group(k) in keep} for r in records]
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / stage  # plot_run titles each figure with its run folder's name: the stage
        run_dir.mkdir()
        if only is None:
            shutil.copyfile(metrics, run_dir / METRICS_FILE)
        else:
            (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        for png in plot_run(run_dir):
            written.append(Path(shutil.move(png, dest / f"{stage}_{png.name}")))
    return written


def learning_figures(exp_dir: Path, dest: Path, plain_dir: Path | None = None, only: set[str] | None = None
                     ) -> list[Path]:
    """Every figure of a learning run (``exp_dir``: its committed ``learning.json``, each stage's metrics) into ``dest``
    (``only``: just those of these names): each stage's curves (:func:`stage_figures`), the held-out chart of every
    row (:data:`EVAL_CHART`), the text-only pipeline's chart (:data:`TEXT_CHART`) when the run has its rows, and an
    engine run's GRPO stage beside the plain recipe's in ``plain_dir`` (:data:`ENGINE_CHART`)."""
    from agentrl.algos.evaluation.plot import plot_eval
    from agentrl.algos.evaluation.run_log import read_metrics

    def wanted(name: str) -> bool:
        return only is None or name in only

    run = json.loads((exp_dir / "learning.json").read_text(encoding="utf-8"))
    stages = metrics_files(exp_dir)
    written = [p for stage, metrics in stages.items() for p in stage_figures(metrics, dest, only, stage)]
    if wanted(EVAL_CHART):
        written.append(plot_eval(run["rows"], dest / EVAL_CHART, title=f"{run['env']}: held-out results"))
    stem = {label: stage for stage, label in TEXT_LABELS.items()}
    text = [(stem[label], report) for label, report in run["rows"] if label in stem]
    if "rl" in dict(text) and wanted(TEXT_CHART):  # the text-only main job's own chart, its rows under the main
        # job's stage names (not Search-v0's lone text-only base row)
        written.append(plot_eval(text, dest / TEXT_CHART, title=f"{run['env']}: base -> SFT -> RL"))
    grpo = stages.get("grpo")
    if run.get("engine") and grpo is not None and wanted(ENGINE_CHART):
        theirs = metrics_files(plain_dir).get("grpo") if plain_dir else None
        theirs_by_step = {m["step"]: m for m in read_metrics(theirs)} if theirs is not None else {}
        plot_engine_training(run["engine"], read_metrics(grpo), theirs_by_step, dest / ENGINE_CHART)
        written.append(dest / ENGINE_CHART)
    return written


def figure_names(exp_dir: Path) -> list[str]:
    """The names of the figures :func:`experiment_figures` draws from ``exp_dir``'s committed data, without drawing
    them (what a page may show: ``<experiment>/<name>``); none without data."""
    from agentrl.algos.evaluation.plot import figure_names as stage_names
    from agentrl.algos.evaluation.run_log import read_metrics

    if (exp_dir / "compare.json").is_file():
        return list(COMPARE_CHARTS)
    if not (exp_dir / "learning.json").is_file():
        return []
    run = json.loads((exp_dir / "learning.json").read_text(encoding="utf-8"))
    stages = metrics_files(exp_dir)
    names = [f"{stage}_{n}" for stage, m in stages.items() for n in stage_names(read_metrics(m))]
    names.append(EVAL_CHART)
    if TEXT_LABELS["rl"] in dict(run["rows"]):
        names.append(TEXT_CHART)
    if run.get("engine") and "grpo" in stages:
        names.append(ENGINE_CHART)
    return names


def experiment_dirs(data: Path) -> Iterator[Path]:
    """The committed data folders that have figures: learning runs (``learning.json``) and algorithms
    comparisons (``compare.json``), by name."""
    for path in sorted(data.iterdir()) if data.is_dir() else []:
        if (path / "learning.json").is_file() or (path / "compare.json").is_file():
            yield path


def experiment_figures(exp_dir: Path, dest: Path, only: set[str] | None = None) -> list[Path]:
    """Every figure of one committed experiment folder (:func:`experiment_dirs`) into ``dest``; ``only``: just
    those of these names."""
    if (exp_dir / "compare.json").is_file():
        if only is not None and not only & set(COMPARE_CHARTS):
            return []
        summary = json.loads((exp_dir / "compare.json").read_text(encoding="utf-8"))
        return compare_plots(summary, exp_dir, dest)
    from harness.data import baseline, load_json, runs_of
    from harness.experiments import experiment

    run = load_json(exp_dir / "learning.json") or {}
    plain = None
    if run.get("engine"):  # an engine run is drawn beside the plain recipe's in-process run (pages.env_section)
        (plain_dir, plain_run), others = runs_of(exp_dir.parent, experiment(run["env"]), bool(run.get("quick")))
        runs = [(plain_dir, plain_run)] * (plain_run is not None) + others
        mine = next((r for d, r in others if d == exp_dir), run)
        plain = baseline(mine, runs)
    return learning_figures(exp_dir, dest, plain[1] if plain else None, only)


def speed_figure(history: Path, dest: Path) -> Path | None:
    """The speed history's figure (``harness.speed.plot_history``) from the committed history, at ``dest``."""
    from harness.speed import plot_history, read_history

    return plot_history(read_history(history), dest)


def draw_all(data: Path, results: Path, history: Path | None = None) -> list[Path]:
    """Every figure the results pages show, from the committed data: ``<results>/<experiment>/<name>.png`` for
    each folder of ``data`` (:func:`experiment_figures`) and, with ``history``, ``<results>/speed_history.png``."""
    written = [p for exp_dir in experiment_dirs(data) for p in experiment_figures(exp_dir, results / exp_dir.name)]
    if history is not None and (figure := speed_figure(history, results / Path(SPEED_CHART).name)):
        written.append(figure)
    return written


def figure_inputs(exp_dir: Path) -> list[Path]:
    """The committed files an experiment folder's figures are drawn from (what a cache of them is keyed by): its
    ``learning.json`` or ``compare.json`` and its arms' ``metrics.jsonl``; an engine run's also every run's
    ``learning.json`` and GRPO metrics (the plain recipe's run it is drawn beside)."""
    own = [exp_dir / "learning.json", exp_dir / "compare.json", *metrics_files(exp_dir).values()]
    run = json.loads(own[0].read_text(encoding="utf-8")) if own[0].is_file() else {}
    others = ([p for d in sorted(exp_dir.parent.iterdir()) if d.is_dir()
               for p in (d / "learning.json", metrics_files(d).get("grpo", d / "none"))] if run.get("engine") else [])
    return [p for p in dict.fromkeys(own + others) if p.is_file()]


def draw_into(job: tuple[str, str, str, list[str] | None]) -> list[str]:
    """One drawing job for a pool of processes: ``("experiment", data folder, dest folder, names or None for
    all)`` or ``("speed", history, dest file, None)``; the paths written."""
    kind, source, dest, only = job
    if kind == "speed":
        figure = speed_figure(Path(source), Path(dest))
        return [str(figure)] if figure else []
    return [str(p) for p in experiment_figures(Path(source), Path(dest), None if only is None else set(only))]
