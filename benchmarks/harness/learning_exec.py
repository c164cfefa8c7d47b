"""A learning run (kind ``learning``: the main job and its controls, :data:`harness.experiments.EXPERIMENTS` and their
variants) as pieces of the one piece runner, :func:`harness.axes_run.schedule` (issue 58 step 1).

Its pieces lie in the run folder (``runs/learning-<name>``, not committed) in the main job's own layout, and a piece is
finished when its output is there (a stage's ``adapter/``, an evaluation's ``.summary.json``, the control's
``control.json``: each written last): a run resumes where it stopped, the copies ``--reuse-cold-start`` makes count as
finished, and a training stage killed part-way continues from its last checkpoint. In running order:

* ``eval/base`` — the base model on the fixed set (``eval/base.jsonl``);
* ``sft`` — the cold start: the main job's SFT stage (``sft/``); ``eval/sft`` — its evaluation;
* ``grpo`` — the GRPO stage, from the cold start's adapter (``grpo/``); ``eval/rl`` — its evaluation;
* ``sft_control`` — the cold start trained further with SFT for the GRPO stage's recorded time (``sft_control/``: it
  waits for ``grpo``, whose time it matches; ``--minutes`` gives it another budget); ``eval/sft_control``;
* ``eval/text_only`` — (Search-v0) the base model with the env's tools off;
* ``text_only/<piece>`` — (PythonMath-v0) the base, the cold start, GRPO and their evaluations again with the tools
  off, in ``text_only/`` (ReTool's comparison).

Each piece's meta (its wall time, what it made) is kept in ``pieces/<key>.json`` beside them; the runner's budget
reads those times. :func:`configure` makes a record's ``MainJobConfig`` from ``python benchmarks/experiment.py run
NAME``'s options; :func:`run` runs the pieces and, once every one is finished, draws each pipeline's plots and writes
its ``results.md`` (:func:`report`), ``learning.json`` (:func:`write_summary`) and the committed data
(:mod:`harness.export`)."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import gc
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from harness.axes_run import Piece
from harness.controls import server_client, stage_seconds, train_sft_control
from harness.experiments import COLD_START, CONTROL, RL, STAGE_LABELS, TEXT_LABELS, TEXT_ONLY_BASE, experiment
from harness.heldout import path_for_env, read
from harness.record import Record

#: The text-only pipeline's pieces' prefix and folder in the run folder.
TEXT = "text_only/"
#: An evaluation's label (its episodes ``eval/<label>.jsonl``) -> the stage whose adapter it evaluates (None: base).
EVALUATED = {"base": None, "sft": "sft", "rl": "grpo", "sft_control": "sft_control", "text_only": None}
#: This invocation's stage times as the run's page names them (the main job's), by piece.
TIMING = {"eval/base": "eval_base", "sft": "sft", "eval/sft": "eval_sft", "grpo": "rl", "eval/rl": "eval_rl"}


def pipeline(prefix: str = "") -> list[Piece]:
    """The main job's pieces: the base model's evaluation, the cold start, GRPO, each evaluated."""
    p = prefix
    return [Piece(f"{p}eval/base", "learning:eval"), Piece(f"{p}sft", "learning:sft"),
            Piece(f"{p}eval/sft", "learning:eval", (f"{p}sft",)), Piece(f"{p}grpo", "learning:rl", (f"{p}sft",)),
            Piece(f"{p}eval/rl", "learning:eval", (f"{p}grpo",))]


def plan(exp: Record, control: bool = True, text_only: bool = True) -> list[Piece]:
    """Every piece of the learning run ``exp`` in running order (``control``: the SFT control and PythonMath-v0's
    text-only pipeline; ``text_only``: that pipeline)."""
    pieces = pipeline()
    if control:
        pieces += [Piece("sft_control", "learning:control", ("sft", "grpo")),
                   Piece("eval/sft_control", "learning:eval", ("sft_control",))]
    if exp.text_only_baseline:
        pieces.append(Piece("eval/text_only", "learning:eval"))
    if exp.text_only_pipeline and control and text_only:
        pieces += pipeline(TEXT)
    return pieces


def split(key: str) -> tuple[str, str]:
    """``text_only/eval/sft`` -> ``("text_only/", "eval/sft")``; a main-pipeline key -> ``("", key)``."""
    return (TEXT, key.removeprefix(TEXT)) if key.startswith(TEXT) else ("", key)


def finished_by(out: Path, piece: Piece) -> Path:
    """The file that marks ``piece`` finished in the run folder ``out`` (the last one it writes)."""
    prefix, rest = split(piece.key)
    if piece.kind == "learning:eval":
        return out / prefix / f"{rest}.summary.json"
    if piece.kind == "learning:control":
        return out / "sft_control" / "control.json"
    return out / prefix / rest / "adapter" / "adapter_config.json"


class Executor:
    """Does a learning run's pieces: ``cfg`` its ``MainJobConfig`` (``cfg.out`` the run folder), ``policy`` the
    run's engine policy (None: sampling in process), ``control_seconds`` the SFT control's budget (None: the GRPO
    stage's recorded time). Holds the base model once per process (copied for each piece)."""

    def __init__(self, cfg, ledger: Path | None = None, policy=None, control_seconds: float | None = None):
        from agentrl.algos.recipes.main_job import eval_task_list

        self.cfg, self.ledger, self.policy, self.control_seconds = cfg, ledger, policy, control_seconds
        self.text_cfg = dataclasses.replace(cfg, env_kwargs={**cfg.env_kwargs, "tools_enabled": False},
                                            out=str(Path(cfg.out) / TEXT))
        self.tasks = eval_task_list(cfg)
        self._base: Any = None

    def fresh(self) -> tuple[Any, Any]:
        """A copy of the base model (loaded at the first piece that needs it) and its tokenizer."""
        if self._base is None:
            from agentrl.algos.models import load_model

            c = self.cfg
            self._base = load_model(c.model, dtype=c.dtype, device=c.device, attn_implementation=c.attn_implementation)
        model, tokenizer = self._base
        return copy.deepcopy(model), tokenizer

    def __call__(self, piece: Piece, folder: Path) -> dict[str, Any]:
        prefix, rest = split(piece.key)
        cfg = self.text_cfg if prefix else self.cfg
        out = Path(cfg.out)
        try:
            if piece.kind == "learning:eval":
                return self.evaluate(cfg, out, rest.removeprefix("eval/"))
            if piece.kind == "learning:sft":
                return self.cold_start(cfg, out)
            if piece.kind == "learning:rl":
                return self.rl(cfg, out, text=bool(prefix))
            seconds = self.control_seconds or stage_seconds(out / "grpo")  # the GRPO stage's recorded time
            return {"budget_seconds": seconds, **train_sft_control(cfg, out, seconds)}
        finally:
            gc.collect()

    def evaluate(self, cfg, out: Path, label: str) -> dict[str, Any]:
        """One evaluation of the fixed set (the main job's settings), in process or on a client of the run's
        server; a ledger row naming the stage and the adapter (``base``: none)."""
        from agentrl.algos.evaluation.evaluate import evaluate
        from agentrl.algos.evaluation.ledger import adapter_sha256
        from agentrl.algos.models.lora import load_adapter
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.recipes.main_job import eval_collector

        stage = EVALUATED[label]
        adapter = out / stage / "adapter" if stage else None
        sha = adapter_sha256(adapter) if adapter is not None else "base"
        sampler = server_client(self.policy)  # the base model until told otherwise
        if sampler is not None and adapter is not None:
            sampler.use_adapter(adapter)
        elif sampler is None:
            model, tokenizer = self.fresh()
            if adapter is not None:
                model = load_adapter(model, adapter)
            sampler = HFPolicy(model, tokenizer, share_weights=cfg.policy_shares_weights,
                               max_batch_tokens=cfg.policy_max_batch_tokens)
        try:
            report = evaluate(cfg.env, sampler, self.tasks, cfg.eval_n, eval_collector(cfg),
                              env_kwargs=cfg.env_kwargs, out=out / "eval" / f"{label}.jsonl", progress=cfg.progress,
                              text_only=label == "text_only", ledger=self.ledger,
                              ledger_fields={"stage": label, "adapter": sha})
        finally:
            sampler.close()
        return {"label": label, "adapter_sha256": sha, "report": report.to_dict()}

    def cold_start(self, cfg, out: Path) -> dict[str, Any]:
        """The main job's SFT stage from the base model (continued from its last checkpoint when killed)."""
        from agentrl.algos.recipes.main_job import stage_config

        return self.train(stage_config(cfg, "sft", out / "sft"), None)

    def rl(self, cfg, out: Path, text: bool) -> dict[str, Any]:
        """The main job's GRPO stage from the cold start's adapter, its rollouts in process or through the run's
        server (the text-only pipeline: a client of it with no adapter loaded)."""
        from agentrl.algos.recipes.main_job import stage_config

        return self.train(stage_config(cfg, "rl", out / "grpo"), out / "sft" / "adapter", text)

    def train(self, tc, start: Path | None, text: bool = False) -> dict[str, Any]:
        from agentrl.algos.evaluation.ledger import adapter_sha256
        from agentrl.algos.models.lora import load_adapter, save_adapter
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.training.checkpoint import latest_checkpoint
        from agentrl.algos.training.trainer import Trainer

        model, tokenizer = self.fresh()
        policy, own = None, False
        if start is not None:  # the GRPO stage: the cold start's adapter, trained further
            model = load_adapter(model, start, trainable=True)
            policy = server_client(self.policy) if text else self.policy
            own = policy is None or text
            if policy is None:
                policy = HFPolicy(model, tokenizer, share_weights=self.cfg.policy_shares_weights,
                                  max_batch_tokens=self.cfg.policy_max_batch_tokens)
            policy.update_weights(model)
        run_dir = Path(tc.out)
        t0 = time.perf_counter()
        try:
            trainer = Trainer(tc, model=model, tokenizer=tokenizer, policy=policy,
                              resume=latest_checkpoint(run_dir) is not None)
            if trainer.global_step < tc.steps:
                trainer.train()
            else:  # killed after its last checkpoint, before its adapter was saved
                save_adapter(trainer.model, run_dir / "adapter")
        finally:
            if own and policy is not None:
                policy.close()
        return {"steps": trainer.global_step, "seconds": time.perf_counter() - t0,
                "adapter_sha256": adapter_sha256(run_dir / "adapter")}


def rows(exp: Record, out: Path, pieces: list[Piece]) -> list[tuple[str, Any]]:
    """The page's rows (label, report) of a finished run: base, cold start, RL, the control; Search-v0's text-only
    baseline first; PythonMath-v0's text-only pipeline last."""
    from agentrl.algos.evaluation.report import load_report

    keys = {p.key for p in pieces}
    labels = {"base": STAGE_LABELS["base"], "sft": STAGE_LABELS["sft"], "rl": STAGE_LABELS["rl"],
              "sft_control": CONTROL}
    got = [(label, load_report(out / "eval" / f"{stem}.jsonl")) for stem, label in labels.items()
           if f"eval/{stem}" in keys]
    if "eval/text_only" in keys:
        got.insert(0, (TEXT_ONLY_BASE, load_report(out / "eval" / "text_only.jsonl")))
    return got + [(TEXT_LABELS[stem], load_report(out / TEXT / "eval" / f"{stem}.jsonl")) for stem in TEXT_LABELS
                  if f"{TEXT}eval/{stem}" in keys]


def timings(ran: dict[str, float], total: float) -> dict[str, float]:
    """The main pipeline's stage times of this invocation, named as the main job names them (``sft`` and ``rl``
    always, ~0 when read back; an evaluation only when it ran), then ``total``."""
    return {**{name: ran.get(key, 0.0) for key, name in TIMING.items() if key in ran or name in ("sft", "rl")},
            "total": total}


def report(cfg, out: Path, tasks: int, times: dict[str, float]) -> None:
    """What the main job leaves in a pipeline's folder ``out``: the stages' training curves, its three rows' chart
    and ``results.md`` (the table with the GRPO stage's signal share, its signal line, the times and peak RSS)."""
    from agentrl.algos.evaluation.plot import plot_eval, plot_run, plot_stages
    from agentrl.algos.evaluation.report import load_report, results_table
    from agentrl.algos.evaluation.run_log import read_metrics
    from agentrl.algos.recipes.main_job import signal_share, stage_config, with_signal_column, write_results
    from agentrl.algos.training.sampler import signal_summary

    stages = [(stem, load_report(out / "eval" / f"{stem}.jsonl")) for stem in ("base", "sft", "rl")]
    history = read_metrics(out / "grpo") if (out / "grpo" / "metrics.jsonl").is_file() else []
    table = with_signal_column(results_table(stages), {"rl": signal_share(history)}, len(stages))
    line = signal_summary(history, sampler_on=stage_config(cfg, "rl", out / "grpo").sampler.enabled,
                          from_adapter=True)  # the stage starts from the cold start's adapter (docs/sampler.md)
    plot_run(out / "sft")
    plot_run(out / "grpo")
    plot_eval(stages, out / "plots" / "eval_comparison.png", title=f"{cfg.env}: base -> SFT -> RL")
    plot_stages([("SFT", out / "sft"), ("GRPO", out / "grpo")], out / "plots" / "training_curves.png",
                title=f"{cfg.env}: SFT cold start, then GRPO   (faint: raw, bold: smoothed)")
    write_results(out, cfg, tasks, table, line, times)


def quick_heldout(env: str, n: int, out: Path, name: str | None = None) -> Path:
    """The first ``n`` tasks of ``env``'s fixed held-out set, as ``<out>/heldout-quick.jsonl`` (--quick
    runs)."""
    from agentrl.algos.evaluation.ledger import dumps

    path = out / "heldout-quick.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(read(path_for_env(env, name))[:n]), encoding="utf-8")
    return path


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


def configure(exp: Record, args) -> Setup:
    """The run of the learning record ``exp`` (a plain recipe or a variant) that ``args`` (``python
    benchmarks/experiment.py run NAME``'s options) asks for: the record's settings (full or ``--quick``), a variant's
    overrides and set, the set's world (its sidecar's ``env_kwargs``) and the command line's overrides, in that
    order."""
    from agentrl.algos.config import apply_overrides, config_from_dict, nested
    from agentrl.algos.recipes.main_job import MainJobConfig, stage_config
    from harness.heldout import names_for_env, set_env_kwargs
    from harness.layout import ROOT

    heldout_name = args.heldout or (exp.heldout if exp.variant else None)
    name = exp.name + ("_quick" if args.quick else "")
    out = Path(args.out or f"runs/learning-{name.replace('_', '-')}")
    preset = nested(exp.quick if args.quick else exp.full)
    try:
        heldout_file = path_for_env(exp.env, heldout_name)
    except (KeyError, ValueError) as e:
        raise SystemExit(f"--heldout {heldout_name}: {e}; the sets of {exp.env}: "
                         f"{', '.join(names_for_env(exp.env))}") from None
    world = set_env_kwargs(heldout_file)  # tooluse_v3: {"items": 999}
    preset["env_kwargs"] = {**preset.get("env_kwargs", {}), **world}
    if args.quick:  # the first rows of the fixed held-out set
        preset["eval_tasks_file"] = str(quick_heldout(exp.env, preset["eval_tasks"], out, heldout_name))
    else:
        preset["eval_tasks_file"] = str(heldout_file.relative_to(ROOT))
    if args.model:
        preset["model"] = args.model
    overrides = [*exp.overrides, *args.overrides]
    preset.update(env=exp.env, out=str(out))
    cfg = config_from_dict(MainJobConfig, apply_overrides(preset, overrides))
    try:
        stage_config(cfg, "rl", out / "grpo").validate()  # e.g. ReLIFT's term against the group (check_relift_balance)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    return Setup(exp, name, out, cfg, overrides, Path(args.ledger))


def write_summary(setup: Setup, args, argv, rows, started, seconds: float, stages: dict[str, float],
                  page: dict[str, Any]) -> Path:
    """``<out>/learning.json``: what the results pages need, all from this run (figures, command, time,
    machine; ``page``: what only the run's own page shows, :mod:`harness.run_page`)."""
    import hashlib

    from agentrl.algos.evaluation.ledger import git_state
    from agentrl.algos.recipes.main_job import peak_rss_gib, stage_config
    from harness.heldout import SPECS
    from harness.layout import ROOT
    from harness.machine import machine

    out, cfg, overrides, name = setup.out, setup.cfg, setup.overrides, setup.name

    sft, rl = stage_config(cfg, "sft", out / "sft"), stage_config(cfg, "rl", out / "grpo")
    tasks_file = Path(cfg.eval_tasks_file)
    digest = hashlib.sha256(tasks_file.read_bytes()).hexdigest() if tasks_file.is_file() else None
    shown = shown_args(sys.argv[1:] if argv is None else argv)
    summary = {
        "env": cfg.env, "quick": args.quick, "seed": cfg.seed, "model": cfg.model, "eval_n": cfg.eval_n,
        "eval_temperature": cfg.eval_temperature, "heldout_file": str(cfg.eval_tasks_file),
        "heldout_sha256": digest, "command": " ".join(["python benchmarks/experiment.py run", setup.exp.name, *shown]),
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
        "variant": setup.exp.variant or None, "overrides": overrides, "run_dir": str(out),
        "cold_start_from": str(args.reuse_cold_start) if args.reuse_cold_start else None,
        "engine": getattr(args, "engine", None),
    }
    path = out / "learning.json"
    path.write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def run(args, argv, setup: Setup, policy=None) -> Path | None:
    """The configured run in pieces of the one piece runner: the main job, the controls, then
    ``<out>/learning.json`` and the run's committed data (``<data>/<name>/``, returned; :mod:`harness.export`).
    With ``--budget-minutes`` it stops before a piece that would not fit (None: run again to resume)."""
    from agentrl.algos.evaluation.plot import plot_eval
    from harness.axes_run import RunStore, schedule
    from harness.controls import reuse_cold_start
    from harness.export import export_run

    exp, cfg, out, ledger = setup.exp, setup.cfg, setup.out, setup.ledger
    if args.reuse_cold_start:
        reuse_cold_start(Path(args.reuse_cold_start), out)
    started = datetime.datetime.now().astimezone()
    t0 = time.perf_counter()
    pieces = plan(exp, control=not args.no_control, text_only=not args.no_text_only)
    executor = Executor(cfg, ledger, policy, args.minutes * 60 if args.minutes else None)
    store = RunStore(out, pieces, finished_by)
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
    summary = write_summary(setup, args, argv, table, started, time.perf_counter() - t0,
                            {"sft": stage_seconds(out / "sft"), "grpo": rl_s,
                             **({"sft_control": control["seconds"]} if control else {})}, page)
    stages = [("base", out / "eval" / "base.jsonl"), (COLD_START, out / "eval" / "sft.jsonl"),
              (RL, out / "eval" / "rl.jsonl"), (CONTROL, out / "eval" / "sft_control.jsonl")]
    stages += [(label, out / "text_only" / "eval" / f"{stem}.jsonl") for stem, label in TEXT_LABELS.items()]
    episodes = {label: p for label, p in stages if label in by} | (
        {TEXT_ONLY_BASE: out / "eval" / "text_only.jsonl"} if exp.text_only_baseline else {})
    folder = (Path(args.data) if args.data else Path(args.results) / "data") / setup.name
    data = export_run(out, folder, json.loads(summary.read_text()), episodes)
    print(f"data for the page: {data.parent}")
    return data.parent
