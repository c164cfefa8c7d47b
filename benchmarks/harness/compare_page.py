"""The algorithms comparison's page (``docs/results/learning_compare_algorithms[_<name>].md``), its section of
``docs/results/learning.md`` and its plots, from its committed data
(``docs/results/data/compare_algorithms*/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data import TIE_RULE, compare_judged, earlier_name, heldout_status
from harness.experiments import COMPARE, DIAGNOSTICS
from harness.layout import cell, shown
from harness.tables import commit_text, seed_spread, signal_table, verdict


def why_not(agg: dict[str, Any]) -> str:
    """The diagnostics of an algorithm that did not beat its cold start, as one sentence of measured rates."""
    d = agg["diagnostics"]
    parts = [f"{label} {d[key]:.3g}" for key, label in DIAGNOSTICS.items() if key in d]
    if "reward_first_quarter" in d:
        parts.append(f"rollout reward {d['reward_first_quarter']:+.3f} (first quarter) -> "
                     f"{d['reward_last_quarter']:+.3f} (last quarter)")
    return "; ".join(parts) or "no metrics logged"


def signal_tables(summary: dict[str, Any], folder: Path) -> list[str]:
    """Per RL algorithm, where its learning signal was per task family (:func:`harness.tables.signal_table`),
    from the committed metrics of its runs in the comparison's data ``folder`` (all seeds' steps together);
    nothing for runs logged without ``family/*``."""
    from agentrl.algos.evaluation.run_log import read_metrics

    lines, labels = [], COMPARE.labels_of(summary)
    for algo, runs in summary["runs"].items():
        paths = [folder / cell(algo, r["seed"]) / "metrics.jsonl" for r in runs]
        # seeds' steps interleaved by step number: a quarter of the table is that quarter of every seed's run
        steps = sorted((m for p in paths if p.is_file() for m in read_metrics(p)), key=lambda m: m["step"])
        table = signal_table(steps, who=labels[algo]) if algo != "sft" else []
        lines += ["", *table[:-1]] if table else []
    return lines


def page(summary: dict[str, Any], plot_dir: str, data_dir: Path | None = None) -> str:
    """The markdown of the comparison (also embedded in docs/results/learning.md); with ``data_dir`` (the
    committed per-task scores) also each comparison's paired bootstrap interval and verdict."""
    n, cold = summary["eval_n"], summary["cold_start"]["average_at_n"]
    labels = COMPARE.labels_of(summary)
    lines = [f"{summary['tasks']} held-out tasks from `{summary['heldout_file']}`, greedy (N = {n}); each "
             f"algorithm trained for about {summary['minutes']:g} min of wall time (a run ends at the step count "
             "whose time is nearest that budget; each run's own time is in the table) from the same cold start "
             f"({summary['cold_start_source']}); seeds {', '.join(map(str, summary['seeds']))}.", "",
             f"| Algorithm | Held-out Average@{n}: mean (min..max) | vs cold start ({100 * cold:.1f}%) | "
             "seeds above | steps (training min) per seed | beat its cold start? |", "|---|---:|---:|---:|---:|---|"]
    notes = []
    for algo, agg in summary["aggregate"].items():
        agg = {**agg, "beat": agg["min"] > cold}  # the rule of aggregate(), also for a compare.json written before it
        beat = "yes (every seed)" if agg["beat"] else "no (see below)"
        spent = ", ".join(f"{r['steps']} ({r['train_seconds'] / 60:.1f})" for r in summary["runs"][algo])
        lines.append(f"| {labels[algo]} | {100 * agg['mean']:.1f}% ({100 * agg['min']:.1f}..{100 * agg['max']:.1f}) "
                     f"| {100 * (agg['mean'] - cold):+.1f} | {agg['seeds_above']} of {agg['seeds']} | "
                     f"{spent} | {beat} |")
        if not agg["beat"]:
            notes.append(f"- **{labels[algo]}** did not beat its cold start on every seed "
                         f"({agg['seeds_above']} of {agg['seeds']} above). Run means: {why_not(agg)}.")
    judgements = compare_judged(summary, data_dir) if data_dir is not None else []
    if judgements:
        lines += ["", f"Comparisons of the final evaluations (Average@{n}, a task's score averaged over seeds; paired "
                  "bootstrap over tasks, 10,000 resamples, seed 0; verdict: met when A is above B; *decided* when the "
                  f"whole interval lies on the verdict's side; {TIE_RULE}. Seed spread: the standard deviation of "
                  "each row's score over its seeds, the noise floor beside the interval (the interval is over tasks "
                  "only), where a row has 2 or more seeds):", "",
                  "| Comparison | A | B | A - B (points) | 95% interval | Seed spread (SD, points) | Goal | Verdict |",
                  "|---|---:|---:|---:|---|---|---|---|"]
        for cmp, c in judgements:
            a, b = cmp.a, cmp.b
            lines.append(f"| {a} vs {b} | {c.a:.1f}% | {c.b:.1f}% | {c.difference:+.1f} "
                         f"| [{c.low:+.1f}, {c.high:+.1f}] | {seed_spread(c.spread)} "
                         f"| > +0 | {verdict(c)} |")
    if data_dir is not None:
        lines += signal_tables(summary, data_dir)
    fams = summary.get("cold_start_by_family", {})
    if fams:
        lines += ["", "Per task family (Average@N; algorithms: mean over seeds):", "",
                  "| Model | " + " | ".join(fams) + " |", "|---|" + "---:|" * len(fams),
                  "| cold start | " + " | ".join(f"{100 * v:.0f}%" for v in fams.values()) + " |"]
        for algo, agg in summary["aggregate"].items():
            lines.append(f"| {labels[algo]} | "
                         + " | ".join(f"{100 * agg['by_family'].get(f, 0.0):.0f}%" for f in fams) + " |")
    earlier = [f"{labels[a]} seed {r['seed']} ("
               + (f"commit `{r['commit'][:10]}`" if r.get("commit") else "commit not recorded")
               + (f", from the {r['commit_from']}" if r.get("commit_from") else "") + ")"
               for a, runs in summary["runs"].items() for r in runs if r.get("commit") != summary.get("commit")]
    if earlier:
        notes.append("- Read back from an earlier invocation with the same settings (`<out>/setup.json`), not made at "
                     f"this page's commit: {', '.join(earlier)}.")
    notes.append(f"- One held-out task is {100 / (summary['tasks'] * n):.1f} points; greedy evaluation is not "
                 "bit-exact across batch compositions, so a difference of a task or two is within noise.")
    if "ppo" in summary["aggregate"]:
        from agentrl.algos.config import apply_overrides

        # a compare.json written before "sections" was recorded ran PPO with its command's ppo.* only
        ppo_settings = summary["sections"]["ppo"] if "sections" in summary else [
            t.split(".", 1)[1] for t in summary["command"].split() if t.startswith("ppo.") and "=" in t]
        if apply_overrides({}, ppo_settings).get("epochs", 1) == 1:
            notes.append("- PPO ran one epoch per rollout batch with the group-mean baseline: that is the main job's "
                         "Dr. GRPO objective (rewards centred, not scaled, `beta=0`; both clip at [0.8, 1.28] with "
                         "the dual clip and a token mean), so the PPO and GRPO rows differ only by the steps each "
                         "fitted in its time and by numerics (a seed's first rollouts are identical). The script now "
                         "runs PPO with `epochs=2` (`SECTION_DEFAULTS`).")
        else:
            notes.append(f"- PPO settings: {', '.join(f'`{s}`' for s in ppo_settings)} (more than one epoch per "
                         "rollout batch makes it a different algorithm from Dr. GRPO, whose objective one epoch of "
                         "the group-mean PPO equals).")
    lines += ["", *notes, "",
              f"![held-out success against wall time]({plot_dir}/heldout_vs_time.png)",
              f"![rollout reward against step]({plot_dir}/reward_vs_step.png)", "",
              f"Command: `{summary['command']}`; {summary['invocation_seconds'] / 60:.1f} min this invocation, peak "
              f"RSS {summary['peak_rss_gib'] or float('nan'):.2f} GiB; machine: "
              f"{'; '.join(m.lstrip('- ') for m in summary['machine'][:3])}."]
    return "\n".join(lines)


def write_page_file(summary: dict[str, Any], results: Path, data_dir: Path, quick: bool) -> Path:
    """``<results>/learning_<data_dir name>.md`` (``learning_compare_algorithms[_quick].md`` for the current
    comparison): the comparison's own page (``page`` under a title, its plots in ``<results>/<data_dir
    name>/``), from ``summary`` and the data in ``data_dir``; written at the end of a run and again by
    ``learning.py --page``."""
    name = data_dir.name
    path = results / f"learning_{name}.md"
    earlier = earlier_name(data_dir)
    title = f"An earlier algorithms comparison ({earlier})" if earlier else "The algorithms side by side"
    path.write_text(f"# {title}: {COMPARE.env}{' (quick smoke run)' if quick else ''}\n\n"
                    f"{page(summary, name, data_dir)}\n", encoding="utf-8")
    return path


def compare_section(summary: dict[str, Any] | None, exp_dir: Path, quick: bool, results: Path | None = None
                    ) -> list[str]:
    """An algorithms comparison's section, from its committed data in ``exp_dir``; with ``results``, its own page
    (``learning_<exp_dir name>.md``) is (re)written there from that data too. Its two figures
    (``<exp_dir name>/heldout_vs_time.png``, ``reward_vs_step.png``) are drawn from that data when the site is
    built (:mod:`harness.figures`). An earlier comparison (:func:`harness.data.earlier_name`) is titled as one."""
    plot_dir, earlier = exp_dir.name, earlier_name(exp_dir)
    lines = [f"## An earlier algorithms comparison (ToolUse-v0): `{earlier}`" if earlier else
             "## The algorithms side by side (ToolUse-v0)", ""]
    if summary is None:
        cmd = f"python benchmarks/compare_algorithms.py{' --quick' if quick else ''}"
        return lines + [f"Not run yet: no committed data in `{shown(exp_dir)}/`. Command: `{cmd}` (then "
                        "`python benchmarks/learning.py --page`, or `--all`, which copies its data).", ""]
    if earlier:
        lines += [f"Replaced by the comparison above; kept with its data (`{shown(exp_dir)}/`). Its own page: "
                  f"[learning_{plot_dir}.md](learning_{plot_dir}.md).", ""]
    if results is not None:
        write_page_file(summary, results, exp_dir, quick)
    status = heldout_status(summary["heldout_file"], summary["heldout_sha256"], summary["tasks"])
    return lines + [f"Held-out set: {status}; "
                    f"{commit_text(summary)}.", "", page(summary, plot_dir, exp_dir), ""]
