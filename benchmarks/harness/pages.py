"""``docs/results/learning.md``: one page of every learning result, generated only from committed data.

Read by it (through :mod:`harness.data`), all committed: ``docs/results/data/<experiment>/learning.json`` and
``eval/<stage>.jsonl`` (per-task scores: task id, family, score) that ``benchmarks/learning.py`` copies there
at the end of a run; ``docs/results/data/compare_algorithms/compare.json``
(``benchmarks/compare_algorithms.py`` copies it there at its end) and each earlier comparison kept beside it
(``compare_algorithms_<name>/``); the held-out sets' sidecars ``benchmarks/heldout/<name>.json``; and the
ledger ``benchmarks/heldout/ledger.jsonl`` (a row per evaluation on a fixed set the harness or ``agentrl eval
--ledger`` made). Nothing is read from ``runs/`` (ignored by git), so a fresh clone regenerates the page byte
for byte (``tests/benchmarks/test_learning_page.py``). A section without committed data says "not run yet".
The sections, their comparisons and goals are the experiments' declarations (:mod:`harness.experiments`); the
per-family and per-tier tables are computed from the per-task scores.

Each comparison shows both scores on the set's declared primary metric, the difference, its paired bootstrap
95% interval over tasks (``agentrl.algos.evaluation.intervals``), the verdict against the stated goal, the
command and the commit. The ledger section lists per set every configuration judged on it; a figure is
**selected** when several configurations were judged on the same set (same N and temperature) and it is the
best of them: it was chosen by looking at the set, so it is not a held-out figure.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from harness import axes_page
from harness.axes_page import (
    Axes,
    axes_section,
    label,
    lr_choice_section,
    lr_edge_section,
    mean_score,
    readme_rows,
    set_name,
)
from harness.compare_page import compare_section
from harness.data import (
    TIE_RULE,
    baseline,
    comparison_dirs,
    family_table,
    grpo_metrics,
    heldout_status,
    learning_judged,
    load_json,
    primary_metric,
    read_ledger,
    runs_of,
    selections,
)
from harness.experiments import (
    AXES,
    COLD_START,
    CONTROL,
    EDGE,
    EXPERIMENTS,
    LR_CHOICE,
    LR_EDGE,
    RL,
    diagnostic,
    experiment,
    note,
    undeclared,
)
from harness.figures import ENGINE_CHART, EVAL_CHART, figure_names
from harness.heldout import AXIS_SETS, SPECS, set_status
from harness.layout import DATA, LEDGER, RESULTS, RESULTS_PAGE, ROOT, shown
from harness.results_page import ARCHIVE_COMMIT, archive_text, refresh_learning
from harness.run_page import write_run_page
from harness.tables import cell, commit_text, engine_training, signal_table, verdict

CAVEATS = [
    "The held-out sets were fixed before any tuning on them (`benchmarks/heldout.py`; each sidecar records its "
    "date and positions). Earlier figures, kept for history in the archive (no longer in the tree: "
    f"{archive_text()}), were measured on the "
    "v1 sets or the first 32 test-split tasks, on which settings were chosen, and their raw data was not "
    "committed: they are not held-out figures (issue 16) and none appears on this page.",
    "The main job's settings (Dr. GRPO, budgets; first a cold start on `add_multiply` alone) were chosen before "
    "these sets existed, on the train split (`benchmarks/coldstart_probe.py`) and on the first 32 test tasks. The "
    "cold start on all nine families with 16 steps (the default since session 7) was chosen on the train split "
    "and adopted by a rule written down before its one evaluation on the ToolUse set "
    f"({archive_text('tooluse_coldstart.md')}). Search-v0: `rl_steps=32` was decided before "
    "running; "
    "`balance_sources` was tried in session 8 after reading dev episodes of that run (fanoutqa answered with the "
    "question's entity) and not kept: it scored below the session-7 run on the same dev questions "
    f"({archive_text('learning_search_balanced.md')}). Otherwise nothing on this "
    "page was chosen by looking at these held-out sets unless the list of configurations below shows several "
    "configurations judged on the same set, in which case the best of them is a selected, not a held-out, figure.",
    "ToolUse-v0's `stock` and `power` families (and many `convert`, `stock_value`, `stock_total` questions) have "
    "question texts that also occur in the train split (the sidecar's `train_text_overlap`): their held-out "
    "figures can come from memorisation.",
    "Each figure is one run unless seeds are given; the algorithm comparison reports the spread over its seeds.",
    "The SFT controls of `benchmarks/learning.py` runs made before commit 7a472f9 (2026-12-04) trained with "
    "TrainConfig's default `memory_budget_gb` of 2.0 where the run's cold start and GRPO used the main job's 1.5: "
    "larger micro-batches, so more SFT steps in the same wall time (a step 1.15x as fast on the AMX machine, 2.3x "
    "on the fp32 one). Those controls are favoured: every one on this page except the `lr2e-5` run's, which was "
    "rerun after the fix (its note). From commit d019e38 on, an update runs the rows' common prompt prefix once "
    "instead of once per micro-batch, so a wall-time budget holds more steps than it did before.",
]


def run_marks(name: str) -> list[str]:
    """What the record says about a run beside its figures: not declared before it ran, why it is a diagnostic,
    what its figures were chosen by (the fields of its :class:`harness.record.Record`)."""
    marks = (["**Not declared before it ran** (no commit declared its settings first): a figure to read, not a "
              "test of a prediction."] if undeclared(name) else [])
    marks += [f"**Diagnostic:** {diagnostic(name)}."] if diagnostic(name) else []
    marks += [f"**Note:** {note(name)}."] if note(name) else []
    return [line for m in marks for line in (m, "")]


def summary_section(data: Path, ledger_rows: list[dict[str, Any]]) -> list[str]:
    """The page's opening summary, from the committed data: the axes experiment's rows (the README sums them up),
    then every earlier RL-vs-same-time-control comparison outside the diagnostics, by verdict (the tie rule),
    declared runs first, whether the axis sets have been evaluated, and the declared runs' table."""
    declared, not_declared = [], []
    for exp in EXPERIMENTS:
        (exp_dir, plain), others = runs_of(data, exp, False)
        runs = [(exp_dir, plain)] * (plain is not None) + others
        for run_dir, run in runs:
            if diagnostic(run_dir.name):
                continue
            for cmp, c in learning_judged(exp.env, run, run_dir, baseline(run, runs) if run.get("variant") else None):
                if (cmp.a, cmp.b) == (RL, CONTROL):
                    see = " (see its note)" if note(run_dir.name) else ""
                    item = (f"`{run_dir.name}` {c.difference:+.1f} [{c.low:+.1f}, {c.high:+.1f}]{see}", c)
                    (not_declared if undeclared(run_dir.name) else declared).append(item)
    axes_rows = readme_rows(data / AXES.name)
    if not declared and not not_declared and not axes_rows:
        return []

    def counts(items) -> str:
        ties = [t for t, c in items if c.tie]
        sft = [t for t, c in items if not c.tie and c.difference < 0]
        rl = [t for t, c in items if not c.tie and c.difference > 0]
        return (f"{len(ties)} tie{'s' * (len(ties) != 1)} ({', '.join(ties) or 'none'}), SFT ahead in {len(sft)} "
                f"({', '.join(sft) or 'none'}), RL ahead in {len(rl)} ({', '.join(rl) or 'none'})")

    evaluated = {r.get("set") for r in ledger_rows}
    axes = [n for n in AXIS_SETS if n in evaluated]
    lines = ["## Summary", ""]
    if axes_rows:
        lines += [f"**The pre-declared experiment on the generalisation axes** (`{AXES.name}`: its section below has "
                  "every seed, pass@k and pass^k, the learning signal per family and the KL to the base). Verdicts: "
                  f"{TIE_RULE}; the seed SD beside each interval is the noise floor.", "", *axes_rows, ""]
    earlier = declared_runs_table(data)
    return [*lines,
            "Before it, computed from the committed data on this page (RL (GRPO) against the SFT control trained for "
            "the same wall time, on each run's fixed held-out set; points, 95% interval; runs in *Diagnostics and "
            "failed configurations* left out):", "",
            f"- **In-distribution, at 135M on a CPU, GRPO against a same-time SFT control**, runs declared before "
            f"they ran: {counts(declared)}.",
            f"- Runs not declared before they ran: {counts(not_declared)}.",
            "- Every set of these runs holds the training's own families at the training's chain lengths; the "
            "generalisation axes where RL is expected to differ (deeper chains, unseen pairings, rule variants, "
            "tool failures, forgetting) have their own sets, "
            + (f"evaluated on: {', '.join(f'`{n}`' for n in axes)}." if axes else
               f"not evaluated yet: the pre-declared experiment `{AXES.name}` (benchmarks/harness/experiments.py, "
               f"{' vs '.join(AXES.arms)}, {len(AXES.seeds)} seeds) has not run."), "",
            *([] if not earlier else ["The runs declared before they ran:", "", *earlier, ""])]


