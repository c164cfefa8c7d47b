"""The algorithms comparison's runner (``benchmarks/compare_algorithms.py``): GRPO, PPO (clip-higher), online
DPO, SFT-continued and the declared options (:data:`harness.experiments.COMPARE`) from one cold start, each
for the same wall time, evaluated on the fixed held-out set at points of its budget. It writes
``<out>/compare.json`` and copies the data the pages read (:mod:`harness.export`); it renders nothing
(:mod:`harness.compare_page` does)."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import gc
import hashlib
import json
import logging
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.ledger import git_state
from harness import export
from harness.experiments import COMPARE, DIAGNOSTICS
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


def by_family(episodes: Path, n: int) -> dict[str, float]:
    """Average@N per task family of saved eval episodes."""
    from agentrl.algos.evaluation.report import summarize
    from agentrl.algos.rollout.trajectory import load_trajectories

    return summarize(load_trajectories(episodes), n, source_key="family").em_by_source


def summarize_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """Run means of :data:`DIAGNOSTICS` and the first/last rollout reward (only the keys the run logged)."""
    out = {}
    for key in DIAGNOSTICS:
        values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = statistics.fmean(values)
    rewards = [r["reward/mean"] for r in records if "reward/mean" in r]
    if rewards:
        k = max(1, len(rewards) // 4)
        out["reward_first_quarter"] = statistics.fmean(rewards[:k])
        out["reward_last_quarter"] = statistics.fmean(rewards[-k:])
    return out


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


class Runner:
    """Holds the base model once; makes the cold start, evaluates, and runs one (algorithm, seed)."""

    def __init__(self, cfg, out: Path, tasks: list[dict[str, Any]], sections: dict[str, list[str]],
                 ledger: Path | None = None):
        from agentrl.algos.models import load_model

        self.cfg, self.out, self.tasks, self.ledger = cfg, out, tasks, ledger
        self.sections = sections
        self.base, self.tokenizer = load_model(cfg.model, dtype=cfg.dtype, device=cfg.device,
                                               attn_implementation=cfg.attn_implementation)

    def eval_config(self):
        from agentrl.algos.recipes.main_job import eval_collector

        return eval_collector(self.cfg)

    def evaluate(self, policy, path: Path):
        from agentrl.algos.evaluation.evaluate import evaluate
        from agentrl.algos.evaluation.report import load_report

        if path.with_suffix(".summary.json").is_file():
            return load_report(path)
        return evaluate(self.cfg.env, policy, self.tasks, self.cfg.eval_n, self.eval_config(),
                        env_kwargs=self.cfg.env_kwargs, out=path, progress=self.cfg.progress, ledger=self.ledger)

    def cold_start(self, given: str | None) -> tuple[Path, dict[str, Any]]:
        """The shared cold-start adapter (made once in ``<out>/cold_start`` unless ``given``) and its
        provenance."""
        from agentrl.algos.recipes.main_job import stage_config
        from agentrl.algos.training.trainer import Trainer

        if given:
            return resolve_cold_start(given), {"source": str(given), "seconds": None}
        run_dir = self.out / "cold_start"
        info_path = run_dir / "cold_start.json"
        if (run_dir / "adapter" / "adapter_config.json").is_file() and info_path.is_file():
            return run_dir / "adapter", json.loads(info_path.read_text())
        t0 = time.perf_counter()
        tc = stage_config(self.cfg, "sft", run_dir, progress=False, report_to=["none"])
        Trainer(tc, model=copy.deepcopy(self.base), tokenizer=self.tokenizer).train()
        families = self.cfg.stages.sft.get("env_kwargs", {}).get("families", [])
        info = {"source": f"made here: the main job's SFT stage ({tc.steps} steps of "
                          f"{tc.algorithm.batch_size} on {tc.algorithm.num_demos} demos of "
                          f"{', '.join(families) or 'all families'})",
                "seconds": time.perf_counter() - t0}
        info_path.write_text(json.dumps(info) + "\n")
        return run_dir / "adapter", info

    def eval_cold_start(self, adapter: Path):
        from agentrl.algos.models.lora import load_adapter
        from agentrl.algos.policy.hf import HFPolicy

        path = self.out / "eval" / "cold_start.jsonl"
        if path.with_suffix(".summary.json").is_file():
            return self.evaluate(None, path)
        model = load_adapter(copy.deepcopy(self.base), adapter)
        report = self.evaluate(HFPolicy(model, self.tokenizer), path)
        del model
        gc.collect()
        return report

    def train_config(self, algo: str, seed: int, adapter: Path, run_dir: Path):
        from agentrl.algos.config import apply_overrides, deep_merge, nested
        from agentrl.algos.recipes.main_job import stage_config

        common = dict(seed=seed, adapter=str(adapter), steps=10**9, save_every=0, progress=False,
                      report_to=["none"])
        if algo == "sft":
            return stage_config(self.cfg, "sft", run_dir, **common)
        # the RL stage with this algorithm: its section settings (ppo.*, dpo.*: only the run's own is kept), then
        # an option's changes (grpo.turn_weight=1, lr=6e-5) on top of the main job's
        changes: dict[str, Any] = {name: apply_overrides({}, items) for name, items in self.sections.items()}
        option = algo in COMPARE.options
        changes = deep_merge(changes, {"algo": COMPARE.algo(algo), **nested(COMPARE.settings(algo))} if option
                             else {"algo": algo}, whole=())
        try:
            tc = stage_config(self.cfg, "rl", run_dir, **changes, **common)
            tc.validate()  # e.g. ReLIFT's term against the group (check_relift_balance)
        except ValueError as e:
            raise SystemExit(f"--algos {algo}: {e}") from None
        return tc

    def run(self, algo: str, seed: int, adapter: Path, seconds: float, fractions: list[float],
            max_steps: int | None) -> dict[str, Any]:
        """One (algorithm, seed): train for ``seconds`` of wall time, evaluating at each fraction of it."""
        from agentrl.algos.evaluation.ledger import git_state
        from agentrl.algos.evaluation.run_log import MetricsLogger, read_metrics
        from agentrl.algos.models.lora import save_adapter
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.training.trainer import Trainer

        run_dir = self.out / f"{algo}-s{seed}"
        done = run_dir / "result.json"
        if done.is_file():
            result = json.loads(done.read_text())
            return result if "commit" in result else {**result, **ledger_commit(run_dir, result, self.ledger)}
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a killed run: redo it whole (its clock restarted)
        trainer = Trainer(self.train_config(algo, seed, adapter, run_dir), model=copy.deepcopy(self.base),
                          tokenizer=self.tokenizer)
        if algo == "sft" and seed == self.cfg.seed:
            from agentrl.algos.recipes.main_job import stage_config

            cold = stage_config(self.cfg, "sft", run_dir)  # continue the cold start's demos
            trainer.data_pos = cold.steps * cold.algorithm.batch_size
        policy = trainer.policy or HFPolicy(trainer.model, self.tokenizer)
        log = MetricsLogger(run_dir, report_to=["none"])
        points, clock, pending = [], 0.0, list(fractions)
        try:
            while pending:
                if takes_step(clock, trainer.global_step, pending[0] * seconds, max_steps):
                    t0 = time.perf_counter()
                    metrics = trainer.step()
                    clock += time.perf_counter() - t0
                    log.log(trainer.global_step, metrics)
                    logger.info("%s seed %d step %d: %.0f of %.0f s", algo, seed, trainer.global_step, clock, seconds)
                    continue
                frac = pending.pop(0)
                policy.update_weights(trainer.model)
                episodes = run_dir / "eval" / f"at-{frac:g}.jsonl"
                report = self.evaluate(policy, episodes)
                points.append({"fraction": frac, "train_seconds": clock, "step": trainer.global_step,
                               "average_at_n": report.average_at_n, "pass_at_n": report.pass_at_n})
        finally:
            log.close()
            trainer.close_collector()
        save_adapter(trainer.model, run_dir / "adapter")
        result = {"algo": algo, "seed": seed, **git_state(ROOT), "steps": trainer.global_step, "train_seconds": clock,
                  "points": points,
                  "final": report.to_dict(),
                  "final_by_family": by_family(episodes, self.cfg.eval_n),
                  "diagnostics": summarize_metrics(read_metrics(run_dir))}
        done.write_text(json.dumps(result, indent=1) + "\n")
        del trainer, policy
        gc.collect()
        return result


def ledger_commit(run_dir: Path, result: dict[str, Any], ledger: Path | None) -> dict[str, Any]:
    """``{"commit", "dirty", "commit_from"}`` of a finished run whose ``result.json`` predates runs recording
    their commit: those of the ledger row of its final evaluation (the same episodes file and score; the last
    such row), or ``{}`` when the ledger has none."""
    from agentrl.algos.evaluation.ledger import read

    if ledger is None:
        return {}
    episodes = (run_dir / "eval" / f"at-{result['points'][-1]['fraction']:g}.jsonl").resolve()
    rows = [row for row in read(ledger) if row.get("out") and Path(row["out"]).resolve() == episodes
            and row["scores"].get("average_at_n") == result["final"]["average_at_n"]]
    if not rows:
        return {}
    return {"commit": rows[-1]["commit"], "dirty": rows[-1].get("dirty", False),
            "commit_from": f"ledger row {rows[-1]['id']} (its final evaluation)"}


def takes_step(clock: float, steps: int, budget: float, max_steps: int | None) -> bool:
    """Whether a run with ``steps`` steps in ``clock`` seconds takes one more within ``budget`` seconds: the
    first step always; another while the budget's end is nearer the next step's expected end than its start
    (``clock`` plus half the mean step time is below the budget). Runs so end at the step count whose time is
    nearest the budget, over or under by at most about half a step, where "start while time is left" let the
    last step overrun by up to a whole one (half the budget, with two steps in it)."""
    if max_steps is not None and steps >= max_steps:
        return False
    return steps == 0 or clock + 0.5 * clock / steps < budget


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


def run_compare(args, argv) -> tuple[dict[str, Any], Path]:
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


def _run_compare(args, argv) -> tuple[dict[str, Any], Path]:
    from agentrl.algos.config import apply_overrides, config_from_dict, nested
    from agentrl.algos.evaluation.ledger import dumps
    from agentrl.algos.recipes.main_job import MainJobConfig, peak_rss_gib
    from harness.export import export_compare
    from harness.heldout import path_for_env, read, set_env_kwargs
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
    runner = Runner(cfg, out, tasks, sections, Path(args.ledger))
    adapter, cold_info = runner.cold_start(args.cold_start)
    cold = runner.eval_cold_start(adapter)
    runs = {algo: [runner.run(algo, s, adapter, minutes * 60, fractions, args.max_steps) for s in seeds]
            for algo in algos}
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
