"""Train on agentrl envs with TRL's ``GRPOTrainer``, through its ``rollout_func`` hook and our collector.

TRL generates single-turn completions by itself; for multi-turn tool use it accepts a *rollout function* that
returns, per prompt it was given, the prompt's token ids, the completion's token ids, their sampling
log-probabilities and an optional ``env_mask`` (1 on tokens the model sampled, 0 on tokens the environment
inserted: tool output, template markup between turns). TRL multiplies that mask into its loss mask. This module
supplies such a function, built on :func:`agentrl.algos.rollout.collector.collect`, so the whole multi-turn
episode is token-exact (sampled ids are never re-tokenised) and the env's outcome reward reaches TRL's reward
functions::

    from trl import GRPOConfig, GRPOTrainer
    from agentrl.algos.integrations.trl import env_reward_func, make_rollout_func, tasks_dataset
    from agentrl.envs.tool_use.env import make_tasks

    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer,
        reward_funcs=env_reward_func,
        train_dataset=tasks_dataset(make_tasks(64, "train")),
        rollout_func=make_rollout_func("AgentRL/ToolUse-v0"),
        args=GRPOConfig(num_generations=4, ...),
    )
    trainer.train()

How the pieces meet TRL 1.16's contract (read from ``trl/trainer/grpo_trainer.py``):

* **Prompts carry the task as JSON.** TRL hands the rollout function only the ``prompt`` column, so
  :func:`tasks_dataset` stores each task dict there as a JSON string (``json.dumps(task, sort_keys=True)``) and the
  rollout function decodes it and passes it to ``env.reset(options={"task": ...})``. The env renders the real
  system and user prompt itself; the JSON text only shows up in TRL's completion logs. A plain string prompt keeps
  TRL from applying a chat template of its own (it treats it as a non-conversational prompt).
* **Groups.** TRL's ``RepeatSampler`` already repeats every prompt ``num_generations`` times in a row, and TRL
  expects exactly one completion per prompt it passed (rewards, advantages and the loss are all indexed by that
  list). The rollout function therefore folds each run of ``num_generations`` identical consecutive prompts into
  one task with ``group_size = num_generations`` (the collector then prefills the group's prompt once); when the
  prompts are not in such runs (e.g. a process's slice splits a group) every prompt is rolled out alone.
* **Returned fields**, one entry per trajectory, in prompt order: ``prompt_ids`` (the first ``prompt_len`` tokens:
  system + user + assistant header), ``completion_ids`` (everything after: every reply with the tool turns
  between them), ``logprobs`` (the rollout log-probability per completion token, 0.0 on env tokens),
  ``env_mask`` (the collector's loss mask of the completion part) and, forwarded to reward functions as keyword
  arguments, ``env_reward`` (the episode's reward), ``env_correct`` and ``env_format_ok`` (0/1) and
  ``env_termination`` (``answered``, ``invalid``, ``budget``, ``truncated`` or ``error``).
* **Weights.** By default the policy is an :class:`~agentrl.algos.policy.HFPolicy` over ``trainer.model`` and
  ``trainer.processing_class`` (created on the first call and kept); before every rollout it is refreshed with
  ``policy.update_weights(model)`` — a no-op for a plain model (it samples with the live weights), a merge of the
  current LoRA into a separate merged copy for a PEFT model (the trainer's weights are never touched).
* **Sampling.** Unless you pass ``collector_config``, temperature, top-p and top-k come from the trainer's
  ``GRPOConfig`` and ``max_completion_length`` becomes the per-reply token budget (``max_new_tokens``); the whole
  episode is bounded by ``CollectorConfig.max_total_tokens``. Keep the collector's temperature equal to
  ``GRPOConfig.temperature``: TRL recomputes log-probabilities at that temperature.

Limits: the default policy samples with the trainer's model in-process (one process per device, as TRL's own
transformers generation does); with ``use_vllm=True`` TRL syncs weights to its vLLM server, but this adapter
does not sample through it — pass ``policy_factory`` returning an
:class:`~agentrl.algos.policy.OpenAIPolicy` for a server. DeepSpeed ZeRO-3 (sharded parameters) is not supported
by the default policy.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.algos.rollout.trajectory import Trajectory

logger = logging.getLogger(__name__)

#: Keys of the rollout output that are forwarded to TRL reward functions (besides ``env_mask``, which TRL uses
#: as its tool mask).
ENV_FIELDS = ("env_reward", "env_correct", "env_format_ok", "env_termination")


# ============================================================================================ tasks <-> prompts


def task_to_prompt(task: dict[str, Any]) -> str:
    """The ``prompt`` text that carries ``task``: its JSON (sorted keys, so equal tasks give equal prompts)."""
    return json.dumps(task, sort_keys=True, ensure_ascii=False)


def prompt_to_task(prompt: Any) -> dict[str, Any]:
    """The task dict carried by a prompt of :func:`tasks_dataset` (a JSON string, or a message list whose last
    message's content is that string)."""
    text = prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        text = prompt[-1].get("content")
    if isinstance(text, str):
        try:
            task = json.loads(text)
        except json.JSONDecodeError:
            task = None
        if isinstance(task, dict):
            return task
    shown = repr(prompt)
    raise ValueError(f"prompt {shown[:80]}{'...' if len(shown) > 80 else ''} does not carry a task: build the "
                     "train dataset with agentrl.algos.integrations.trl.tasks_dataset(tasks), whose 'prompt' "
                     "column holds each task as JSON")


def tasks_dataset(tasks: Sequence[dict[str, Any]]):
    """A ``datasets.Dataset`` for ``GRPOTrainer(train_dataset=...)``: one row per task.

    Columns: ``prompt`` — the task as JSON (:func:`task_to_prompt`; the rollout function decodes it), and
    ``task_id`` — ``str(task.get("id", index))`` (TRL passes extra columns to reward functions as keyword
    arguments).
    """
    from datasets import Dataset

    if not tasks:
        raise ValueError("tasks_dataset needs at least one task")
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            raise TypeError(f"task {i} is a {type(t).__name__}, not a dict")
    return Dataset.from_dict({
        "prompt": [task_to_prompt(t) for t in tasks],
        "task_id": [str(t.get("id", i)) for i, t in enumerate(tasks)],
    })


# ============================================================================================ trajectories -> TRL


def trajectories_to_trl(trajectories: Sequence[Trajectory]) -> dict[str, list]:
    """The rollout-function output for ``trajectories`` (one entry each, same order); see the module docstring."""
    out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", *ENV_FIELDS)}
    for t in trajectories:
        p = t.prompt_len
        if p >= len(t.token_ids):
            raise ValueError(f"trajectory of group {t.group_id} has no completion tokens "
                             f"(prompt_len {p}, {len(t.token_ids)} tokens)")
        out["prompt_ids"].append(list(t.token_ids[:p]))
        out["completion_ids"].append(list(t.token_ids[p:]))
        out["logprobs"].append([float(x) for x in t.logprobs[p:]])
        out["env_mask"].append([int(m) for m in t.loss_mask[p:]])
        out["env_reward"].append(float(t.reward))
        out["env_correct"].append(float(t.metrics.get("correct", 0.0)))
        out["env_format_ok"].append(float(t.metrics.get("format_ok", 0.0)))
        out["env_termination"].append(t.termination)
    return out


def env_reward_func(prompts=None, completions=None, env_reward: Sequence[float] | None = None,
                    **kwargs) -> list[float]:
    """A TRL reward function returning the env's outcome reward of each completion (``reward_funcs=env_reward_func``).

    It reads the ``env_reward`` field that :func:`make_rollout_func`'s rollout adds to every example.
    """
    if env_reward is None:
        raise ValueError("env_reward_func needs the 'env_reward' field: pass "
                         "rollout_func=agentrl.algos.integrations.trl.make_rollout_func(env_id) to GRPOTrainer")
    return [float(r) for r in env_reward]


def env_correct_func(prompts=None, completions=None, env_correct: Sequence[float] | None = None,
                     **kwargs) -> list[float]:
    """A TRL reward function returning 1.0 for a correct episode, else 0.0 (the ``env_correct`` field); give it
    weight 0 in ``GRPOConfig.reward_weights`` to log the success rate without training on it."""
    if env_correct is None:
        raise ValueError("env_correct_func needs the 'env_correct' field: pass "
                         "rollout_func=agentrl.algos.integrations.trl.make_rollout_func(env_id) to GRPOTrainer")
    return [float(r) for r in env_correct]


# ============================================================================================ the rollout function


def _is_grouped(keys: Sequence[str], group_size: int) -> bool:
    """Whether ``keys`` is a sequence of runs of ``group_size`` equal keys."""
    if group_size < 1 or len(keys) % group_size:
        return False
    return all(len(set(keys[i:i + group_size])) == 1 for i in range(0, len(keys), group_size))


def _config_from_trainer(trainer) -> CollectorConfig:
    args = getattr(trainer, "args", None)
    cfg = CollectorConfig()
    if args is None:
        return cfg
    return dataclasses.replace(
        cfg,
        temperature=float(getattr(args, "temperature", cfg.temperature)),
        top_p=float(getattr(args, "top_p", cfg.top_p) or 1.0),
        top_k=int(getattr(args, "top_k", cfg.top_k) or 0),
        max_new_tokens=int(getattr(args, "max_completion_length", None) or cfg.max_new_tokens),
        seed=int(getattr(args, "seed", cfg.seed)),
    )


class _DefaultPolicy:
    """One HFPolicy per trainer model, refreshed from it before each rollout."""

    def __init__(self):
        self.policy = None
        self.model_id: int | None = None

    def __call__(self, trainer):
        from agentrl.algos.policy.hf import HFPolicy

        model = trainer.model
        accelerator = getattr(trainer, "accelerator", None)
        if accelerator is not None:
            model = accelerator.unwrap_model(model)
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        if self.policy is None or self.model_id != id(model):
            self.policy = HFPolicy(model, tokenizer)  # a PEFT model is merged into the policy's copy here
            self.model_id = id(model)
        else:
            self.policy.update_weights(model)
        return self.policy


def make_rollout_func(env: str | Callable[[], Any], *, env_kwargs: dict[str, Any] | None = None,
                      collector_config: CollectorConfig | None = None,
                      policy_factory: Callable[[Any], Any] | None = None,
                      progress: bool = False) -> Callable[[list, Any], dict[str, list]]:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` that plays ``env`` with our multi-turn collector.

    Args:
        env: an env id (``gymnasium.make(env, **env_kwargs)``) or a zero-argument env factory — anything
            :func:`~agentrl.algos.rollout.collector.collect` takes (e.g. a Ray env pool from
            :func:`agentrl.algos.rollout.env_factory.rollout_env`).
        env_kwargs: keyword arguments for ``gymnasium.make``.
        collector_config: budgets and sampling; default: :class:`CollectorConfig` with temperature, top-p, top-k,
            seed and the per-reply token budget (``max_completion_length``) taken from the trainer's args. Its
            ``seed`` is combined with the trainer's global step, process index and call count for each call.
        policy_factory: ``policy_factory(trainer) -> Policy``, called before every rollout (e.g. an
            :class:`~agentrl.algos.policy.OpenAIPolicy` for a server whose weights you sync yourself). Default:
            an :class:`~agentrl.algos.policy.HFPolicy` over ``trainer.model`` refreshed with
            ``update_weights(trainer.model)`` before every rollout.
        progress: show the collector's progress bar.

    Returns:
        ``rollout_func(prompts, trainer) -> dict`` returning one completion per prompt (see the module docstring
        for the fields).
    """
    env_kwargs = dict(env_kwargs or {})
    factory = policy_factory or _DefaultPolicy()
    calls = {"n": 0}

    def rollout_func(prompts: list, trainer) -> dict[str, list]:
        if not prompts:
            return {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", *ENV_FIELDS)}
        tasks = [prompt_to_task(p) for p in prompts]
        model = getattr(trainer, "model", None)
        training = bool(getattr(model, "training", True))
        g = getattr(trainer, "num_generations", 1) if training else \
            (getattr(trainer, "num_generations_eval", None) or getattr(trainer, "num_generations", 1))
        keys = [task_to_prompt(t) for t in tasks]
        if g and g > 1 and _is_grouped(keys, g):
            run_tasks, group_size = tasks[::g], g
        else:
            if g and g > 1:
                logger.warning("rollout_func: the %d prompts are not runs of num_generations=%d equal prompts; "
                               "rolling each out on its own", len(prompts), g)
            run_tasks, group_size = tasks, 1
        base = collector_config or _config_from_trainer(trainer)
        if collector_config is not None:
            t_trl = getattr(getattr(trainer, "args", None), "temperature", None)
            if t_trl is not None and abs(float(t_trl) - collector_config.temperature) > 1e-9:
                logger.warning("collector temperature %s differs from GRPOConfig.temperature %s, at which TRL "
                               "scores the tokens", collector_config.temperature, t_trl)
        state = getattr(trainer, "state", None)
        accelerator = getattr(trainer, "accelerator", None)
        parts = [base.seed, int(getattr(state, "global_step", 0) or 0),
                 int(getattr(accelerator, "process_index", 0) or 0), calls["n"]]
        calls["n"] += 1
        config = dataclasses.replace(base, seed=int(np.random.SeedSequence(parts).generate_state(1)[0] >> 1))
        policy = factory(trainer)
        try:
            if model is not None and training:
                model.eval()  # no dropout while sampling; the trainer's mode is restored below
            trajs = collect(env, policy, run_tasks, group_size, config, env_kwargs=env_kwargs, progress=progress)
        finally:
            if model is not None and training:
                model.train()
        if len(trajs) != len(prompts):
            raise RuntimeError(f"collector returned {len(trajs)} trajectories for {len(prompts)} prompts")
        return trajectories_to_trl(trajs)

    return rollout_func