def heldout_table() -> str:
    """One row per committed held-out set, from its sidecar."""
    lines = ["| Set | Status | Env | Split | Tasks | Positions | Fixed on | Per family | Train-text overlap "
             "| Primary metric |", "|---|---|---|---|---:|---|---|---|---|---|"]
    for name, spec in SPECS.items():
        meta = load_json(spec.meta_path)
        if meta is None:
            lines.append(f"| `{spec.path.relative_to(ROOT)}` | | {spec.env} | {spec.split} | not written yet | "
                         f"`python benchmarks/heldout.py write --only {name}` | | | | |")
            continue
        fams = ", ".join(f"{k} {v}" for k, v in meta["families"].items())
        overlap = ", ".join(f"{k} {v}" for k, v in meta["train_text_overlap"].items()) or "none"
        lines.append(f"| `{spec.path.relative_to(ROOT)}` | {set_status(name)} | {meta['env']} | {meta['split']} "
                     f"| {meta['tasks']} | "
                     f"{meta['positions']} | {meta['date']} | {fams} | {overlap} | "
                     f"{meta.get('primary_metric', spec.primary_metric)} |")
    return "\n".join(lines)


def comparisons(env: str, run: dict[str, Any], exp_dir: Path, selected: dict[str, int],
                plain: tuple[dict[str, Any], Path] | None = None) -> list[str]:
    """The comparison table of a section (:func:`harness.data.learning_judged`): scores, difference, paired
    bootstrap 95% interval, goal, verdict, and whether A's figure was selected."""
    from agentrl.algos.evaluation.intervals import METRICS

    name = METRICS[primary_metric(env)].replace("@N", f"@{run['eval_n']}")
    reports = dict(run["rows"])
    lines = [f"Comparisons on the set's primary metric, {name} (paired bootstrap over tasks, 10,000 resamples, "
             "seed 0; verdict: met when the difference reaches the goal; *decided* when the whole interval lies on "
             f"the verdict's side; {TIE_RULE}; a row against another run whose cold start differs gets no verdict):",
             "",
             f"| Comparison | A: {name} | B: {name} | A - B (points) | 95% interval | Goal | Verdict | A selected? |",
             "|---|---:|---:|---:|---|---|---|---|"]
    for cmp, c in learning_judged(env, run, exp_dir, plain):
        a, b = cmp.a, cmp.b
        ledger_id = ((reports.get(a) or {}).get("settings") or {}).get("ledger", {}).get("id")
        sel = (f"**selected** (best of {selected[ledger_id]} on this set)" if ledger_id in selected
               else "no" if ledger_id else "no ledger row")
        lines.append(f"| {a} vs {b} | {c.a:.1f}% | {c.b:.1f}% | {c.difference:+.1f} | [{c.low:+.1f}, {c.high:+.1f}] "
                     f"| {cmp.goal_text} | {verdict(c)} | {sel} |")
    if len(lines) == 4:
        return []
    return lines + ["", f"Command: `{run['command']}`, {commit_text(run)}.", ""]


