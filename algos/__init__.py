"""agentrl.algos — collect episodes from agentrl envs and train LoRA adapters on them (needs ``[train]``).

The public API (each name is loaded on first use, so ``import agentrl.algos`` stays fast; type checkers and IDEs
read the ``TYPE_CHECKING`` block below)::

    from agentrl.algos import TrainConfig, train                 # what `agentrl train` runs, from Python
    from agentrl.algos import HFPolicy, collect, load_model      # collect episodes with a model

Training
    :class:`TrainConfig` (every setting of a run), :class:`Trainer` / :func:`train` (the synchronous loop),
    :class:`AsyncTrainer` (rollouts overlapped with training), :class:`MainJobConfig` / :func:`run_main_job`
    (base eval -> SFT cold start -> GRPO -> eval: what ``agentrl main-job`` runs).
Algorithms
    :class:`Algorithm` (the contract: turn trajectories into training rows, compute a loss) and
    :func:`register_algorithm` (make a new one a valid ``--algo``). Built in: ``grpo``, ``ppo``, ``dpo``, ``sft``.
Episodes
    :func:`collect` / :class:`Collector` / :class:`CollectorConfig` (token-exact, batched multi-turn rollouts),
    :class:`Trajectory` and :class:`Turn` (what a rollout records).
Policies (what samples tokens)
    :class:`Policy` (the interface), :class:`HFPolicy` (transformers, CPU or GPU), :class:`OpenAIPolicy` (a vLLM or
    SGLang server), :func:`serve_policy` (serve any policy that way), :class:`SamplingParams`,
    :class:`GenerationRequest`, :class:`GenerationResult`.
Models
    :func:`load_model`, :func:`load_tokenizer` (the embedded SmolLM2-135M by default, any hub id or folder) and
    :class:`LoRAConfig`.
Evaluation
    :func:`evaluate` and the :class:`EvalReport` it returns.

Every other name is imported from the module that defines it (docs/architecture.md maps the folders).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.report import EvalReport
    from agentrl.algos.models import load_model, load_tokenizer
    from agentrl.algos.models.lora import LoRAConfig
    from agentrl.algos.objectives import register_algorithm
    from agentrl.algos.objectives.base import Algorithm
    from agentrl.algos.policy.base import GenerationRequest, GenerationResult, Policy, SamplingParams
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.policy.openai import OpenAIPolicy
    from agentrl.algos.policy.server import serve_policy
    from agentrl.algos.recipes.main_job import MainJobConfig, run_main_job
    from agentrl.algos.rollout.collector import Collector, CollectorConfig, collect
    from agentrl.algos.rollout.trajectory import Trajectory, Turn
    from agentrl.algos.training.async_trainer import AsyncTrainer
    from agentrl.algos.training.config import TrainConfig
    from agentrl.algos.training.launch import train
    from agentrl.algos.training.trainer import Trainer

#: public name -> the module that defines it (the same pairs as the TYPE_CHECKING block; a test checks)
_API: dict[str, str] = {
    "evaluate": "agentrl.algos.evaluation.evaluate",
    "EvalReport": "agentrl.algos.evaluation.report",
    "load_model": "agentrl.algos.models",
    "load_tokenizer": "agentrl.algos.models",
    "LoRAConfig": "agentrl.algos.models.lora",
    "register_algorithm": "agentrl.algos.objectives",
    "Algorithm": "agentrl.algos.objectives.base",
    "GenerationRequest": "agentrl.algos.policy.base",
    "GenerationResult": "agentrl.algos.policy.base",
    "Policy": "agentrl.algos.policy.base",
    "SamplingParams": "agentrl.algos.policy.base",
    "HFPolicy": "agentrl.algos.policy.hf",
    "OpenAIPolicy": "agentrl.algos.policy.openai",
    "serve_policy": "agentrl.algos.policy.server",
    "MainJobConfig": "agentrl.algos.recipes.main_job",
    "run_main_job": "agentrl.algos.recipes.main_job",
    "Collector": "agentrl.algos.rollout.collector",
    "CollectorConfig": "agentrl.algos.rollout.collector",
    "collect": "agentrl.algos.rollout.collector",
    "Trajectory": "agentrl.algos.rollout.trajectory",
    "Turn": "agentrl.algos.rollout.trajectory",
    "AsyncTrainer": "agentrl.algos.training.async_trainer",
    "TrainConfig": "agentrl.algos.training.config",
    "Trainer": "agentrl.algos.training.trainer",
    "train": "agentrl.algos.training.launch",
}

__all__ = [
    "Algorithm", "AsyncTrainer", "Collector", "CollectorConfig", "EvalReport", "GenerationRequest",
    "GenerationResult", "HFPolicy", "LoRAConfig", "MainJobConfig", "OpenAIPolicy", "Policy",
    "SamplingParams", "TrainConfig", "Trainer", "Trajectory", "Turn", "collect", "evaluate", "load_model",
    "load_tokenizer", "register_algorithm", "run_main_job", "serve_policy", "train",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrl.algos' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
