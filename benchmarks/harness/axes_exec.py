"""What each piece of :mod:`harness.axes_run` does: train the cold start, train a cell (and keep its equal-updates
cut adapter when the experiment declares one), evaluate an adapter on a set (and, on the train-split sample, its KL
to the base). Holds the base model once per process (loaded at the first piece that needs it)."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.algos.config import config_to_dict
from agentrl.algos.evaluation.ledger import adapter_sha256
from harness import export
from harness.axes_run import CUT, TRAIN, Piece, cell_name, is_update
from harness.data import load_json
from harness.experiments import DIAGNOSTICS
from harness.layout import ROOT, meta_file
from harness.record import Record

logger = logging.getLogger("axes")


def takes_step(clock: float, steps: int, budget: float, max_steps: int | None) -> bool:
    """Whether a run with ``steps`` steps in ``clock`` seconds takes one more within ``budget`` seconds: the
    first step always; another while the budget's end is nearer the next step's expected end than its start
    (``clock`` plus half the mean step time is below the budget). Runs so end at the step count whose time is
    nearest the budget, over or under by at most about half a step, where "start while time is left" let the
    last step overrun by up to a whole one (half the budget, with two steps in it)."""
    if max_steps is not None and steps >= max_steps:
        return False
    return steps == 0 or clock + 0.5 * clock / steps < budget


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


def train_cold_start(cfg, run_dir: Path, model, tokenizer):
    """Train the main job's SFT stage of ``cfg`` afresh into ``run_dir`` (emptied first) on a copy of ``model``:
    ``(its TrainConfig, seconds)``."""
    from agentrl.algos.recipes.main_job import stage_config
    from agentrl.algos.training.trainer import Trainer

    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    tc = stage_config(cfg, "sft", run_dir, progress=False, report_to=["none"])
    Trainer(tc, model=copy.deepcopy(model), tokenizer=tokenizer).train()
    return tc, time.perf_counter() - t0


def arm_algo(exp: Record, arm: str) -> str:
    return exp.algo(arm)


def base_config(exp: Record, overrides: list[str], model: str | None, work: Path):
    """The shared ``MainJobConfig``: the declaration's world and cold-start settings, then ``overrides``."""
    from agentrl.algos.config import apply_overrides, config_from_dict, deep_merge, nested
    from agentrl.algos.recipes.main_job import MainJobConfig

    preset = {"env": exp.env, "env_kwargs": dict(exp.env_kwargs), "out": str(work), "progress": False,
              "report_to": ["none"], **({"model": model} if model else {})}
    return config_from_dict(MainJobConfig, apply_overrides(deep_merge(preset, nested(exp.cold_start)), overrides))


def arm_config(exp: Record, cfg, arm: str, overrides: list[str]):
    """One arm's ``MainJobConfig``: the shared one, the arm's declared settings, trained on the declared families
    (``env_kwargs.families`` for rollouts, ``stages.sft.env_kwargs.families`` for SFT), then ``overrides`` again
    (they win)."""
    from agentrl.algos.config import apply_overrides, config_from_dict, config_to_dict, deep_merge, nested
    from agentrl.algos.recipes.main_job import MainJobConfig

    d = deep_merge(config_to_dict(cfg), nested(exp.settings(arm)), whole=())
    if exp.train_families:
        d["env_kwargs"] = {**d["env_kwargs"], "families": list(exp.train_families)}
        d["stages"]["sft"]["env_kwargs"] = {**d["stages"]["sft"].get("env_kwargs", {}),
                                            "families": list(exp.train_families)}
    return config_from_dict(MainJobConfig, apply_overrides(d, overrides))