def env_section(env: str, run: dict[str, Any] | None, exp_dir: Path, quick: bool, results: Path,
                selected: dict[str, int], plain: tuple[dict[str, Any], Path] | None = None) -> list[str]:
    """One env's section; a variant's (``run["variant"]``) also compares its RL with ``plain``'s, the plain
    recipe's run and data dir, when given. Its figures are the ones its committed data draws
    (:func:`harness.figures.figure_names`; drawn when the site is built, none is committed)."""
    from agentrl.algos.evaluation.report import EvalReport, results_table

    exp = experiment(env)
    title = exp.title
    variant = (run or {}).get("variant")
    if variant:
        overrides = " ".join(run.get("overrides") or [])
        title = (f"{env.split('/')[-1]}, variant `{variant}`" + (f": `{overrides}`" if overrides else "")
                 + (f" (sampled by {run['engine']})" if run.get("engine") else ""))
    lines = [f"## {title}", "", *run_marks(exp_dir.name)]
    if run is None:
        cmd = f"python benchmarks/learning.py --env {env}{' --quick' if quick else ''}"
        return lines + [f"Not run yet: no committed data in `{shown(exp_dir)}/`. Command: `{cmd}`.", ""]
    rows = [(label, EvalReport.from_dict(d)) for label, d in run["rows"]]
    by = dict(rows)
    c = run["config"]
    stages = ", ".join(f"{k} {v / 60:.1f} min" for k, v in run["stage_seconds"].items())
    lines += [
        f"Command: `{run['command']}` ({commit_text(run)}; started {run['started']}, "
        f"{run['invocation_seconds'] / 60:.1f} "
        f"min this invocation; stage times {stages}; peak RSS {run['peak_rss_gib'] or float('nan'):.2f} GiB). "
        f"Seed {run['seed']}, model {run['model']}. Data: `{shown(exp_dir)}/`.", "",
        f"Held-out: {by[rows[0][0]].num_tasks} tasks of `{run['heldout_file']}` "
        f"({heldout_status(run['heldout_file'], run['heldout_sha256'])}), N = {run['eval_n']} at temperature "
        f"{run['eval_temperature']}.", "",
        f"Settings: cold start {c['sft_steps']} SFT steps on {c['sft_demos']} demos of "
        f"{', '.join(c['sft_families']) or 'all families'}; GRPO {c['rl_steps']} steps of {c['rl_tasks_per_step']} "
        f"tasks x {c['rl_group_size']}, lr {c['rl_lr']}; replies <= {c['max_new_tokens']} tokens, "
        f"{c['max_turns']} turns" + (f"; env {json.dumps(c['env_kwargs'])}" if c.get("env_kwargs") else "")
        + (f"; engine {run['engine']} (every evaluation and GRPO rollout sampled by a {run['engine']} server, SFT "
           "in process)" if run.get("engine") else "") + ".", "",
        results_table(rows), "",
    ]
    if run.get("cold_start_from"):
        lines += [f"The base and cold-start rows were read back from `{run['cold_start_from']}` (the plain recipe's "
                  "run), not re-run: this variant differs from it only after the cold start.", ""]
    lines += comparisons(env, run, exp_dir, selected, plain)
    families, tiers = family_table(run, exp_dir), family_table(run, exp_dir, "tier")
    if families:
        lines += ["Per task family (Average@N):", "", families, ""]
    if tiers:
        lines += ["Per tier (Average@N):", "", tiers, ""]
    lines += signal_table(grpo_metrics(exp_dir))
    plot_dir = exp_dir.name
    lines += engine_training(run, exp_dir, plain)
    if (results / f"learning_{plot_dir}.md").is_file():
        lines += [f"Details: [learning_{plot_dir}.md](learning_{plot_dir}.md).", ""]
    drawn = set(figure_names(exp_dir))
    for text, name in ((f"![{env} held-out results]({plot_dir}/{EVAL_CHART})", EVAL_CHART),
                       (f"![{env} GRPO reward]({plot_dir}/grpo_reward.png)", "grpo_reward.png"),
                       (f"![{env} GRPO through the engine and in process]({plot_dir}/{ENGINE_CHART})", ENGINE_CHART)):
        if name in drawn:
            lines += [text, ""]
    return lines + ["Machine: " + "; ".join(m.lstrip("- ") for m in run["machine"]), ""]


