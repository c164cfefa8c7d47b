"""The algorithms comparison (kind ``comparison``: :data:`harness.experiments.COMPARE`) as pieces of the one piece
runner, :func:`harness.axes_run.schedule` (issue 58 step 1).

Its pieces lie in the run folder (``runs/compare-algorithms``, not committed), each finished when its output is there
(written last), so an invocation does only what is missing. In running order:

* ``cold_start`` — the shared cold start, the main job's SFT stage (``cold_start/adapter`` and ``cold_start.json``;
  none when ``--cold-start`` gives an adapter); ``eval/cold_start`` — its evaluation (``eval/cold_start.jsonl``);
* ``<arm>-s<seed>`` — one algorithm (or option, an arm marked ``option``) and seed: the cold start trained for the
  same wall time (evaluation not counted), its adapter saved at each ``--eval-points`` fraction of the budget
  (``adapter-at-<f>``; the end's is ``adapter``), its steps and times in ``cell.json``; a killed one is redone from
  its start (its time budget would not be comparable otherwise);
* ``<arm>-s<seed>/eval/at-<f>`` — the evaluation of the adapter at fraction ``f`` (``eval/at-<f>.jsonl``).

:func:`run_compare` runs them for ``python benchmarks/experiment.py run compare_algorithms``'s options and, once
every one is finished, writes ``<out>/compare.json`` and copies the data the pages read (:mod:`harness.export`); it
renders nothing (:mod:`harness.compare_page` does).

:func:`result` makes each cell's ``result.json`` (the shape ``compare.json`` holds) once its evaluations are in; a
``result.json`` of a run made before the pieces (its evaluations made during training) is read back as it is."""

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
from harness.axes_exec import summarize_metrics, takes_step, train_cold_start
from harness.axes_run import Piece, cell_name
from harness.experiments import COMPARE
from harness.layout import ROOT

logger = logging.getLogger("compare_algorithms")


def plan(algos: list[str], seeds: list[int], fractions: list[float], cold_start: bool = True) -> list[Piece]:
    """Every piece of a comparison of ``algos`` x ``seeds`` evaluated at ``fractions`` of the budget
    (``cold_start``: made here, else given)."""
    made = ("cold_start",) if cold_start else ()
    pieces = [*([Piece("cold_start", "compare:cold_start")] if cold_start else []),
              Piece("eval/cold_start", "compare:eval", made)]
    for algo in algos:
        for seed in seeds:
            key = cell_name(algo, seed)
            pieces.append(Piece(key, f"cell:{algo}", made))
            pieces += [Piece(f"{key}/eval/at-{f:g}", "compare:eval", (key,)) for f in fractions]
    return pieces


def finished_by(out: Path, piece: Piece) -> Path:
    """The file that marks ``piece`` finished in the run folder ``out`` (the last one it writes)."""
    if piece.kind == "compare:eval":
        return out / f"{piece.key}.summary.json"
    if piece.kind == "compare:cold_start":
        return out / "cold_start" / "cold_start.json"
    done, before = out / piece.key / "cell.json", out / piece.key / "result.json"  # before: a run made before pieces
    return done if done.is_file() or not before.is_file() else before


def adapter_at(run_dir: Path, fraction: float) -> Path:
    """A cell's adapter at ``fraction`` of its budget (the end's: ``adapter``)."""
    return run_dir / ("adapter" if fraction == 1 else f"adapter-at-{fraction:g}")


