"""``agentrl``: train, evaluate and plot.

::

    agentrl main-job                                            # base eval -> SFT cold start -> GRPO -> eval
    agentrl main-job rl_steps=20 eval_tasks=64 --out runs/main  # the main job, resized
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo steps=50 grpo.beta=0.04 lora.r=8 --out runs/g
    agentrl train --config run.yaml --resume                    # a file of TrainConfig keys, continued
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --async asynchronous.max_staleness=2   # overlap rollouts
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --device cuda --dtype bf16    # default --device auto
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --policy-url http://127.0.0.1:8000   # rollouts on vLLM
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --engine vllm     # starts vLLM itself (docs/engines.md)
    agentrl export-model models/smollm2 [--model NAME]          # a model folder an engine loads
    agentrl eval --env AgentRL/ToolUse-v0 --adapter runs/g/adapter --n 4 --out results.jsonl [--no-tools]
    agentrl plot runs/g
    agentrl config-docs > docs/configuration.md

Overrides are ``key=value`` with dotted keys into the config (``collector.max_new_tokens=128``); values are
read as JSON when they parse (``env_kwargs.families=["multiply"]``, ``grpo.scale_std=false``), else as text.
Every key and value is checked against the config's declared types before anything runs
(:func:`agentrl.algos.config.config_from_dict`): ``group_size=abc`` or a typo (``grup_size=3``) is an error
naming the key, the expected type and the nearest valid key. ``agentrl train --help`` lists the keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from agentrl.algos.config import apply_overrides, config_from_dict, deep_merge, load_config_file
from agentrl.algos.config_reference import config_docs, config_keys_help
from agentrl.algos.objectives import algorithm_names
from agentrl.algos.policy import POLICIES
from agentrl.algos.policy.base import DEFAULT_MAX_BATCH_TOKENS
from agentrl.algos.policy.engine import ENGINES, VLLM_PYTHON_ENV, VLLM_VENV
from agentrl.algos.rollout.env_factory import EXECUTORS
from agentrl.envs.cli import json_object
from agentrl.envs.plugins import ContractError

MAIN_JOB_ENV = "AgentRL/ToolUse-v0"
DEFAULT_EVAL_TASKS = 32
"""Test tasks ``agentrl eval`` draws when neither ``--tasks`` nor ``--tasks-file`` says otherwise."""


# ---------------------------------------------------------------------------------------------- configs from args


def build_train_config(args) -> Any:
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


def build_main_job_config(args) -> Any:
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


def cmd_main_job(args) -> int:
    import os

    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise ValueError(f"the main job runs in one process (under torchrun every rank would run the whole job: "
                         f"WORLD_SIZE={os.environ['WORLD_SIZE']}); launch `agentrl main-job` without torchrun, or "
                         f"train data-parallel with `torchrun ... -m agentrl.algos.cli train --algo grpo ...`")
    from agentrl.algos.recipes.main_job import run_main_job

    cfg = build_main_job_config(args)
    preflight([(cfg.env, cfg.env_kwargs)], cfg.model)
    from agentrl.algos.rollout.demonstrations import check_demonstrations

    check_demonstrations(cfg.env, cfg.env_kwargs, "a cold start trained with agentrl train --algo sft "
                         "sft.data=conversations.jsonl, then agentrl train --algo grpo --adapter RUN/adapter")
    print(f"agentrl main-job: {cfg.env} with {cfg.model} -> {cfg.out}")
    print("  base eval -> SFT cold start on", cfg.sft_families or "all families",
          f"({cfg.sft_demos} demos, {cfg.sft_steps} steps) -> GRPO ({cfg.rl_steps} steps) -> eval")
    policy = _policy_for(args, cfg.model, run_dir=cfg.out, lora_rank=cfg.lora.r, record_dir=cfg.out)
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
    return 0


def cmd_train(args) -> int:
    if args.algo is None and not args.config and not (args.resume and args.out):
        print(f"agentrl train: pass --algo NAME ({', '.join(algorithm_names())}), a --config file that sets algo, "
              f"or --resume --out RUN_DIR; the main job (base eval -> SFT cold start -> GRPO -> eval) is "
              f"`agentrl main-job`", file=sys.stderr)
        return 2
    from agentrl.algos.training.checkpoint import lock_run
    from agentrl.algos.training.launch import train

    cfg = build_train_config(args)
    preflight([(c.id, c.env_kwargs) for c in cfg.env_mixture()] or [(cfg.env, cfg.env_kwargs)], cfg.model, cfg.adapter)
    if cfg.algo == "sft" and not cfg.sft.data and not cfg.env_mixture():
        from agentrl.algos.rollout.demonstrations import check_demonstrations

        check_demonstrations(cfg.env, cfg.env_kwargs, "sft.data=conversations.jsonl")
    mode = ""
    if cfg.asynchronous.enabled:
        a = cfg.asynchronous
        mode = f" (async: queue {a.queue_size}, max_staleness {a.max_staleness}, {a.staleness})"
    lock_run(cfg.out)  # a second trainer on this --out is refused before it starts an engine
    policy = _policy_for(args, cfg.model, run_dir=cfg.out, lora_rank=cfg.lora.r, record_dir=cfg.out)
    where = f", rollouts on {getattr(policy, 'base_url', args.policy_url)}" if policy is not None else ""
    env_label = "+".join(c.name for c in cfg.env_mixture()) or cfg.env
    print(f"agentrl train: {cfg.algo} on {env_label} with {cfg.model}, {cfg.steps} steps{mode}{where} -> {cfg.out}")
    try:
        trainer = train(cfg, resume=args.resume, **({"policy": policy, "tokenizer": policy.tokenizer}
                                                    if policy is not None else {}))
    finally:
        if policy is not None:
            policy.close()
    last = trainer.history[-1] if trainer.history else {}
    shown = {k: round(v, 4) for k, v in last.items() if k in ("reward/mean", "reward/correct", "train/loss")}
    print(f"done at step {trainer.global_step}: {shown}; adapter: {Path(cfg.out) / 'adapter'}")
    return 0


def preflight(envs: list[tuple[str, dict[str, Any]]], model: str, adapter: str | None = None) -> None:
    """Fail fast, before any model loads, with one line that says what to do: each ``(env id, env kwargs)`` is
    registered and its env comes up (:func:`~agentrl.algos.rollout.env_factory.preflight_env`: a wrong id
    names the closest, a code env without bubblewrap gives the install line), ``model`` can be loaded here
    without a network call (:func:`~agentrl.algos.models.check_model_available`) and ``adapter`` was trained on
    ``model`` (:func:`~agentrl.algos.models.lora.check_adapter_base`). Raises ``ValueError`` /
    ``FileNotFoundError``."""
    from agentrl.algos.models import check_model_available
    from agentrl.algos.models.lora import check_adapter_base, check_adapter_folder
    from agentrl.algos.rollout.env_factory import preflight_env

    for env_id, env_kwargs in envs:
        preflight_env(env_id, env_kwargs)
    if adapter:
        check_adapter_folder(adapter)
    check_model_available(model)
    if adapter:
        check_adapter_base(adapter, model)


def _policy_for(args, model: str, *, run_dir=None, lora_rank: int = 16, record_dir=None):
    """The policy backend ``--policy`` names (``POLICIES``; default ``openai`` with ``--policy-url``, else
    ``hf``).

    ``--engine vllm``: a vLLM server this process starts (:func:`agentrl.algos.policy.engine.start_engine_policy`,
    its log in ``run_dir``, adapters up to rank ``lora_rank``); closing the policy stops it.
    ``hf``: None (the trainer or ``eval`` samples in process). Any other backend is a server reached at
    ``--policy-url`` through its class's ``connect(url, tokenizer, *, model, **server_options)`` with ``model``'s
    tokenizer: a running vLLM, SGLang or ``serve_policy`` server samples the episodes, and a trainer hot-swaps its
    LoRA adapter there after each optimizer step. ``record_dir`` (a run's folder, for ``train`` and ``main-job``):
    an :class:`~agentrl.algos.policy.openai.OpenAIPolicy` at ``--policy-url`` records the adapters it has loaded
    there, so the ``--resume`` of a killed run unloads what the killed process left on the server."""
    if getattr(args, "engine", None):
        if args.policy_url or args.policy not in (None, "openai"):
            raise ValueError("--engine starts its own server: pass --engine or --policy-url/--policy, not both")
        from agentrl.algos.policy.engine import start_engine_policy

        return start_engine_policy(model, engine=args.engine, run_dir=run_dir, lora_rank=lora_rank,
                                   dtype=args.dtype, python=args.engine_python, adapter_dir=args.adapter_dir,
                                   extra_args=shlex.split(args.engine_args or ""), record_dir=record_dir)
    name = args.policy or ("openai" if args.policy_url else "hf")
    if name == "hf":
        if args.policy_url:
            raise ValueError("--policy-url needs a server backend (--policy openai), not --policy hf")
        return None
    backend = POLICIES.get(name)
    if not args.policy_url:
        raise ValueError(f"--policy {name} samples through a server: pass its --policy-url")
    if not callable(getattr(backend, "connect", None)):
        raise ValueError(f"--policy {name}: {backend.__name__} has no connect(url, tokenizer, ...) classmethod")
    from agentrl.algos.models import load_tokenizer

    try:
        from agentrl.algos.policy.openai import OpenAIPolicy, rank_url

        records = record_dir is not None and isinstance(backend, type) and issubclass(backend, OpenAIPolicy)
        extra = {"record_dir": record_dir} if records else {}
        return backend.connect(rank_url(args.policy_url), load_tokenizer(model), model=args.served_model,
                               lora_api=args.lora_api, adapter_dir=args.adapter_dir, **extra)
    except RuntimeError as e:
        raise ValueError(f"--policy-url: {e}") from e


def cmd_eval(args) -> int:
    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.ledger import adapter_sha256, git_state
    from agentrl.algos.evaluation.report import results_table, sampling_table
    from agentrl.algos.models import load_model
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.rollout.collector import CollectorConfig
    from agentrl.algos.training.tasks import test_tasks

    env_kwargs = args.env_kwargs or {}
    if args.ledger:
        git_state(Path(args.ledger).parent)  # the commit its row names: the one this command starts from
    preflight([(args.env, env_kwargs)], args.model, args.adapter)
    if args.tasks_file:
        from agentrl.envs.datasets import load_rows

        tasks = load_rows(args.tasks_file, ())  # every row of the file unless --tasks is given
        if args.tasks is not None:
            tasks = tasks[: args.tasks]
    else:
        tasks = test_tasks(args.env, DEFAULT_EVAL_TASKS if args.tasks is None else args.tasks, env_kwargs,
                              seed=args.seed)
    rank = 16
    if args.adapter and getattr(args, "engine", None):
        from agentrl.algos.policy.engine import adapter_rank

        rank = adapter_rank(args.adapter)
    policy = _policy_for(args, args.model, run_dir=Path(args.out).parent if args.out else None, lora_rank=rank)
    if policy is not None:
        if args.adapter:
            policy.use_adapter(args.adapter)
    else:
        model, tokenizer = load_model(args.model, dtype=args.dtype, device=args.device,
                                      attn_implementation=args.attn_implementation)
        if args.adapter:
            from agentrl.algos.models.lora import load_adapter

            model = load_adapter(model, args.adapter)
        policy = HFPolicy(model, tokenizer, max_batch_tokens=args.max_batch_tokens or None)
    cfg = CollectorConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                          temperature=args.temperature, seed=args.seed)
    try:
        report = evaluate(args.env, policy, tasks, args.n, cfg, env_kwargs=env_kwargs, out=args.out,
                          ledger=args.ledger, ledger_fields={
                              "model": args.model, "adapter": adapter_sha256(args.adapter) if args.adapter else "base"},
                          text_only=args.no_tools)
    finally:
        policy.close()
    label = ("text-only " if args.no_tools else "") + (Path(args.adapter).name if args.adapter else args.model)
    print(results_table([(label, report)]))
    if args.n > 1:  # pass@k and pass^k for k = 1 … N, success by chain length
        print("\n" + sampling_table(label, report))
    if args.out:
        print(f"episodes: {args.out}")
    return 0


def cmd_export_model(args) -> int:
    from agentrl.algos.models.export import export_model

    print(export_model(args.model, args.dir, dtype=args.dtype))
    return 0


def cmd_plot(args) -> int:
    from agentrl.algos.evaluation.plot import plot_run

    paths = plot_run(args.run_dir)
    if not paths:
        print(f"nothing to plot in {args.run_dir} (no metrics.jsonl or eval summaries)", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0


def cmd_config_docs(args) -> int:
    print(config_docs())
    return 0


def add_engine_args(p: argparse.ArgumentParser, *, device_default: str | None, dtype_default: str | None) -> None:
    """``--device``, ``--dtype`` and the inference-server options (``--policy-url`` ...) of a command."""
    p.add_argument("--device", default=device_default,
                   help="torch device: auto (CUDA when available, else CPU; the default), cpu, cuda, cuda:1")
    p.add_argument("--dtype", default=dtype_default,
                   help="auto (bf16 where the hardware has bf16 units, else fp32; the default), bf16, fp32, fp16")
    p.add_argument("--policy", choices=POLICIES.names(),
                   help="policy backend (agentrl.algos.policy.POLICIES): hf in process (the default), or a "
                        "server at --policy-url (openai, the default with --policy-url)")
    p.add_argument("--policy-url", help="sample through this OpenAI-compatible server (vLLM, SGLang, serve_policy; a "
                   "list, one per node, or a {node_rank}/{local_rank}/{rank} template under torchrun) instead of "
                   "in-process; the LoRA adapter is hot-swapped after each step")
    p.add_argument("--served-model", help="the server's base model name (default: the first it lists)")
    p.add_argument("--lora-api", choices=["vllm", "sglang"], default="vllm", help="the server's runtime LoRA API")
    p.add_argument("--adapter-dir", help="where adapter versions are written for the server to read (a folder the "
                                         "server sees; default: a temporary folder)")
    p.add_argument("--engine", choices=ENGINES.names(), help="start this inference server (engine.ENGINES; on "
                   "127.0.0.1, log in the run folder) and sample through it, from an exported model (docs/engines.md)")
    p.add_argument("--engine-python", help=f"the engine's python (default ${VLLM_PYTHON_ENV}, else "
                                           f"./{VLLM_VENV}/bin/python, else a python that imports vllm: "
                                           "this one or the one beside `vllm` on PATH)")
    p.add_argument("--engine-args", help="more flags for the --engine server, one string (e.g. "
                                         "'--gpu-memory-utilization 0.4' on a GPU the trainer shares)")


ENV_KWARGS_HELP = ("JSON object of environment keyword arguments, e.g. '{\"tools\": [\"my_tools:lookup\"], "
                   "\"dataset\": \"train.jsonl\", \"test_dataset\": \"test.jsonl\"}' (the env_kwargs key; "
                   "docs/own-tools.md)")


def _report_to(text: str) -> list[str]:
    """``--report-to wandb,mlflow`` -> ``["wandb", "mlflow"]``, each name checked against the known trackers."""
    from agentrl.algos.evaluation.trackers import tracker_names

    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in tracker_names()]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown tracker {', '.join(bad) or text!r}; choose from "
                                         f"{', '.join(tracker_names())}")
    return names


class _Parser(argparse.ArgumentParser):
    """argparse without prefix matching: ``--adapter`` on a command that has only ``--adapter-dir`` is an error, not
    silently that other flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentrl", description="Train and evaluate LLM agents on agentrl envs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

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
    p.add_argument("overrides", nargs="*", help="key=value MainJobConfig overrides (rl_steps=20 eval_tasks=64)")
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

    from agentrl.algos.models import DEFAULT_MODEL
    from agentrl.algos.rollout.collector import CollectorConfig

    rollout = CollectorConfig()  # eval samples like training does unless told otherwise
    p = sub.add_parser("eval", help="evaluate a model (and adapter) on an env's test tasks or a task file")
    p.add_argument("--env", default=MAIN_JOB_ENV, help="environment id or module:factory")
    p.add_argument("--env-kwargs", type=json_object, metavar="JSON", help=ENV_KWARGS_HELP)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model alias, hub id or path")
    p.add_argument("--adapter", help="PEFT adapter folder (e.g. runs/x/adapter)")
    p.add_argument("--n", type=int, default=1, help="samples per task (Average@N, Pass@N)")
    p.add_argument("--tasks", type=int, help=f"number of tasks (default: {DEFAULT_EVAL_TASKS} test tasks, or "
                                              "every row of --tasks-file)")
    p.add_argument("--tasks-file", help="JSONL of task rows instead of the env's test split")
    p.add_argument("--out", help="write episodes here (JSONL) and the summary beside it")
    p.add_argument("--ledger", metavar="PATH",
                   help="append a row to this ledger file when the tasks are (rows of) a fixed set whose .jsonl and "
                        "sidecar .json lie in its folder (benchmarks/heldout/ledger.jsonl); default: record nothing")
    p.add_argument("--no-tools", action="store_true", help="text-only baseline: the env offers no tools")
    p.add_argument("--temperature", type=float, default=rollout.temperature, help="sampling temperature (0 = greedy)")
    p.add_argument("--max-new-tokens", type=int, default=rollout.max_new_tokens, help="tokens per assistant reply")
    p.add_argument("--max-turns", type=int, default=rollout.max_turns, help="assistant turns per episode")
    p.add_argument("--max-batch-tokens", type=int, default=DEFAULT_MAX_BATCH_TOKENS,
                   help="decode at most this many tokens of context per batch (prompts beyond their shared prefix "
                        f"plus reply budgets; default {DEFAULT_MAX_BATCH_TOKENS}; 0: no bound)")
    p.add_argument("--seed", type=int, default=rollout.seed)
    p.add_argument("--attn-implementation", help="transformers attention kernel (sdpa, eager, flash_attention_2)")
    add_engine_args(p, device_default="auto", dtype_default="auto")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("export-model", help="write a model folder an inference engine (vLLM, SGLang) loads",
                       description="De-quantized weights, tokenizer and chat template of --model, saved to DIR.")
    p.add_argument("dir", help="the folder to write (must not exist or be empty)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model alias, hub id or path")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="weight dtype in the folder (fp32, the default, keeps de-quantized weights exact)")
    p.set_defaults(func=cmd_export_model)

    p = sub.add_parser("plot", help="write PNG training curves (and the eval comparison) of a run")
    p.add_argument("run_dir")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("config-docs", help="print the configuration reference (markdown)")
    p.set_defaults(func=cmd_config_docs)
    return parser


def _other_commands_flags(parser: argparse.ArgumentParser, args, extra: list[str]) -> str:
    """A hint for flags this command does not take but another does (``main-job --adapter``: train's and eval's)."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    hints = []
    for flag in (x.split("=", 1)[0] for x in extra if x.startswith("--")):
        owners = [name for name, p in subs.items() if name != args.command and flag in p._option_string_actions]
        if owners:
            hints.append(f"{flag} is a flag of {' and '.join(owners)}, not of {args.command}")
    return f" ({'; '.join(hints)})" if hints else ""


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # lists every registered algorithm's keys: a broken registration shows here
    except ContractError as e:
        print(f"agentrl: error: {e}", file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(argv)
    if extra:  # key=value overrides may come after options (argparse stops collecting positionals there)
        if args.command not in ("train", "main-job") or any(x.startswith("-") or "=" not in x for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}{_other_commands_flags(parser, args, extra)}")
        args.overrides = list(args.overrides) + extra
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as under `python -m`: "my_tools:lookup" refs import from here
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, ContractError) as e:
        print(f"agentrl {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
