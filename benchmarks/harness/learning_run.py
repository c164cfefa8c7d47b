"""The learning runner: the main job (base -> SFT cold start -> GRPO -> eval) of one declared experiment on
its fixed held-out set, plus its controls, in pieces of the one piece runner (:mod:`harness.learning_exec`,
:func:`harness.axes_run.schedule`); it leaves ``<out>/learning.json`` and copies the run's data to
``docs/results/data/<name>/`` (:mod:`harness.export`). It renders nothing: ``benchmarks/learning.py`` writes
the pages from that data afterwards (:mod:`harness.run_page`, :mod:`harness.pages`)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.ledger import dumps, git_state
from harness.controls import reuse_cold_start, stage_seconds
from harness.experiments import (
    COLD_START,
    CONTROL,
    EXPERIMENTS,
    RL,
    TEXT_LABELS,
    TEXT_ONLY_BASE,
    experiment,
    learning_record,
)
from harness.export import export_run
from harness.heldout import SPECS, names_for_env, path_for_env, read, set_env_kwargs
from harness.layout import ROOT, SCRIPTS
from harness.machine import machine
from harness.record import Record

logger = logging.getLogger("learning")


def heldout_path(env: str, name: str | None = None) -> Path:
    """The committed file of the held-out set ``name`` of ``env`` (default its experiment's)."""
    return path_for_env(env, name)


def quick_heldout(env: str, n: int, out: Path, name: str | None = None) -> Path:
    """The first ``n`` tasks of ``env``'s fixed held-out set, as ``<out>/heldout-quick.jsonl`` (--quick
    runs)."""
    path = out / "heldout-quick.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(read(heldout_path(env, name))[:n]), encoding="utf-8")
    return path


def all_commands(quick: bool, model: str | None, runs: Path, results: str) -> list[list[str]]:
    """The child commands of ``--all``: every env's experiment, then the algorithm comparison."""
    common = (["--quick"] if quick else []) + (["--model", model] if model else []) + ["--results", results]
    suffix = "-quick" if quick else ""
    cmds = [[sys.executable, str(SCRIPTS / "learning.py"), "--env", e.env, "--out",
             str(runs / f"learning-{e.name}{suffix}"), *common] for e in EXPERIMENTS]
    cmds.append([sys.executable, str(SCRIPTS / "compare_algorithms.py"), "--out",
                 str(runs / f"compare-algorithms{suffix}"), *common])
    return cmds


def data_dir(args) -> Path:
    """Where a run's committed data goes and the page reads it: ``--data``, else ``<results>/data``."""
    return Path(args.data) if args.data else Path(args.results) / "data"


def copy_plots(out: Path, dest: Path) -> list[Path]:
    """Copy every PNG of the run (stage curves and the eval chart) to ``dest`` as ``<stage>_<name>.png``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    copied = []
    for png in sorted(out.rglob("*.png")):
        # <out>/<stage>/plots/x.png -> <stage>_x.png; <out>/plots/x.png -> eval_x.png; nested runs
        # (text_only/) keep their folder in the name, so the text-only pipeline's curves do not overwrite the
        # tool run's
        parts = png.relative_to(out).parent.parts
        stage = "_".join(p for p in parts if p != "plots") or "eval"
        target = dest / f"{stage}_{png.name}"
        shutil.copyfile(png, target)
        copied.append(target)
    return copied


def shown_args(argv: list[str]) -> list[str]:
    """The command-line arguments without ``--note``'s text (it is shown in the page itself)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--note":
            skip = True
            out.append('--note "..."')
        elif a.startswith("--note="):
            out.append('--note "..."')
        else:
            out.append(a)
    return out


def write_summary(out: Path, cfg, args, argv, overrides: list[str], rows, started, seconds: float, name: str,
                  stages: dict[str, float], page: dict[str, Any]) -> Path:
    """``<out>/learning.json``: what the results pages need, all from this run (figures, command, time,
    machine; ``page``: what only the run's own page shows, :mod:`harness.run_page`)."""
    import hashlib

    from agentrl.algos.recipes.main_job import peak_rss_gib, stage_config

    sft, rl = stage_config(cfg, "sft", out / "sft"), stage_config(cfg, "rl", out / "grpo")
    tasks_file = Path(cfg.eval_tasks_file)
    digest = hashlib.sha256(tasks_file.read_bytes()).hexdigest() if tasks_file.is_file() else None
    shown = shown_args(sys.argv[1:] if argv is None else argv)
    summary = {
        "env": cfg.env, "quick": args.quick, "seed": cfg.seed, "model": cfg.model, "eval_n": cfg.eval_n,
        "eval_temperature": cfg.eval_temperature, "heldout_file": str(cfg.eval_tasks_file),
        "heldout_sha256": digest, "command": " ".join(["python benchmarks/learning.py", *shown]),
        "started": started.isoformat(timespec="minutes"), "invocation_seconds": seconds,
        "stage_seconds": stages, "peak_rss_gib": peak_rss_gib(), "machine": machine(),
        "results_page": f"learning_{name}.md",
        # the data's names of the settings (the pages read them): the SFT stage's own families, both stages' budgets
        "config": {"env_kwargs": dict(cfg.env_kwargs),
                   "sft_families": list(cfg.stages.sft.get("env_kwargs", {}).get("families", [])),
                   "sft_demos": sft.algorithm.num_demos, "sft_steps": sft.steps,
                   "sft_batch_size": sft.algorithm.batch_size, "rl_steps": rl.steps,
                   "rl_tasks_per_step": rl.tasks_per_step, "rl_group_size": rl.group_size,
                   "rl_lr": rl.lr, "max_new_tokens": rl.collector.max_new_tokens, "max_turns": rl.collector.max_turns,
                   "dtype": cfg.dtype, "lora_r": cfg.lora.r, "grpo_beta": getattr(rl.algorithm, "beta", None)},
        "rows": [[label, report.to_dict()] for label, report in rows], **git_state(ROOT),
        "primary_metric": SPECS[experiment(cfg.env).heldout].primary_metric, "page": page,
        "variant": args.variant, "overrides": overrides, "run_dir": str(out),
        "cold_start_from": str(args.reuse_cold_start) if args.reuse_cold_start else None,
        "engine": getattr(args, "engine", None),
    }
    path = out / "learning.json"
    path.write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    return path


@dataclasses.dataclass
class Setup:
    """A learning run, configured: its experiment, name, run directory, MainJobConfig, the overrides it was
    given (the declared variant's, then the command line's) and the ledger it appends to."""

    exp: Record
    name: str
    out: Path
    cfg: Any
    overrides: list[str]
    ledger: Path


def configure(args) -> Setup:
    """The run ``args`` (``benchmarks/learning.py``'s command line) asks for: the experiment's settings (full
    or ``--quick``), its declared variant's overrides and set, the set's world (its sidecar's ``env_kwargs``)
    and the command line's overrides, in that order."""
    from agentrl.algos.config import apply_overrides, config_from_dict, nested
    from agentrl.algos.recipes.main_job import MainJobConfig, stage_config

    if args.variant and not args.variant.replace("-", "").isalnum():
        raise SystemExit(f"--variant {args.variant!r}: use letters, digits and '-' (it names files)")
    try:
        exp = learning_record(args.env, args.variant)  # the plain recipe's record, or its variant's
    except ValueError as e:
        raise SystemExit(str(e)) from None
    heldout_name = args.heldout or (exp.heldout if exp.variant else None)
    name = exp.name + ("_quick" if args.quick else "")
    out = Path(args.out or f"runs/learning-{name.replace('_', '-')}")
    preset = nested(exp.quick if args.quick else exp.full)
    try:
        heldout_file = heldout_path(args.env, heldout_name)
    except (KeyError, ValueError) as e:
        raise SystemExit(f"--heldout {heldout_name}: {e}; the sets of {args.env}: "
                         f"{', '.join(names_for_env(args.env))}") from None
    world = set_env_kwargs(heldout_file)  # tooluse_v3: {"items": 999}
    preset["env_kwargs"] = {**preset.get("env_kwargs", {}), **world}
    if args.quick:  # the first rows of the fixed held-out set
        preset["eval_tasks_file"] = str(quick_heldout(args.env, preset["eval_tasks"], out, heldout_name))
    else:
        preset["eval_tasks_file"] = str(heldout_file.relative_to(ROOT))
    if args.model:
        preset["model"] = args.model
    overrides = [*exp.overrides, *args.overrides]
    preset.update(env=args.env, out=str(out))
    cfg = config_from_dict(MainJobConfig, apply_overrides(preset, overrides))
    try:
        stage_config(cfg, "rl", out / "grpo").validate()  # e.g. ReLIFT's term against the group (check_relift_balance)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    return Setup(exp, name, out, cfg, overrides, Path(args.ledger))


def run(args, argv, setup: Setup, policy=None) -> Path | None:
    """The experiment after its configuration, in pieces of the one piece runner (:mod:`harness.learning_exec`):
    the main job, the controls, then ``<out>/learning.json`` and the run's committed data (``<data>/<name>/``,
    returned). With ``--budget-minutes`` it stops before a piece that would not fit (None: run again to resume)."""
    from agentrl.algos.evaluation.plot import plot_eval
    from harness.axes_run import schedule
    from harness.learning_exec import Executor, RunStore, plan, report, rows, timings

    exp, cfg, out, ledger = setup.exp, setup.cfg, setup.out, setup.ledger
    if args.reuse_cold_start:
        reuse_cold_start(Path(args.reuse_cold_start), out)
    started = datetime.datetime.now().astimezone()
    t0 = time.perf_counter()
    pieces = plan(exp, control=not args.no_control, text_only=not args.no_text_only)
    executor = Executor(cfg, ledger, policy, args.minutes * 60 if args.minutes else None)
    store = RunStore(out, pieces)
    budget = getattr(args, "budget_minutes", None)
    done = schedule(pieces, out, executor, exp, None if budget is None else 60 * budget, store=store)
    left = [p.key for p in pieces if p.key not in store.finished()]
    if left:
        print(f"stopped before {done.stopped_before or left[0]}: it would not finish within --budget-minutes; "
              f"{len(left)} of {len(pieces)} pieces left; run the same command again to resume")
        return None
    ran = {k: float(m.get("wall_seconds", 0.0)) for k, m in store.finished().items() if k in done.ran}
    times = timings(ran, time.perf_counter() - t0)
    report(cfg, out, len(executor.tasks), times)
    if exp.text_only_pipeline and any(p.key.startswith("text_only/") for p in pieces):
        report(executor.text_cfg, out / "text_only", len(executor.tasks),
               timings({k.removeprefix("text_only/"): v for k, v in ran.items() if k.startswith("text_only/")},
                       time.perf_counter() - t0))
    table = rows(exp, out, pieces)
    control = None
    if (out / "sft_control" / "control.json").is_file() and not args.no_control:
        control = json.loads((out / "sft_control" / "control.json").read_text())
    results_dir = Path(args.results)
    results_dir.mkdir(parents=True, exist_ok=True)
    plot_eval(table, out / "plots" / "eval_comparison.png", title=f"{cfg.env}: held-out results")
    plots = copy_plots(out, results_dir / setup.name)
    by = dict(table)
    page = {"tasks": len(executor.tasks), "control": control, "note": args.note, "plots": [p.name for p in plots],
            "timings": times}
    rl_s = stage_seconds(out / "grpo")
    summary = write_summary(out, cfg, args, argv, setup.overrides, table, started, time.perf_counter() - t0,
                            setup.name, {"sft": stage_seconds(out / "sft"), "grpo": rl_s,
                                         **({"sft_control": control["seconds"]} if control else {})}, page)
    stages = [("base", out / "eval" / "base.jsonl"), (COLD_START, out / "eval" / "sft.jsonl"),
              (RL, out / "eval" / "rl.jsonl"), (CONTROL, out / "eval" / "sft_control.jsonl")]
    stages += [(label, out / "text_only" / "eval" / f"{stem}.jsonl") for stem, label in TEXT_LABELS.items()]
    episodes = {label: p for label, p in stages if label in by} | (
        {TEXT_ONLY_BASE: out / "eval" / "text_only.jsonl"} if exp.text_only_baseline else {})
    data = export_run(out, data_dir(args) / setup.name, json.loads(summary.read_text()), episodes)
    print(f"data for the page: {data.parent}")
    return data.parent