class Executor:
    """Does a comparison's pieces; holds the base model once (``cfg``: the shared ``MainJobConfig``, ``cfg.out`` the
    run folder; ``sections``: the ``ppo`` / ``dpo`` settings; ``given``: an adapter given with ``--cold-start``)."""

    def __init__(self, cfg, tasks: list[dict[str, Any]], sections: dict[str, list[str]], seconds: float,
                 fractions: list[float], max_steps: int | None, ledger: Path | None = None,
                 given: Path | None = None):
        self.cfg, self.out, self.tasks, self.sections, self.ledger = cfg, Path(cfg.out), tasks, sections, ledger
        self.seconds, self.fractions, self.max_steps, self.given = seconds, fractions, max_steps, given
        self._base: Any = None

    def base(self) -> tuple[Any, Any]:
        if self._base is None:
            from agentrl.algos.models import load_model

            c = self.cfg
            self._base = load_model(c.model, dtype=c.dtype, device=c.device, attn_implementation=c.attn_implementation)
        return self._base

    @property
    def cold_adapter(self) -> Path:
        return self.given if self.given is not None else self.out / "cold_start" / "adapter"

    def __call__(self, piece: Piece, folder: Path) -> dict[str, Any]:
        try:
            if piece.kind == "compare:cold_start":
                return self.cold_start()
            if piece.kind == "compare:eval":
                return self.evaluate(piece.key)
            arm, _, seed = piece.key.rpartition("-s")
            return self.cell(arm, int(seed))
        finally:
            gc.collect()

    def cold_start(self) -> dict[str, Any]:
        """The shared cold-start adapter, made in ``<out>/cold_start`` (``cold_start.json`` last)."""
        run_dir = self.out / "cold_start"
        tc, seconds = train_cold_start(self.cfg, run_dir, *self.base())
        families = self.cfg.stages.sft.get("env_kwargs", {}).get("families", [])
        info = {"source": f"made here: the main job's SFT stage ({tc.steps} steps of "
                          f"{tc.algorithm.batch_size} on {tc.algorithm.num_demos} demos of "
                          f"{', '.join(families) or 'all families'})",
                "seconds": seconds}
        (run_dir / "cold_start.json").write_text(json.dumps(info) + "\n")
        return info

    def evaluate(self, key: str) -> dict[str, Any]:
        """The cold start's or a cell's adapter at a fraction of its budget, on the fixed set (greedy)."""
        from agentrl.algos.evaluation.evaluate import evaluate
        from agentrl.algos.models.lora import load_adapter
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.recipes.main_job import eval_collector

        if key == "eval/cold_start":
            adapter = self.cold_adapter
        else:
            cell, _, at = key.partition("/eval/at-")
            adapter = adapter_at(self.out / cell, float(at))
            (self.out / cell / "result.json").unlink(missing_ok=True)  # made again from this evaluation
        model, tokenizer = self.base()
        policy = HFPolicy(load_adapter(copy.deepcopy(model), adapter), tokenizer)
        try:
            report = evaluate(self.cfg.env, policy, self.tasks, self.cfg.eval_n, eval_collector(self.cfg),
                              env_kwargs=self.cfg.env_kwargs, out=self.out / f"{key}.jsonl", progress=self.cfg.progress,
                              ledger=self.ledger)
        finally:
            policy.close()
        return {"report": report.to_dict()}

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

    def cell(self, algo: str, seed: int) -> dict[str, Any]:
        """One (algorithm, seed): train for the budget's wall time, saving the adapter at each fraction of it."""
        from agentrl.algos.evaluation.run_log import MetricsLogger, read_metrics
        from agentrl.algos.models.lora import save_adapter
        from agentrl.algos.recipes.main_job import stage_config
        from agentrl.algos.training.trainer import Trainer

        run_dir = self.out / cell_name(algo, seed)
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a killed run: redo it whole (its clock restarted)
        model, tokenizer = self.base()
        trainer = Trainer(self.train_config(algo, seed, self.cold_adapter, run_dir), model=copy.deepcopy(model),
                          tokenizer=tokenizer)
        if algo == "sft" and seed == self.cfg.seed:
            cold = stage_config(self.cfg, "sft", run_dir)  # continue the cold start's demos
            trainer.data_pos = cold.steps * cold.algorithm.batch_size
        log = MetricsLogger(run_dir, report_to=["none"])
        points, clock, pending = [], 0.0, list(self.fractions)
        try:
            while pending:
                if takes_step(clock, trainer.global_step, pending[0] * self.seconds, self.max_steps):
                    t0 = time.perf_counter()
                    metrics = trainer.step()
                    clock += time.perf_counter() - t0
                    log.log(trainer.global_step, metrics)
                    logger.info("%s seed %d step %d: %.0f of %.0f s", algo, seed, trainer.global_step, clock,
                                self.seconds)
                    continue
                frac = pending.pop(0)
                save_adapter(trainer.model, adapter_at(run_dir, frac))
                points.append({"fraction": frac, "train_seconds": clock, "step": trainer.global_step})
        finally:
            log.close()
            trainer.close_collector()
        info = {"algo": algo, "seed": seed, **git_state(ROOT), "steps": trainer.global_step, "train_seconds": clock,
                "points": points, "diagnostics": summarize_metrics(read_metrics(run_dir))}
        (run_dir / "cell.json").write_text(json.dumps(info, indent=1) + "\n")
        del trainer
        return info


