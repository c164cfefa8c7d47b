"""The algorithms comparison's runner (``benchmarks/compare_algorithms.py``): GRPO, PPO (clip-higher), online
DPO, SFT-continued and the declared options (:data:`harness.experiments.COMPARE`) from one cold start, each
for the same wall time, evaluated on the fixed held-out set at points of its budget, in pieces of the one piece
runner (:mod:`harness.compare_exec`, :func:`harness.axes_run.schedule`). It writes
``<out>/compare.json`` and copies the data the pages read (:mod:`harness.export`); it renders nothing
(:mod:`harness.compare_page` does)."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.ledger import git_state
from harness import export
from harness.experiments import COMPARE
from harness.layout import ROOT

logger = logging.getLogger("compare_algorithms")


def parse_fractions(text: str) -> list[float]:
    """``"0.5,1"`` -> ``[0.5, 1.0]``: sorted fractions in (0, 1], always ending with 1 (the end of the
    budget)."""
    try:
        points = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--eval-points: expected fractions like 0.5,1, got {text!r}") from None
    if not points or points[0] <= 0 or points[-1] > 1:
        raise ValueError(f"--eval-points: fractions must lie in (0, 1], got {text!r}")
    return points if points[-1] == 1 else [*points, 1.0]


def split_overrides(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """MainJobConfig overrides, and those of the ``ppo`` / ``dpo`` sections (``ppo.eps_high=0.3``)."""
    pipeline, sections = [], {k: list(v) for k, v in COMPARE.sections.items()}
    for item in overrides:
        head = item.split(".", 1)[0]
        if head in sections and "=" in item:
            sections[head].append(item.split(".", 1)[1])
        else:
            pipeline.append(item)
    return pipeline, sections


def resolve_cold_start(path: str) -> Path:
    """The adapter folder of ``--cold-start``: the folder itself, its ``adapter/`` or a main-job run's
    ``sft/adapter``."""
    p = Path(path)
    for candidate in (p, p / "adapter", p / "sft" / "adapter"):
        if (candidate / "adapter_config.json").is_file():
            return candidate
    raise ValueError(f"--cold-start: no adapter (adapter_config.json) in {p}, {p / 'adapter'} or {p / 'sft/adapter'}")


def check_setup(out: Path, setup: dict[str, Any], flag: str = "--out") -> None:
    """Record the settings every run of ``out`` shares in ``<out>/setup.json``; refuse to mix runs made with
    other settings (finished runs are read back, so they must be comparable). Algorithms and seeds may be
    added."""
    path = out / "setup.json"
    setup = json.loads(json.dumps(setup, default=str))
    if path.is_file():
        old = json.loads(path.read_text())
        changed = sorted(k for k in set(old) | set(setup) if old.get(k) != setup.get(k))
        if changed:
            raise SystemExit(f"{out} holds runs made with other settings ({', '.join(changed)} differ); "
                             f"use another {flag}, or the same settings")
    else:  # (the axes runner's --data is committed data: written by its one writer)
        export.write_new(path, json.dumps(setup, indent=1) + "\n")


def aggregate(cold: float, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean / min / max final held-out success over seeds, per-seed deltas and mean diagnostics. ``beat``:
    every seed ended above the cold start (a mean above it with one seed below is within the seed-to-seed
    spread)."""
    finals = [r["final"]["average_at_n"] for r in results]
    diag: dict[str, float] = {}
    for key in {k for r in results for k in r["diagnostics"]}:
        values = [r["diagnostics"][key] for r in results if key in r["diagnostics"]]
        diag[key] = statistics.fmean(values)
    mean = statistics.fmean(finals)
    fams = sorted({f for r in results for f in r.get("final_by_family", {})})
    family = {f: statistics.fmean(r["final_by_family"].get(f, 0.0) for r in results) for f in fams}
    return {"mean": mean, "min": min(finals), "max": max(finals), "by_family": family,
            "std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "seeds_above": sum(f > cold for f in finals), "seeds": len(finals), "beat": min(finals) > cold,
            "steps": [r["steps"] for r in results], "diagnostics": diag}


def run_compare(args, argv) -> tuple[dict[str, Any] | None, Path | None]:
    """The comparison ``args`` (``benchmarks/compare_algorithms.py``'s command line) asks for; returns its
    summary (``<out>/compare.json``) and the folder its committed data was copied to
    (``<results>/data/<name>``). The rejection-sampling control (algo ``rft``) is registered for the run only."""
    from agentrl.algos.run_folder import claim_run
    from agentrl.algos.training.checkpoint import RunInUse
    from harness.controls import rejection_sampling_registered

    try:  # one writer per run folder: a second comparison on this --out is refused in one line
        with claim_run(compare_out(args)), rejection_sampling_registered():
            return _run_compare(args, argv)
    except RunInUse as e:
        raise SystemExit(f"compare_algorithms.py: {e}") from None


def compare_out(args) -> Path:
    """The comparison's run folder: ``--out``, else ``runs/compare-algorithms[-quick]``."""
    return Path(args.out or f"runs/compare-algorithms{'-quick' if args.quick else ''}")


