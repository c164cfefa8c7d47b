"""A learning run's own page, ``docs/results/learning_<name>.md``, from its committed data only (its
``learning.json``, per-task scores and metrics in ``docs/results/data/<name>/``). ``benchmarks/learning.py`` writes
it at the end of a run; the pages of runs committed before the run's summary recorded what this page needs
(``page`` in ``learning.json``) were written by the run itself and are kept as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.data import family_table, grpo_metrics
from harness.experiments import COLD_START, CONTROL, RL, TEXT_LABELS, experiment
from harness.tables import extra_table, signal_table


def can_render(run: dict[str, Any]) -> bool:
    """Whether ``run`` (a ``learning.json``) records what its page needs (runs from this harness on)."""
    return isinstance(run.get("page"), dict)


def run_page(run: dict[str, Any], exp_dir: Path, results: Path) -> str:
    """The markdown of the run's page; ``results``: where its plots were copied (``<results>/<name>/``)."""
    from agentrl.algos.evaluation.report import EvalReport, results_table

    page, c, name = run["page"], run["config"], exp_dir.name
    rows = [(label, EvalReport.from_dict(d)) for label, d in run["rows"]]
    by = dict(rows)
    n = run["eval_n"]
    sft, rl = by[COLD_START], by[RL]
    engine = run.get("engine")
    variant = f" ({run['variant']})" if run.get("variant") else ""
    env_kwargs = f" of env {json.dumps(c['env_kwargs'])}" if c["env_kwargs"] else ""
    lines = [
        f"# Proof of learning: {run['env']}{variant}"
        f"{' (quick smoke run)' if run['quick'] else ''}", "",
        f"Model {run['model']} ({c['dtype']}), LoRA r={c['lora_r']}. {page['tasks']} held-out tasks (never trained "
        f"on) from `{run['heldout_file']}`, N = {n} sample(s) per task at temperature {run['eval_temperature']}."
        + (f" Engine {engine}: every evaluation and GRPO rollout sampled by a {engine} server "
           f"(`{run['run_dir']}/vllm.log`), SFT in process." if engine else ""), "",
        f"Cold start: SFT on {c['sft_demos']} demonstrations of "
        f"{', '.join(c['sft_families']) if c['sft_families'] else 'all task families'}"
        f"{env_kwargs}, {c['sft_steps']} steps of "
        f"{c['sft_batch_size']}. RL: GRPO on all task families, {c['rl_steps']} steps of {c['rl_tasks_per_step']} "
        f"tasks x {c['rl_group_size']} samples, lr {c['rl_lr']}, beta {c['grpo_beta']}. Replies of at most "
        f"{c['max_new_tokens']} tokens, {c['max_turns']} turns.", "",
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
    lines.append(f"RL vs its cold start: {100 * (rl.average_at_n - sft.average_at_n):+.1f} points of Average@{n}.")
    if TEXT_LABELS["rl"] in by:
        lines.append(f"Code interpreter vs text-only, both after RL: "
                     f"{100 * (rl.average_at_n - by[TEXT_LABELS['rl']].average_at_n):+.1f} points of Average@{n}.")
    control, rl_s = page.get("control"), run["stage_seconds"].get("grpo", 0.0)
    if control is not None and CONTROL in by:
        lines.append(f"RL vs the SFT control ({control['steps']} more SFT steps in {control['seconds'] / 60:.1f} min, "
                     f"the GRPO stage's {rl_s / 60:.1f} min): "
                     f"{100 * (rl.average_at_n - by[CONTROL].average_at_n):+.1f} points.")
    if run.get("variant"):
        lines += ["", f"Variant `{run['variant']}` of the recipe: `{' '.join(run['overrides']) or 'no overrides'}`."]
    if run.get("cold_start_from"):
        lines += ["", f"The base and cold-start rows (and their stage) were read back from `{run['cold_start_from']}`, "
                      "not re-run: only the stages after the cold start ran in this invocation."]
    if page.get("note"):
        lines += ["", page["note"]]
    timings = ", ".join(f"{k} {v / 60:.1f} min" for k, v in page["timings"].items() if k != "total")
    plots = [p for p in page["plots"] if (results / name / p).is_file()]
    lines += [
        "", f"Goal: {experiment(run['env']).goal}", "",
        f"Stage times of this invocation (stages read back from an earlier run show ~0): {timings or 'all resumed'}; "
        f"as recorded in the run's metrics: SFT stage {run['stage_seconds'].get('sft', 0.0) / 60:.1f} min, GRPO "
        f"stage {rl_s / 60:.1f} min; this invocation {run['invocation_seconds'] / 60:.1f} min.", "",
        "Plots: " + ", ".join(f"[{p}]({name}/{p})" for p in plots), "",
        f"![held-out results]({name}/eval_eval_comparison.png)" if "eval_eval_comparison.png" in plots else "", "",
        f"Produced by `{run['command']}` on {run['started']} (run directory `{run['run_dir']}`).", "",
    ]
    return "\n".join(lines)


def write_run_page(exp_dir: Path, results: Path) -> Path | None:
    """Write ``<results>/learning_<name>.md`` from the data in ``exp_dir``; None when its ``learning.json`` predates
    :func:`can_render` (its page stays the copy its run wrote)."""
    run = json.loads((exp_dir / "learning.json").read_text(encoding="utf-8"))
    if not can_render(run):
        return None
    path = results / f"learning_{exp_dir.name}.md"
    path.write_text(run_page(run, exp_dir, results), encoding="utf-8")
    return path
