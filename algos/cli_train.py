"""``agentrl main-job`` and ``agentrl train``: their configs built from the command line (a ``--config`` file,
flags, then ``key=value`` overrides, checked against the config's declared types), their flags and their runs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.algos.cli_policy import ENV_KWARGS_HELP, add_engine_args, policy_for, preflight
from agentrl.algos.config import apply_overrides, config_from_dict, deep_merge, load_config_file
from agentrl.algos.config_reference import config_keys_help
from agentrl.algos.objectives import algorithm_names
from agentrl.algos.rollout.env_factory import EXECUTORS
from agentrl.algos.run_folder import claim_run, refuse_resume_without_run
from agentrl.envs.cli import json_object

MAIN_JOB_ENV = "AgentRL/ToolUse-v0"


# ---------------------------------------------------------------------------------------------- configs from args


def build_train_config(args: argparse.Namespace) -> Any:
    """The :class:`~agentrl.algos.training.config.TrainConfig` of ``agentrl train``: the run's config.json on
    ``--resume``, then ``--config``, the flags and the ``key=value`` overrides, each over the one before."""
    from agentrl.algos.training.config import TrainConfig

    d: dict[str, Any] = {}
    if args.resume and args.out and (Path(args.out) / "config.json").is_file() and not args.config:
        d = json.loads((Path(args.out) / "config.json").read_text())  # resume what was run
    if args.config:
        d = deep_merge(d, load_config_file(args.config, TrainConfig))
    if getattr(args, "report_to", None):
        d["report_to"] = args.report_to
    for key in ("env", "env_kwargs", "algo", "model", "out", "adapter", "executor", "device", "dtype"):
        v = getattr(args, key, None)
        if v is not None:
            d[key] = v
    if getattr(args, "async_", False):
        d.setdefault("asynchronous", {})["enabled"] = True
    if getattr(args, "envs", None):
        from agentrl.algos.training.tasks import parse_mixture

        d["envs"] = [dataclasses.asdict(c) for c in parse_mixture(",".join(args.envs))]
    d = apply_overrides(d, args.overrides)
    d.setdefault("out", f"runs/{d.get('algo', 'grpo')}")
    return TrainConfig.from_dict(d)


def build_main_job_config(args: argparse.Namespace) -> Any:
    """The :class:`~agentrl.algos.recipes.main_job.MainJobConfig` of ``agentrl main-job``: ``--config``, the flags,
    then the ``key=value`` overrides."""
    from agentrl.algos.recipes.main_job import MainJobConfig

    d: dict[str, Any] = load_config_file(args.config, MainJobConfig) if args.config else {}
    if getattr(args, "report_to", None):
        d["report_to"] = args.report_to
    for key in ("env", "env_kwargs", "model", "out", "device", "dtype"):
        v = getattr(args, key, None)
        if v is not None:
            d[key] = v
    return config_from_dict(MainJobConfig, apply_overrides(d, args.overrides))


# ---------------------------------------------------------------------------------------------- commands


def cmd_main_job(args: argparse.Namespace) -> int:
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise ValueError(f"the main job runs in one process (under torchrun every rank would run the whole job: "
                         f"WORLD_SIZE={os.environ['WORLD_SIZE']}); launch `agentrl main-job` without torchrun, or "
                         f"train data-parallel with `torchrun ... -m agentrl.algos.cli train --algo grpo ...`")
    from agentrl.algos.recipes.main_job import run_main_job

    cfg = build_main_job_config(args)
    stages = [Path(cfg.out) / "sft", Path(cfg.out) / "grpo"]
    check = _start_check(args.resume, [Path(cfg.out), *stages] if args.resume else stages, cfg.out)
    preflight([(cfg.env, cfg.env_kwargs)], cfg.model)
    # one writer for the whole job: a second main-job (or train) on this --out is refused in one line; a fresh
    # start is refused over a finished run (a --resume where there is none), checked under the lock so no other
    # job can change it until this ends
    with claim_run(cfg.out, check=check):
        return _main_job(args, cfg, run_main_job)


def _main_job(args: argparse.Namespace, cfg: Any, run_main_job: Any) -> int:
    from agentrl.algos.rollout.demonstrations import check_demonstrations

    check_demonstrations(cfg.env, cfg.env_kwargs, "a cold start trained with agentrl train --algo sft "
                         "sft.data=conversations.jsonl, then agentrl train --algo grpo --adapter RUN/adapter")
    print(f"agentrl main-job: {cfg.env} with {cfg.model} -> {cfg.out}")
    from agentrl.algos.recipes.main_job import stage_config

    sft, rl = stage_config(cfg, "sft", Path(cfg.out) / "sft"), stage_config(cfg, "rl", Path(cfg.out) / "grpo")
    rl_families = rl.env_kwargs.get("families")
    print("  base eval -> SFT cold start on", sft.env_kwargs.get("families") or "all families",
          f"({getattr(sft.algorithm, 'num_demos', '?')} demos, {sft.steps} steps) -> {rl.algo.upper()} on",
          f"{len(rl_families)} families" if rl_families else "all families",
          f"({rl.steps} steps{', task sampler on' if rl.sampler.enabled else ''}) -> eval")
    policy = policy_for(args, cfg.model, run_dir=cfg.out, lora_rank=cfg.lora.r, record_dir=cfg.out,
                        trainer_on_gpu=_trains_on_gpu(cfg.device))
    try:
        result = run_main_job(cfg, resume=args.resume, policy=policy)
    finally:
        if policy is not None:
            policy.close()
    print()
    print(result["table"])
    print()
    print("timings:", ", ".join(f"{k} {v / 60:.1f} min" for k, v in result["timings"].items()))
    print(f"results: {result['out'] / 'results.md'}; plots: {result['out'] / 'plots'}")
    if result.get("signal_summary"):  # the GRPO stage's learning signal, as agentrl train ends (docs/sampler.md)
        print(result["signal_summary"])
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    if args.algo is None and not args.config and not (args.resume and args.out):
        print(f"agentrl train: pass --algo NAME ({', '.join(algorithm_names())}), a --config file that sets algo, "
              f"or --resume --out RUN_DIR; the main job (base eval -> SFT cold start -> GRPO -> eval) is "
              f"`agentrl main-job`", file=sys.stderr)
        return 2
    cfg = build_train_config(args)
    check = _start_check(args.resume, [Path(cfg.out)], cfg.out)
    preflight([(c.id, c.env_kwargs) for c in cfg.env_mixture()] or [(cfg.env, cfg.env_kwargs)], cfg.model, cfg.adapter)
    if cfg.algo == "sft" and cfg.algorithm.data:  # a missing or malformed sft.data: one line before the model loads
        from agentrl.algos.rollout.demonstrations import load_conversations

        load_conversations(cfg.algorithm.data)
    # a second trainer on this --out is refused before it starts an engine; the start check runs under the lock
    with claim_run(cfg.out, check=check):
        return _train(args, cfg)


def _train(args: argparse.Namespace, cfg: Any) -> int:
    from agentrl.algos.training.launch import train

    if cfg.algo == "sft" and not cfg.algorithm.data and not cfg.env_mixture():
        from agentrl.algos.rollout.demonstrations import check_demonstrations

        check_demonstrations(cfg.env, cfg.env_kwargs, "sft.data=conversations.jsonl")
    mode = ""
    if cfg.asynchronous.enabled:
        a = cfg.asynchronous
        mode = f" (async: queue {a.queue_size}, max_staleness {a.max_staleness}, {a.staleness})"
    policy = policy_for(args, cfg.model, run_dir=cfg.out, lora_rank=cfg.lora.r, record_dir=cfg.out,
                        placement=cfg.engine, trainer_on_gpu=_trains_on_gpu(cfg.device))
    where = f", rollouts on {getattr(policy, 'base_url', args.policy_url)}" if policy is not None else ""
    env_label = "+".join(c.name for c in cfg.env_mixture()) or cfg.env
    print(f"agentrl train: {cfg.algo} on {env_label} with {cfg.model}, {cfg.steps} steps{mode}{where} -> {cfg.out}")
    try:
        trainer = train(cfg, resume=args.resume, **({"policy": policy, "tokenizer": policy.tokenizer}
                                                    if policy is not None else {}))
    finally:
        if policy is not None:
            policy.close()
    from agentrl.algos.training import distributed

    distributed.finish(trainer.ranks)  # every rank has closed its policy; leave the process group together
    last = trainer.history[-1] if trainer.history else {}
    shown = {k: round(v, 4) for k, v in last.items() if k in ("reward/mean", "reward/correct", "train/loss")}
    print(f"done at step {trainer.global_step}: {shown}; adapter: {Path(cfg.out) / 'adapter'}")
    summary = trainer.signal_summary()  # the share of updates with a learning signal (docs/sampler.md)
    if summary:
        print(summary)
    return 0


def _start_check(resume: bool, run_dirs: list[Path], out: str) -> Callable[[], None]:
    """What a command checks once it holds ``out``'s lock, before any model loads: with ``--resume`` that one of
    ``run_dirs`` holds a run to continue (:func:`~agentrl.algos.run_folder.refuse_resume_without_run`; checked at
    once too when ``out`` does not exist, so a refused command leaves no folder behind), without it that none
    holds a trained run a fresh start would overwrite."""
    if resume:
        if not Path(out).exists():
            refuse_resume_without_run(run_dirs, out)
        return lambda: refuse_resume_without_run(run_dirs, out)
    from agentrl.algos.training.checkpoint import refuse_fresh_start

    return lambda: refuse_fresh_start(run_dirs, out)


# ---------------------------------------------------------------------------------------------- flags


def _trains_on_gpu(device: str) -> bool | None:
    """Whether a run on ``device`` trains on CUDA devices (None for ``auto``: the engine asks torch)."""
    return None if device == "auto" else device.startswith("cuda")


def _report_to(text: str) -> list[str]:
    """``--report-to wandb,mlflow`` -> ``["wandb", "mlflow"]``, each name checked against the known trackers."""
    from agentrl.algos.evaluation.trackers import tracker_names

    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in tracker_names()]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown tracker {', '.join(bad) or text!r}; choose from "
                                         f"{', '.join(tracker_names())}")
    return names


def add_training_commands(sub: Any) -> None:
    """``agentrl main-job`` and ``agentrl train``, their flags and handlers."""
    algos = algorithm_names()
    p = sub.add_parser("main-job", help=f"the main job: base eval -> SFT cold start -> GRPO -> eval on {MAIN_JOB_ENV}",
                       description="Evaluate the model, teach it the tool-call format with a short SFT cold start, "
                                   "train it with GRPO, evaluate again and print the table (MainJobConfig keys: "
                                   "agentrl config-docs).")
    p.add_argument("--env", default=MAIN_JOB_ENV, help=f"environment id or module:factory (default {MAIN_JOB_ENV})")
    p.add_argument("--env-kwargs", type=json_object, metavar="JSON", help=ENV_KWARGS_HELP)
    p.add_argument("--model", help="model alias, hub id or path (default smollm2-135m)")
    p.add_argument("--config", help="JSON or YAML file of MainJobConfig keys")
    p.add_argument("--out", help="run directory (default runs/main)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last finished stage")
    p.add_argument("--report-to", type=_report_to, metavar="SINKS",
                   help="experiment trackers, comma-separated (the report_to key; docs/trackers.md)")
    add_engine_args(p, device_default=None, dtype_default=None)
    p.add_argument("overrides", nargs="*", help="key=value MainJobConfig overrides (stages.rl.steps=20 eval_tasks=64)")
    p.set_defaults(func=cmd_main_job)

    p = sub.add_parser("train", help="train a LoRA adapter with one algorithm",
                       description=f"Train with a registered algorithm ({', '.join(algos)}). The main job is "
                                   "`agentrl main-job`.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="config keys (key=value, dotted for sections; types, defaults and meanings: "
                              "agentrl config-docs, docs/configuration.md):\n" + config_keys_help())
    p.add_argument("--env", help=f"environment id or module:factory (default {MAIN_JOB_ENV})")
    p.add_argument("--env-kwargs", type=json_object, metavar="JSON", help=ENV_KWARGS_HELP)
    p.add_argument("--envs", action="append", metavar="ID[:WEIGHT],...",
                   help="train on a mixture of envs, e.g. --envs ToolUse-v0:2,Search-v0:1 (repeatable; replaces "
                        "--env; see docs/mixtures.md)")
    p.add_argument("--algo", choices=algos, help="algorithm (agentrl.algos.objectives.ALGORITHMS)")
    p.add_argument("--model", help="model alias, hub id or path (default smollm2-135m)")
    p.add_argument("--adapter", help="start from this PEFT adapter")
    p.add_argument("--config", help="JSON or YAML file of config keys (see docs/configuration.md)")
    p.add_argument("--out", help="run directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--executor", choices=list(EXECUTORS),
                   help="where environments run: threads in this process (local, default) or Ray actors")
    p.add_argument("--async", dest="async_", action="store_true",
                   help="decoupled rollout and training: sample the next batches while updating "
                        "(asynchronous.* keys: queue_size, max_staleness, staleness=drop|tis)")
    p.add_argument("--report-to", type=_report_to, metavar="SINKS",
                   help="experiment trackers, comma-separated: tensorboard (default), wandb, mlflow, trackio, none "
                        "(the report_to key; docs/trackers.md)")
    add_engine_args(p, device_default=None, dtype_default=None)
    p.add_argument("overrides", nargs="*", help="key=value config overrides (dotted: grpo.beta=0.04)")
    p.set_defaults(func=cmd_train)