def ledger_section(rows: list[dict[str, Any]], ledger: Path, selected: dict[str, int]) -> list[str]:
    """Per held-out set, every evaluation the ledger recorded on it, in the order they ran."""
    lines = ["## Every configuration judged on each held-out set (the ledger)", "",
             f"From `{shown(ledger)}`: one row per evaluation on a fixed set, whichever command ran it "
             "(`agentrl eval --tasks-file`, `benchmarks/learning.py`, `benchmarks/compare_algorithms.py`, the main "
             "job). Weights: a fingerprint of the sampled weights; config: a hash of the evaluation settings. A row "
             "marked **selected** is the best of several configurations judged on the same whole set with the same N "
             "and temperature: a figure chosen by looking at the set, not a held-out figure.", ""]
    for name in SPECS:
        on = [r for r in rows if r.get("set") == name]
        lines += [f"### `{name}`", ""]
        if not on:
            lines += ["No evaluation recorded on this set.", ""]
            continue
        metric = on[0].get("primary_metric", "average_at_n")
        lines += [f"| Time (UTC) | Commit | Command | Weights | Adapter | Config | Tasks | N, T | {metric} | |",
                  "|---|---|---|---|---|---|---:|---|---:|---|"]
        for r in on:
            commit = (r.get("commit") or "?")[:10] + (" (dirty)" if r.get("dirty") else "")
            value = (r.get("scores") or {}).get(metric)
            mark = f"**selected** (best of {selected[r['id']]})" if r["id"] in selected else ""
            stage = f" ({r['stage']})" if r.get("stage") else ""
            lines.append(f"| {r.get('time')} | `{commit}` | `{cell(r.get('command'))}`{stage} | `{r.get('weights')}` | "
                         f"{cell(r.get('adapter'))} | `{r.get('config_sha256')}` | {r.get('tasks')} of "
                         f"{r.get('set_tasks')} | {r.get('n')}, {r.get('temperature')} | "
                         f"{'–' if value is None else f'{100 * value:.1f}%'} | {mark} |")
        lines.append("")
    return lines