def train_sample(exp: Record, data: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The fixed train-split sample (drawn once, then read back from ``<data>/train_sample.jsonl``)."""
    import numpy as np

    from agentrl.envs import make_text_env

    path = data / "train_sample.jsonl"
    if not path.is_file():
        kwargs = {**exp.env_kwargs, **({"families": list(exp.train_families)} if exp.train_families else {})}
        env = make_text_env(exp.env, kwargs)
        rng = np.random.default_rng(exp.train_sample_seed)
        tasks = [env.sample_task(rng) for _ in range(exp.train_sample)]
        export.write_new(path, "".join(json.dumps(t, sort_keys=True) + "\n" for t in tasks))
    tasks = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return tasks[:limit]


def write_task_scores(folder: Path, trajectories: list[Any]) -> None:
    """A piece's ``tasks.jsonl``: one row per task (id, family, score, episodes; ``ledger.task_scores``)."""
    from agentrl.algos.evaluation.ledger import task_scores

    rows = task_scores(trajectories)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


class Executor:
    """Runs pieces of one experiment; ``work`` holds adapters and episodes (not committed)."""

    def __init__(self, exp: Record, data: Path, work: Path, overrides: list[str], model: str | None = None,
                 ledger: Path | None = None, tasks: int | None = None, minutes: float | None = None):
        self.exp, self.data, self.work, self.overrides = exp, data, work, overrides
        self.ledger, self.tasks, self.minutes = ledger, tasks, minutes
        self.cfg = base_config(exp, overrides, model, work)
        self._base: Any = None

    def setup(self) -> dict[str, Any]:
        """The settings every piece of the folder shares (``axes_run.check_setup`` refuses to mix); where the
        work folder is may change between sessions."""
        pipeline = {k: v for k, v in config_to_dict(self.cfg).items() if k not in ("out", "progress")}
        return {"experiment": self.exp.name, "pipeline": pipeline, "overrides": self.overrides,
                "minutes": self.minutes if self.minutes is not None else self.exp.minutes, "steps": self.exp.steps,
                "tasks": self.tasks}

    def base(self):
        if self._base is None:
            from agentrl.algos.models import load_model

            c = self.cfg
            self._base = load_model(c.model, dtype=c.dtype, device=c.device, attn_implementation=c.attn_implementation)
        return self._base

    def common_meta(self, cfg) -> dict[str, Any]:
        from agentrl.algos.evaluation.ledger import git_state
        from harness.machine import machine

        return {**git_state(ROOT), "machine": machine(), "config": config_to_dict(cfg)}

    def __call__(self, piece: Piece, folder: Path) -> dict[str, Any]:
        self.base()  # loaded before the piece's clock matters less than a reload per piece
        if piece.kind == "cold_start":
            return self.cold_start(folder)
        if piece.kind.startswith("cell:"):
            arm, _, seed = piece.key.rpartition("-s")
            return self.cell(arm, int(seed), folder)
        model, name = piece.key.split("/")
        if piece.kind.startswith("eval:cut-"):  # <set>-cut-greedy: the cell's equal-updates cut adapter
            target = name.removesuffix(f"-{CUT}")
            if (same := self.final_twin(model, target, folder)) is not None:
                return same
            if piece.kind == "eval:cut-transfer":
                return self.evaluate_transfer(model, target, folder, cut=True)
            return self.evaluate(model, target, CUT, folder)
        target, _, mode = name.rpartition("-")
        if piece.kind == "eval:transfer":
            return self.evaluate_transfer(model, target, folder)
        return self.evaluate(model, target, mode, folder)

    def adapter(self, model: str, cut: bool = False) -> Path:
        """The adapter of ``model`` in the work folder: the one its finished piece recorded (SystemExit, one line,
        when it is missing or another: a cell is never trained or evaluated from another run's adapter); ``cut``:
        the cell's equal-updates cut adapter (``adapter_cut``, recorded in its meta's ``cut``)."""
        key = model  # its piece's folder in the data: cold_start, <arm>-s<seed>
        path = self.work / ("cold_start" if model == "cold_start" else f"cells/{model}") / (
            "adapter_cut" if cut else "adapter")
        also = " and every cell trained from it" if model == "cold_start" else ""
        if model == "cold_start" and not (path / "adapter_config.json").is_file():
            self.rebuild_cold_start()
        what = "equal-updates cut adapter" if cut else "adapter"
        if not (path / "adapter_config.json").is_file():
            raise SystemExit(f"{path}: the {what} of {model} is not in the work folder (adapters are not committed); "
                             f"delete {self.data / key}{also} to train it again, or point --work at the folder that "
                             "holds it")
        meta = load_json(self.data / key / "meta.json") or {}
        recorded = (meta.get("cut") or {}).get("adapter_sha256") if cut else meta.get("adapter_sha256")
        if recorded is not None and recorded != adapter_sha256(path):
            raise SystemExit(f"{path} is not the {what} the finished piece {self.data / key} recorded (sha256 "
                             f"{recorded}): --work holds another run's; point --work at the right folder")
        return path

    def adapted(self, model_name: str, cut: bool = False) -> tuple[Any, Any, str]:
        """``(model, tokenizer, adapter sha256)``: a copy of the base model with ``model_name``'s adapter (``cut``:
        its equal-updates cut adapter) loaded."""
        from agentrl.algos.models.lora import load_adapter

        base, tokenizer = self.base()
        adapter = self.adapter(model_name, cut)
        return load_adapter(copy.deepcopy(base), adapter), tokenizer, adapter_sha256(adapter)

    def final_twin(self, model: str, target: str, folder: Path) -> dict[str, Any] | None:
        """The cut evaluation of a cell whose cut adapter is its final one (the same sha256: it made no update after
        the cut, or fewer than the cut's): the final adapter's finished greedy evaluation of ``target``, its records
        copied into ``folder`` and its meta returned with ``same_as`` naming it (greedy decoding of the same adapter
        on the same tasks: the same records, without evaluating again); None when there is none to copy."""
        cell = load_json(self.data / model / "meta.json") or {}
        sha = (cell.get("cut") or {}).get("adapter_sha256")
        key = f"{model}/{target}-greedy"
        final = load_json(meta_file(self.data / f"{key}.jsonl")) or {}
        if sha is None or sha != cell.get("adapter_sha256") or final.get("adapter_sha256") != sha:
            return None
        shutil.copyfile(self.data / f"{key}.jsonl", folder / "tasks.jsonl")
        logger.info("%s/%s-%s: the cut is %s's final adapter; its records are %s's", model, target, CUT, model, key)
        return {**{k: v for k, v in final.items() if k not in ("key", "kind", "wall_seconds")}, "mode": CUT,
                "same_as": key}

    def rebuild_cold_start(self) -> None:
        """The finished cold start's adapter is not in the work folder (a new checkout, another machine): train it
        again, as its piece did, and keep it only if its bytes hash to what the piece recorded (training and saving
        are deterministic on one machine kind); otherwise leave nothing, and :meth:`adapter` says what to do."""
        recorded = (load_json(self.data / "cold_start" / "meta.json") or {}).get("adapter_sha256")
        if recorded is None:
            return
        logger.info("the cold start's adapter is not in %s: training it again to check it against the recorded "
                    "one (sha256 %s)", self.work, recorded)
        with tempfile.TemporaryDirectory() as scratch:
            got = self.cold_start(Path(scratch))["adapter_sha256"]
        if got != recorded:
            shutil.rmtree(self.work / "cold_start")
            raise SystemExit(f"the cold start trained again here is not the recorded one (sha256 {got}, recorded "
                             f"{recorded}: another machine kind or code that changed its numbers); delete "
                             f"{self.data / 'cold_start'} and every cell trained from it to start over, or point "
                             "--work at the folder that holds the adapter")
        logger.info("the cold start trained again is the recorded one (sha256 %s)", got)

    def cold_start(self, folder: Path) -> dict[str, Any]:
        run_dir = self.work / "cold_start"
        tc, seconds = train_cold_start(self.cfg, run_dir, *self.base())
        if (run_dir / "metrics.jsonl").is_file():
            shutil.copyfile(run_dir / "metrics.jsonl", folder / "metrics.jsonl")
        gc.collect()
        return {**self.common_meta(self.cfg), "train_seconds": seconds, "steps": tc.steps,
                "adapter_sha256": adapter_sha256(run_dir / "adapter")}

    def cell(self, arm: str, seed: int, folder: Path) -> dict[str, Any]:
        from agentrl.algos.evaluation.run_log import MetricsLogger, read_metrics
        from agentrl.algos.models.lora import save_adapter
        from agentrl.algos.recipes.main_job import stage_config
        from agentrl.algos.training.trainer import Trainer
        from harness.controls import rejection_sampling_registered

        cfg = arm_config(self.exp, self.cfg, arm, self.overrides)
        algo, run_dir = arm_algo(self.exp, arm), self.work / "cells" / cell_name(arm, seed)
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a killed cell: redo it whole (its clock restarted)
        common = dict(seed=seed, adapter=str(self.adapter("cold_start")), steps=10**9, save_every=0, progress=False,
                      report_to=["none"])
        minutes = self.exp.minutes if self.minutes is None else self.minutes
        budget = float("inf") if self.exp.steps else 60 * minutes
        model, tokenizer = self.base()
        with rejection_sampling_registered():
            tc = (stage_config(cfg, "sft", run_dir, **common) if algo == "sft"
                  else stage_config(cfg, "rl", run_dir, algo=algo, **common))
            trainer = Trainer(tc, model=copy.deepcopy(model), tokenizer=tokenizer)
            log, clock = MetricsLogger(run_dir, report_to=["none"]), 0.0
            updates, cut = 0, None  # the equal-updates cut (exp.cut_updates): saved outside the timed step
            try:
                while takes_step(clock, trainer.global_step, budget, self.exp.steps):
                    t0 = time.perf_counter()
                    metrics = trainer.step()
                    clock += time.perf_counter() - t0
                    log.log(trainer.global_step, metrics)
                    if self.exp.cut_updates:
                        updates += is_update(metrics)
                        if cut is None and updates == self.exp.cut_updates:
                            save_adapter(trainer.model, run_dir / "adapter_cut")
                            cut = {"step": trainer.global_step, "train_seconds": clock}
            finally:
                log.close()
                trainer.close_collector()
            save_adapter(trainer.model, run_dir / "adapter")
        shutil.copyfile(run_dir / "metrics.jsonl", folder / "metrics.jsonl")
        steps = trainer.global_step
        del trainer
        gc.collect()
        meta = {**self.common_meta(cfg), "arm": arm, "algo": algo, "seed": seed, "steps": steps,
                "train_seconds": clock, "settings": dict(self.exp.arms[arm]),
                "diagnostics": summarize_metrics(read_metrics(run_dir)),
                "adapter_sha256": adapter_sha256(run_dir / "adapter")}
        if self.exp.cut_updates:
            meta["cut"] = self.cut_record(run_dir, cut, updates, steps, clock)
        return meta

    def cut_record(self, run_dir: Path, cut: dict[str, Any] | None, updates: int, steps: int, clock: float
                   ) -> dict[str, Any]:
        """The cell meta's ``cut``: the declared number of updates, the cell's own, the step and training seconds
        at the cut and its adapter's sha256; ``final``: the cell made fewer updates than the cut, so its cut is its
        final adapter (copied to ``adapter_cut``)."""
        if cut is None:
            shutil.copytree(run_dir / "adapter", run_dir / "adapter_cut")
            cut = {"step": steps, "train_seconds": clock}
        return {"updates": self.exp.cut_updates, "cell_updates": updates, **cut,
                "final": updates < (self.exp.cut_updates or 0),
                "adapter_sha256": adapter_sha256(run_dir / "adapter_cut")}

    def tasks_of(self, target: str) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
        """The tasks, env kwargs and set file of a set name (or the train-split sample)."""
        from harness.heldout import path_for_env, read, set_env_kwargs

        if target == TRAIN:
            kwargs = {**self.exp.env_kwargs, **({"families": list(self.exp.train_families)}
                                                if self.exp.train_families else {})}
            return train_sample(self.exp, self.data, self.tasks), kwargs, None
        path = path_for_env(self.exp.env, target)
        return read(path)[: self.tasks], set_env_kwargs(path), str(path.relative_to(ROOT))

    def evaluate(self, model_name: str, target: str, mode: str, folder: Path) -> dict[str, Any]:
        from agentrl.algos.evaluation.evaluate import evaluate
        from agentrl.algos.evaluation.kl import kl_to_base
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.recipes.main_job import eval_collector
        from agentrl.algos.rollout.trajectory import load_trajectories

        settings = self.exp.sampled if mode == "sampled" else self.exp.greedy
        c = dataclasses.replace(self.cfg, **dict(settings))
        tasks, env_kwargs, set_file = self.tasks_of(target)
        model, tokenizer, sha = self.adapted(model_name, cut=mode == CUT)
        episodes = self.work / "evals" / model_name / f"{target}-{mode}.jsonl"
        policy = HFPolicy(model, tokenizer, max_batch_tokens=c.policy_max_batch_tokens)
        try:
            report = evaluate(c.env, policy, tasks, c.eval_n, eval_collector(c),
                              env_kwargs=env_kwargs, out=episodes, progress=False,
                              ledger=self.ledger if set_file and self.tasks is None else None,
                              ledger_fields={"stage": f"{self.exp.name}:{model_name}"
                                                      + (":cut" if mode == CUT else ""),
                                             "adapter": sha})
        finally:
            policy.close()
        trajectories = load_trajectories(episodes)
        write_task_scores(folder, trajectories)
        meta = {**self.common_meta(c), "model": model_name, "adapter_sha256": sha, "set": target, "mode": mode,
                "set_file": set_file, "eval_n": c.eval_n, "temperature": c.eval_temperature, "tasks": len(tasks),
                "report": report.to_dict()}
        if target == TRAIN and mode != "sampled":  # the KL on greedy replies (the forgetting item)
            meta["kl_to_base"] = kl_to_base(model, trajectories).to_dict()
        del model, policy
        gc.collect()
        return meta

    def evaluate_transfer(self, model_name: str, target: str, folder: Path, cut: bool = False) -> dict[str, Any]:
        """One greedy episode per task of a declared public benchmark set, with the tasks, decoding and budgets the
        transfer declaration fixes (:mod:`harness.transfer`), graded by the benchmark's own checker; a ledger row
        (set ``transfer/<name>``) like the transfer runner's. ``cut``: of the cell's equal-updates cut adapter."""
        from agentrl.algos.evaluation.evaluate import evaluate
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.rollout.trajectory import load_trajectories
        from harness.transfer import DECODING, transfer_set
        from harness.transfer_exec import (
            collector_config,
            package_versions,
            record_in_ledger,
            records,
            scores,
            select_tasks,
        )

        s = transfer_set(target)
        tasks = select_tasks(s)[: self.tasks]
        model, tokenizer, sha = self.adapted(model_name, cut)
        mode = CUT if cut else "greedy"
        episodes = self.work / "evals" / model_name / f"{target}-{mode}.jsonl"
        cfg = collector_config(s)
        policy = HFPolicy(model, tokenizer, max_batch_tokens=self.cfg.policy_max_batch_tokens)
        try:
            report = evaluate(s.env, policy, tasks, DECODING["n"], cfg, env_kwargs=dict(s.env_kwargs), out=episodes,
                              progress=False)
            trajectories = load_trajectories(episodes)
            ledger_id = None if self.ledger is None or self.tasks is not None else record_in_ledger(
                s, tasks, trajectories, episodes, report, policy, self.ledger,
                {"model": self.cfg.model, "adapter": sha,
                 "arm": f"{self.exp.name}:{model_name}" + (":cut" if cut else "")})
        finally:
            policy.close()
        write_task_scores(folder, trajectories)
        del model, policy
        gc.collect()
        return {**self.common_meta(self.cfg), "model": model_name, "adapter_sha256": sha, "set": target,
                "mode": mode, "benchmark": s.label, "env": s.env, "env_kwargs": dict(s.env_kwargs),
                "subset": s.subset, "tasks": len(tasks), "collector": dataclasses.asdict(cfg),
                "packages": package_versions(), "ledger_id": ledger_id, "scores": scores(records(trajectories)),
                "report": report.to_dict()}