def _run_compare(args, argv) -> tuple[dict[str, Any] | None, Path | None]:
    from agentrl.algos.config import apply_overrides, config_from_dict, nested
    from agentrl.algos.evaluation.ledger import dumps
    from agentrl.algos.evaluation.report import load_report
    from agentrl.algos.recipes.main_job import MainJobConfig, peak_rss_gib
    from harness.axes_run import schedule
    from harness.compare_exec import Executor, by_family, finished_by, plan, result
    from harness.export import export_compare
    from harness.heldout import path_for_env, read, set_env_kwargs
    from harness.learning_exec import RunStore
    from harness.machine import machine

    git_state(ROOT)  # the commit this run starts from: what every later record of this process names
    machine()  # the machine and the load it starts under (cached: compare.json records these)
    options = list(COMPARE.options)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = sorted(set(algos) - set(COMPARE.algos) - set(options))
    if unknown or not algos:
        raise SystemExit(f"--algos: unknown {unknown} (choose from {', '.join([*COMPARE.algos, *options])})")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    fractions = parse_fractions(args.eval_points)
    minutes = args.minutes if args.minutes is not None else (0.03 if args.quick else COMPARE.minutes)
    suffix = "_quick" if args.quick else ""
    out = compare_out(args)
    out.mkdir(parents=True, exist_ok=True)
    heldout_file = Path(args.heldout) if args.heldout else path_for_env(COMPARE.env, COMPARE.heldout)
    tasks = read(heldout_file)[: COMPARE.quick_tasks if args.quick else None]
    pipeline_overrides, sections = split_overrides(args.overrides)
    preset = {**nested(COMPARE.quick if args.quick else {}), "env": COMPARE.env, "out": str(out), "progress": False,
              "env_kwargs": set_env_kwargs(heldout_file),  # the world the set was drawn from
              **({"model": args.model} if args.model else {})}
    cfg = config_from_dict(MainJobConfig, apply_overrides(preset, pipeline_overrides))
    check_setup(out, {"pipeline": dataclasses.asdict(cfg), "sections": sections, "minutes": minutes,
                      "eval_points": fractions, "max_steps": args.max_steps, "cold_start": args.cold_start,
                      "heldout_sha256": hashlib.sha256(dumps(tasks).encode()).hexdigest()})
    started = datetime.datetime.now().astimezone()
    t0 = time.perf_counter()
    given = resolve_cold_start(args.cold_start) if args.cold_start else None
    pieces = plan(algos, seeds, fractions, cold_start=given is None)
    executor = Executor(cfg, tasks, sections, minutes * 60, fractions, args.max_steps, Path(args.ledger), given)
    store = RunStore(out, pieces, finished_by)
    budget = getattr(args, "budget_minutes", None)
    done = schedule(pieces, out, executor, COMPARE, None if budget is None else 60 * budget, minutes, store=store)
    left = [p.key for p in pieces if p.key not in store.finished()]
    if left:
        print(f"stopped before {done.stopped_before or left[0]}: it would not finish within --budget-minutes; "
              f"{len(left)} of {len(pieces)} pieces left; run the same command again to resume")
        return None, None
    cold = load_report(out / "eval" / "cold_start.jsonl")
    cold_info = ({"source": str(args.cold_start), "seconds": None} if given is not None
                 else json.loads((out / "cold_start" / "cold_start.json").read_text()))
    runs = {algo: [result(out / f"{algo}-s{s}", cfg.eval_n, Path(args.ledger)) for s in seeds] for algo in algos}
    shown = sys.argv[1:] if argv is None else argv
    summary = {
        "env": COMPARE.env, "quick": args.quick, "algos": algos, "seeds": seeds, "minutes": minutes,
        "eval_points": fractions, "eval_n": cfg.eval_n, "tasks": len(tasks),
        "heldout_file": str(heldout_file.relative_to(ROOT) if heldout_file.is_relative_to(ROOT) else heldout_file),
        "heldout_sha256": hashlib.sha256(heldout_file.read_bytes()).hexdigest(),
        "cold_start": cold.to_dict(),
        "cold_start_by_family": by_family(out / "eval" / "cold_start.jsonl", cfg.eval_n),
        "cold_start_source": cold_info["source"], "model": cfg.model, "sections": sections,
        "options": {a: {"algo": COMPARE.algo(a), "settings": COMPARE.settings(a)} for a in algos
                    if a in COMPARE.options},
        "labels": {a: COMPARE.label(a) for a in algos},
        "command": " ".join(["python benchmarks/compare_algorithms.py", *shown]),
        "started": started.isoformat(timespec="minutes"), "invocation_seconds": time.perf_counter() - t0,
        "peak_rss_gib": peak_rss_gib(), "machine": machine(), "runs": runs,
        "aggregate": {algo: aggregate(cold.average_at_n, rs) for algo, rs in runs.items()},
        **git_state(ROOT),  # the commit (and uncommitted changes) the figures came from, as learning.py records it
    }
    (out / "compare.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    # the results page's raw data (compare.json and per-task scores), as learning.py copies its runs' data
    data = export_compare(out, Path(args.results) / "data" / f"compare_algorithms{suffix}")
    return summary, data.parent
