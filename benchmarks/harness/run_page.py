"""A learning run's own page, ``docs/results/learning_<name>.md``, from its committed data only (its
``learning.json``, per-task scores and metrics in ``docs/results/data/<name>/``). ``benchmarks/learning.py``
writes it at the end of a run; the pages of runs committed before the run's summary recorded what this page
needs (``page`` in ``learning.json``) were written by the run itself and are kept as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.data import family_table, grpo_metrics
from harness.experiments import COLD_START, CONTROL, RL, TEXT_LABELS, experiment
from harness.figures import EVAL_CHART, figure_names
from harness.tables import extra_table, signal_table


def can_render(run: dict[str, Any]) -> bool:
    """Whether ``run`` (a ``learning.json``) records what its page needs (runs from this harness on)."""
    return isinstance(run.get("page"), dict)


def run_page(run: dict[str, Any], exp_dir: Path, results: Path) -> str:
    """The markdown of the run's page; its plots are the ones the run drew that its committed data in ``exp_dir``
    draws again (:func:`harness.figures.figure_names`: drawn when the site is built, as ``<name>/<plot>``)."""
    from agentrl.algos.evaluation.report import EvalReport, results_table

    page, c, name = run["page"], run["config"], exp_dir.name
    rows = [(label, EvalReport.from_dict(d)) for label, d in run["rows"]]
    by = dict(rows)
    n = run["eval_n"]
    rl = by[RL]
    engine, stage_s = run.get("engine"), run["stage_seconds"]
    variant = f" ({run['variant']})" if run.get("variant") else ""
    env_kwargs = f" of env {json.dumps(c['env_kwargs'])}" if c["env_kwargs"] else ""
    demos = ", ".join(c["sft_families"]) if c["sft_families"] else "all task families"
    served = (f" Engine {engine}: every evaluation and GRPO rollout sampled by a {engine} server "
              f"(`{run['run_dir']}/vllm.log`), SFT in process." if engine else "")
    lines = [
        f"# Proof of learning: {run['env']}{variant}{' (quick smoke run)' if run['quick'] else ''}", "",
        f"Model {run['model']} ({c['dtype']}), LoRA r={c['lora_r']}. {page['tasks']} held-out tasks (never "
        f"trained on) from `{run['heldout_file']}`, N = {n} sample(s) per task at temperature "
        f"{run['eval_temperature']}.{served}", "",
        f"Cold start: SFT on {c['sft_demos']} demonstrations of {demos}{env_kwargs}, {c['sft_steps']} steps "
        f"of {c['sft_batch_size']}. RL: GRPO on all task families, {c['rl_steps']} steps of "
        f"{c['rl_tasks_per_step']} tasks x {c['rl_group_size']} samples, lr {c['rl_lr']}, beta "
        f"{c['grpo_beta']}. Replies of at most {c['max_new_tokens']} tokens, {c['max_turns']} turns.", "",
        results_table(rows), "",
        extra_table(rows), "",
    ]
    families, tiers = family_table(run, exp_dir), family_table(run, exp_dir, "tier")
    if families:
        saw = f"only {', '.join(c['sft_families'])}" if c["sft_families"] else "all families"
        lines += ["Per task family (Average@N on the held-out tasks of each family; the cold start saw "
                  f"{saw}):", "", families, ""]
    if tiers:
        lines += ["Per tier (Average@N):", "", tiers, ""]
    lines += signal_table(grpo_metrics(exp_dir))

    def points(other: str) -> str:
        return f"{100 * (rl.average_at_n - by[other].average_at_n):+.1f}"

    lines.append(f"RL vs its cold start: {points(COLD_START)} points of Average@{n}.")
    if TEXT_LABELS["rl"] in by:
        lines.append(f"Code interpreter vs text-only, both after RL: {points(TEXT_LABELS['rl'])} points of "
                     f"Average@{n}.")
    control, rl_s = page.get("control"), stage_s.get("grpo", 0.0)
    if control is not None and CONTROL in by:
        lines.append(f"RL vs the SFT control ({control['steps']} more SFT steps in "
                     f"{control['seconds'] / 60:.1f} min, the GRPO stage's {rl_s / 60:.1f} min): "
                     f"{points(CONTROL)} points.")
    if run.get("variant"):
        overrides = " ".join(run["overrides"]) or "no overrides"
        lines += ["", f"Variant `{run['variant']}` of the recipe: `{overrides}`."]
    if run.get("cold_start_from"):
        lines += ["", f"The base and cold-start rows (and their stage) were read back from "
                      f"`{run['cold_start_from']}`, not re-run: only the stages after the cold start ran in "
                      "this invocation."]
    if page.get("note"):
        lines += ["", page["note"]]
    timings = ", ".join(f"{k} {v / 60:.1f} min" for k, v in page["timings"].items() if k != "total")
    drawn = set(figure_names(exp_dir))
    plots = [p for p in page["plots"] if p in drawn]
    chart = EVAL_CHART
    lines += [
        "", f"Goal: {experiment(run['env']).goal}", "",
        f"Stage times of this invocation (stages read back from an earlier run show ~0): "
        f"{timings or 'all resumed'}; as recorded in the run's metrics: SFT stage "
        f"{stage_s.get('sft', 0.0) / 60:.1f} min, GRPO stage {rl_s / 60:.1f} min; this invocation "
        f"{run['invocation_seconds'] / 60:.1f} min.", "",
        "Plots: " + ", ".join(f"[{p}]({name}/{p})" for p in plots), "",
        f"![held-out results]({name}/{chart})" if chart in plots else "", "",
        f"Produced by `{run['command']}` on {run['started']} (run directory `{run['run_dir']}`).", "",
    ]
    return "\n".join(lines)


def write_run_page(exp_dir: Path, results: Path) -> Path | None:
    """Write ``<results>/learning_<name>.md`` from the data in ``exp_dir``; None when its ``learning.json``
    predates :func:`can_render` (its page stays the copy its run wrote)."""
    run = json.loads((exp_dir / "learning.json").read_text(encoding="utf-8"))
    if not can_render(run):
        return None
    path = results / f"learning_{exp_dir.name}.md"
    path.write_text(run_page(run, exp_dir, results), encoding="utf-8")
    return path
