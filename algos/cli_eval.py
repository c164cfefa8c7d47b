"""``agentrl eval`` (a model, or an adapter on it, on an env's test tasks or a task file: the results table,
the episodes, a ledger row) and ``agentrl plot`` (a run's curves as PNG files)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentrl.algos.cli_policy import ENV_KWARGS_HELP, add_engine_args, policy_for, preflight
from agentrl.algos.cli_train import MAIN_JOB_ENV
from agentrl.algos.models import DEFAULT_MODEL
from agentrl.algos.policy.base import DEFAULT_MAX_BATCH_TOKENS
from agentrl.envs.cli import json_object

DEFAULT_EVAL_TASKS = 32
"""Test tasks ``agentrl eval`` draws when neither ``--tasks`` nor ``--tasks-file`` says otherwise."""

POLICY_USER = "policy"
"""The ``user_url`` env kwarg that has the policy's own server play the user (τ²-bench's user simulator)."""


def check_policy_user(env_kwargs: dict[str, Any], args: argparse.Namespace) -> None:
    """Refuse ``user_url="policy"`` without a policy server, before any model loads (``ValueError``)."""
    if env_kwargs.get("user_url") == POLICY_USER and not (getattr(args, "engine", None) or args.policy_url):
        raise ValueError(f'--env-kwargs user_url="{POLICY_USER}" has the policy\'s own server play the user: pass '
                         "--engine vllm (or --policy-url of a chat server); the in-process policy serves no chat API")


def with_policy_user(env_kwargs: dict[str, Any], policy: Any) -> dict[str, Any]:
    """``env_kwargs`` with ``user_url="policy"`` replaced by the URL of ``policy``'s server, and ``user_model`` by
    its base model unless given: the model under evaluation, without its adapter, plays the user."""
    if env_kwargs.get("user_url") != POLICY_USER:
        return env_kwargs
    url, base = getattr(policy, "base_url", None), getattr(policy, "base_model_name", None)
    if url is None or base is None:
        raise ValueError(f'--env-kwargs user_url="{POLICY_USER}": the policy ({type(policy).__name__}) has no '
                         "OpenAI-compatible server to play the user")
    resolved = {**env_kwargs, "user_url": url, "user_model": env_kwargs.get("user_model", base)}
    if getattr(policy, "api_key", None) and "user_api_key" not in env_kwargs:
        resolved["user_api_key"] = policy.api_key
    return resolved


def cmd_eval(args: argparse.Namespace) -> int:
    from agentrl.algos.evaluation.ledger import git_state

    env_kwargs = args.env_kwargs or {}
    if args.ledger:
        git_state(Path(args.ledger).parent)  # the commit its row names: the one this command starts from
    check_policy_user(env_kwargs, args)
    preflight([(args.env, env_kwargs)], args.model, args.adapter)
    if not args.out:
        return _eval(args, env_kwargs)
    from agentrl.algos.run_folder import claim_run

    with claim_run(Path(args.out).parent, writes=Path(args.out).name):  # a second eval writing --out is refused
        return _eval(args, env_kwargs)


def _eval(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> int:
    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.ledger import adapter_sha256
    from agentrl.algos.evaluation.report import results_table, sampling_table
    from agentrl.algos.models import load_model
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.rollout.collector import CollectorConfig
    from agentrl.algos.training.tasks import test_tasks

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
    policy = policy_for(args, args.model, run_dir=Path(args.out).parent if args.out else None, lora_rank=rank,
                        trainer_on_gpu=False)  # nothing trains beside the engine: vLLM's own memory share
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
    env_kwargs = with_policy_user(env_kwargs, policy)
    cfg = CollectorConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                          max_total_tokens=args.max_total_tokens,
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


def cmd_plot(args: argparse.Namespace) -> int:
    from agentrl.algos.evaluation.plot import plot_run

    paths = plot_run(args.run_dir)
    if not paths:
        print(f"nothing to plot in {args.run_dir} (no metrics.jsonl or eval summaries)", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0


def add_eval_command(sub: Any) -> None:
    """``agentrl eval``: its flags (sampling as training samples unless told otherwise) and handler."""
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
    p.add_argument("--max-total-tokens", type=int, default=rollout.max_total_tokens,
                   help="tokens per episode: prompt, replies and observations (BFCL's multi-turn prompts alone take "
                        "3,000-5,000)")
    p.add_argument("--max-batch-tokens", type=int, default=DEFAULT_MAX_BATCH_TOKENS,
                   help="decode at most this many tokens of context per batch (prompts beyond their shared prefix "
                        f"plus reply budgets; default {DEFAULT_MAX_BATCH_TOKENS}; 0: no bound)")
    p.add_argument("--seed", type=int, default=rollout.seed)
    p.add_argument("--attn-implementation", help="transformers attention kernel (sdpa, eager, flash_attention_2)")
    add_engine_args(p, device_default="auto", dtype_default="auto")
    p.set_defaults(func=cmd_eval)


def add_plot_command(sub: Any) -> None:
    """``agentrl plot RUN_DIR``."""
    p = sub.add_parser("plot", help="write PNG training curves (and the eval comparison) of a run")
    p.add_argument("run_dir")
    p.set_defaults(func=cmd_plot)