def by_family(episodes: Path, n: int) -> dict[str, float]:
    """Average@N per task family of saved eval episodes."""
    from agentrl.algos.evaluation.report import summarize
    from agentrl.algos.rollout.trajectory import load_trajectories

    return summarize(load_trajectories(episodes), n, source_key="family").em_by_source


def result(run_dir: Path, eval_n: int, ledger: Path | None) -> dict[str, Any]:
    """A finished cell's ``result.json`` (made from ``cell.json`` and its evaluations, once; a run's from before
    the pieces read back, its commit from its ledger row when it recorded none)."""
    from agentrl.algos.evaluation.report import load_report

    done = run_dir / "result.json"
    if done.is_file():
        got = json.loads(done.read_text())
        return got if "commit" in got else {**got, **ledger_commit(run_dir, got, ledger)}
    info = json.loads((run_dir / "cell.json").read_text())
    points = []
    for point in info["points"]:
        report = load_report(run_dir / "eval" / f"at-{point['fraction']:g}.jsonl")
        points.append({**point, "average_at_n": report.average_at_n, "pass_at_n": report.pass_at_n})
    episodes = run_dir / "eval" / f"at-{points[-1]['fraction']:g}.jsonl"
    got = {**{k: v for k, v in info.items() if k not in ("points", "diagnostics")}, "points": points,
           "final": report.to_dict(), "final_by_family": by_family(episodes, eval_n),
           "diagnostics": info["diagnostics"]}
    done.write_text(json.dumps(got, indent=1) + "\n")
    return got


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
    """The comparison ``args`` (``python benchmarks/experiment.py run compare_algorithms``'s options) asks for; its
    summary (``<out>/compare.json``) and the folder its committed data was copied to
    (``<results>/data/<name>``). The rejection-sampling control (algo ``rft``) is registered for the run only."""
    from agentrl.algos.run_folder import claim_run
    from agentrl.algos.training.checkpoint import RunInUse
    from harness.controls import rejection_sampling_registered

    try:  # one writer per run folder: a second comparison on this --out is refused in one line
        with claim_run(compare_out(args)), rejection_sampling_registered():
            return _run_compare(args, argv)
    except RunInUse as e:
        raise SystemExit(f"experiment.py: {e}") from None


def compare_out(args) -> Path:
    """The comparison's run folder: ``--out``, else ``runs/compare-algorithms[-quick]``."""
    return Path(args.out or f"runs/compare-algorithms{'-quick' if args.quick else ''}")


def _run_compare(args, argv) -> tuple[dict[str, Any] | None, Path | None]:
    from agentrl.algos.config import apply_overrides, config_from_dict, nested
    from agentrl.algos.evaluation.ledger import dumps
    from agentrl.algos.evaluation.report import load_report
    from agentrl.algos.recipes.main_job import MainJobConfig, peak_rss_gib
    from harness.axes_run import RunStore, check_setup, schedule
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
        "command": " ".join(["python benchmarks/experiment.py run", COMPARE.name, *shown]),
        "started": started.isoformat(timespec="minutes"), "invocation_seconds": time.perf_counter() - t0,
        "peak_rss_gib": peak_rss_gib(), "machine": machine(), "runs": runs,
        "aggregate": {algo: aggregate(cold.average_at_n, rs) for algo, rs in runs.items()},
        **git_state(ROOT),  # the commit (and uncommitted changes) the figures came from, as learning.py records it
    }
    (out / "compare.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    # the results page's raw data (compare.json and per-task scores), as learning.py copies its runs' data
    data = export_compare(out, Path(args.results) / "data" / f"compare_algorithms{suffix}")
    return summary, data.parent