def without_data(results: Path, data: Path, quick: bool) -> list[str]:
    """Learning pages in ``results`` whose experiment has no committed data (their figures cannot be
    re-derived), and where the archive of earlier pages lives now (the repository's history)."""
    pages = [p for p in sorted(results.glob("learning_*.md"))
             if (p.stem.endswith("_quick") == quick) and not (data / p.stem.removeprefix("learning_")).is_dir()]
    lines = ["## Pages without committed raw data", ""]
    if pages:
        lines += ["These pages were written by runs whose per-task outputs and metrics were not committed: their "
                  "figures cannot be re-derived or audited from this repository, and none of them appears above.", "",
                  *[f"- [{p.name}]({p.name})" for p in pages], ""]
    return lines + ["Pages and plots of earlier runs on the burnt v1 sets, whose raw data was never committed, are "
                    f"kept in the repository's history, no longer in its tree (the folder `docs/results/archive/` "
                    f"at commit {ARCHIVE_COMMIT}: {archive_text()}): they are not results, and each of their "
                    "figures is superseded by this page.", ""]


#: The lines around README's generated summary (:func:`readme_summary`), which ``--page`` rewrites.
README_MARKS = ("<!-- learning-summary: generated by `python benchmarks/learning.py --page` from docs/results/data; "
                "do not edit -->", "<!-- /learning-summary -->")


def lr_text(lr: float | None) -> str:
    """A learning rate as the recipes write it (``2e-4``)."""
    return "?" if lr is None else f"{lr:.0e}".replace("e-0", "e-")


def _kind(j: Any) -> str:
    """A verdict in one word: *tie* by the tie rule, else met or missed."""
    return "tie" if getattr(j, "tie", False) else str(j.verdict)


def _counted(kinds: list[str]) -> str:
    """``["tie", "tie", "missed"]`` -> ``2 tie and 1 missed`` (most first)."""
    return " and ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds), key=lambda k: (-kinds.count(k), k)))


def readme_summary(data: Path = DATA) -> str:
    """The README's results block, three sentences from the committed data and a link (issue 61): the pre-declared
    axes experiment's verdicts on our own sets (the first arm against each other arm, greedy pass@1, the learning
    pages' tie rule) and how many of the first arm's steps changed its weights; its first public benchmark set in
    the declared order, with each paired 95% interval and verdict; the count of the earlier runs declared before
    they ran (:func:`declared_runs_table`). Every table is on the results page."""
    from agentrl.algos.evaluation.run_log import read_metrics

    exp, folder = AXES, data / AXES.name
    ax = Axes(exp, folder)
    if not ax.pieces:
        return f"The pre-declared experiment `{exp.name}` has not run yet. Results: [docs/results.md](docs/results.md)."
    rows: list[str | None] = [None, *exp.arms]
    first, others = next(iter(exp.arms)), list(exp.arms)[1:]

    def short(arm: str) -> str:  # "GRPO (Dr. GRPO)" -> "GRPO"
        return label(arm).split(" (")[0]

    def judged(target: str) -> dict[str, Any]:
        return {c.b: j for c, j in axes_page.comparisons(ax, target, rows) if c.a == label(first)}

    own = {o: [_kind(j) for t in exp.sets if (j := judged(t).get(label(o))) is not None] for o in others}
    versus = ", ".join(f"against {short(o)} {_counted(k) or 'not run'}" for o, k in own.items())
    steps = [read_metrics(folder / model / "metrics.jsonl") for _, model in ax.models(first)
             if (folder / model / "metrics.jsonl").is_file()]
    updates = [sum(1 for m in s if m.get("train/optimizer_steps", 0)) for s in steps]
    changed = (f"; {min(updates)}-{max(updates)} of {short(first)}'s {min(map(len, steps))}-"
               f"{max(map(len, steps))} steps per seed changed its weights" if steps else "")
    budget = f"{exp.steps} steps" if exp.steps else f"{exp.minutes:g} training minutes"
    model = ax.setup.get("pipeline", {}).get("model", "the model")
    one = (f"In the pre-declared experiment `{exp.name}` ({model}, one shared SFT cold start, then {budget} per arm, "
           f"{len(exp.seeds)} seeds), {short(first)} was judged against each other arm on our {len(exp.sets)} held-out "
           f"sets by greedy pass@1 and a paired 95% interval: {versus}{changed}.")
    bench = exp.transfer[0] if exp.transfer else exp.sets[0]
    means = {arm: statistics.fmean(mean_score(s) for _, s in done) for arm in rows if (done := ax.row(arm, bench))}
    scored = [f"{short(o)} at {100 * means[o]:.1f}% ({j.difference:+.1f} points, 95% interval [{j.low:+.1f}, "
              f"{j.high:+.1f}], {_kind(j)})" for o in others if o in means and (j := judged(bench).get(label(o)))]
    two = (f"On {set_name(exp, bench)}{', graded by its own checker' if bench in exp.transfer else ''}, "
           f"{short(first)} scored {100 * means[first]:.1f}% (cold start {100 * means[None]:.1f}%) against "
           + " and ".join(scored) + "." if first in means and None in means and scored else
           f"{set_name(exp, bench)} is not evaluated yet.")
    earlier = declared_runs_table(data)
    three = (f"Before it, {earlier[-1][0].lower()}{earlier[-1][1:-1]} (one seed each, on sets of the training's own "
             "families)." if earlier else "No earlier run was declared before it ran.")
    return f"{one} {two} {three} Every table, interval and seed: [docs/results.md](docs/results.md)."

def declared_runs_table(data: Path = DATA) -> list[str]:
    """One row per run whose settings were declared in a commit before it ran (not
    :attr:`~harness.record.Record.undeclared`, not a diagnostic): its set, GRPO steps and learning rate, seeds, RL
    against its own cold start and against the same-time SFT control (each with its paired 95% interval), and the
    verdict on the latter; then one line counting the verdicts. Empty when there is none."""
    lines = ["| Run (held-out set) | GRPO steps, lr | Seeds | RL - cold start, 95% interval "
             "| RL - same-time SFT control, 95% interval | Verdict vs control |",
             "|---|---|---:|---|---|---|"]
    verdicts: dict[str, int] = {}
    for exp in EXPERIMENTS:
        (plain_dir, plain), others = runs_of(data, exp, False)
        for exp_dir, run in [(plain_dir, plain)] * (plain is not None) + others:
            if undeclared(exp_dir.name) or diagnostic(exp_dir.name):
                continue
            judged = {(cmp.a, cmp.b): c for cmp, c in learning_judged(exp.env, run, exp_dir)}
            control, cold = judged.get((RL, CONTROL)), judged.get((RL, COLD_START))
            if control is None:
                continue
            cfg = run.get("config", {})
            label = exp.env.split("/")[-1] + (f" `{run['variant']}`" if run.get("variant") else "")
            kind = "tie" if getattr(control, "tie", False) else control.verdict
            verdicts[kind] = verdicts.get(kind, 0) + 1

            def interval(c: Any) -> str:
                return f"{c.difference:+.1f} [{c.low:+.1f}, {c.high:+.1f}]" if c is not None else "-"

            lines.append(f"| {label} (`{Path(run['heldout_file']).stem}`) | {cfg.get('rl_steps', '?')}, "
                         f"{lr_text(cfg.get('rl_lr'))} | {len(run.get('seeds', [run.get('seed', 0)]))} "
                         f"| {interval(cold)} | {interval(control)} | {verdict(control)} |")
    if len(lines) == 2:
        return []
    counts = ", ".join(f"{n} {k}" for k, n in sorted(verdicts.items(), key=lambda kv: -kv[1]))
    return [*lines, "", f"{len(lines) - 2} runs declared before they ran, against the same-time SFT control: {counts}."]


def update_readme(readme: Path, data: Path = DATA) -> bool:
    """Rewrite the block between :data:`README_MARKS` in ``readme`` with :func:`readme_summary`; False when the
    file has no such block."""
    text = readme.read_text(encoding="utf-8")
    start, end = README_MARKS
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(f"{head}{start}\n{readme_summary(data)}\n{end}{tail}", encoding="utf-8")
    return True


def write_page(data: Path = DATA, results: Path = RESULTS, *, quick: bool = False,
               ledger: Path = LEDGER, out: Path | None = None, readme: Path | None = None) -> Path:
    """Write ``<results>/learning.md`` (``learning-quick.md`` for --quick runs; or ``out``) from the committed
    data; ``results`` is also where the pages and plots it links to are looked for. ``readme``: also rewrite
    its generated summary block (:func:`update_readme`; ``--page`` passes README.md). Without ``out``, each
    run's own page is rewritten from its data too (:func:`harness.run_page.write_run_page`) and the learning
    section of docs/results.md (:func:`harness.results_page.refresh_learning`)."""
    if out is None:  # each run's own page, from its committed data (runs that recorded what it needs)
        for run_dir in sorted(p.parent for p in data.glob("*/learning.json")):
            write_run_page(run_dir, results)
    rows = read_ledger(ledger)
    selected = selections(rows)
    lines = [f"# Learning results{' (quick smoke runs: not results)' if quick else ''}", "",
             f"Generated by `python benchmarks/learning.py --page{' --quick' if quick else ''}` from committed data "
             f"only: `{shown(data)}/` (per-task eval outputs and each run's `learning.json`, copied there by "
             f"`benchmarks/learning.py`) and the ledger `{shown(ledger)}`. A section without committed data says "
             "so; see [docs/evaluation.md](../evaluation.md#results-pages-and-the-ledger) for how figures are "
             "made.", "",
             *([] if quick else summary_section(data, rows)),
             "## Held-out sets", "", heldout_table(), "", "Selection caveats:", "",
             *[f"- {c}" for c in CAVEATS], ""]
    diagnostics: list[str] = []
    for exp in EXPERIMENTS:
        env = exp.env
        (exp_dir, plain), others = runs_of(data, exp, quick)
        lines += env_section(env, plain, exp_dir, quick, results, selected)
        for var_dir, run in others:
            section = env_section(env, run, var_dir, quick, results, selected,
                                  plain=baseline(run, [(exp_dir, plain)] * (plain is not None) + others))
            (diagnostics if diagnostic(var_dir.name) else lines).extend(section)
    for cmp_dir in comparison_dirs(data, quick):
        section = compare_section(load_json(cmp_dir / "compare.json"), cmp_dir, quick,
                                  results if out is None else None)
        section[2:2] = run_marks(cmp_dir.name)
        (diagnostics if diagnostic(cmp_dir.name) else lines).extend(section)
    if not quick:  # the pre-declared experiments run in pieces by benchmarks/axes.py
        lines += (axes_section(data / AXES.name) + lr_choice_section(data / LR_CHOICE.name)
                  + lr_edge_section(data / LR_EDGE.name) + axes_section(data / EDGE.name, EDGE))
    if diagnostics:
        lines += ["## Diagnostics and failed configurations", "",
                  "Runs that show why something broke, not how two methods compare: each says why it is here.", "",
                  *(line.replace("## ", "### ", 1) if line.startswith("## ") else line for line in diagnostics)]
    lines += ledger_section(rows, ledger, selected)
    lines += without_data(results, data, quick)
    path = out or results / f"learning{'-quick' if quick else ''}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    if readme is not None and not quick:
        update_readme(readme, data)
        if RESULTS_PAGE.is_file() and results.resolve() == RESULTS.resolve():
            refresh_learning(RESULTS_PAGE)  # its learning section embeds this page's tables
    return path
