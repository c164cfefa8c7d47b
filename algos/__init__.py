"""agentrl.algos — collect episodes from agentrl envs and train LoRA adapters on them (needs ``[train]``).

The public API, importable from here (each name is loaded on first use, so ``import agentrl.algos`` is fast)::

    from agentrl.algos import TrainConfig, train          # agentrl train, from Python
    from agentrl.algos import HFPolicy, collect, load_model

Where things live (one folder per question; docs/architecture.md has the full map):

* ``rollout/``      where episodes come from: the token-exact collector, chat templates, trajectories
* ``policy/``       what samples tokens: the policy interface, the transformers backend, OpenAI-compatible
  servers (vLLM, SGLang) and a server of our own
* ``models/``       loading models (the embedded SmolLM2 GGUF, hub ids) and LoRA adapters
* ``objectives/``   what the loss is: one file per algorithm (GRPO, PPO, DPO, SFT) and their registry
* ``training/``     what runs the loop: config, task order, the update, checkpoints, sync and async trainers
* ``evaluation/``   how good it is: evaluate, reports, metrics, plots
* ``integrations/`` plugging into others: TRL's GRPOTrainer, Ray
* ``recipes/``      the main job (base eval -> SFT cold start -> GRPO -> eval)
* ``config.py``, ``cli.py``  configs from dicts/files/overrides; the ``agentrl`` command
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from agentrl.algos import _moved

_moved.install()

#: public name -> the module that defines it
_API: dict[str, str] = {
    **dict.fromkeys(["Collector", "CollectorConfig", "collect"], "agentrl.algos.rollout.collector"),
    **dict.fromkeys(["Trajectory", "Turn", "group_indices", "load_trajectories", "save_trajectories"],
                    "agentrl.algos.rollout.trajectory"),
    **dict.fromkeys(["ChatFormat"], "agentrl.algos.rollout.chat"),
    **dict.fromkeys(["GenerationRequest", "GenerationResult", "HFPolicy", "OpenAIPolicy", "Policy",
                     "SamplingParams", "serve_policy"], "agentrl.algos.policy"),
    **dict.fromkeys(["DEFAULT_MODEL", "load_model", "load_tokenizer", "tiny_model"], "agentrl.algos.models"),
    **dict.fromkeys(["LoRAConfig", "apply_lora", "load_adapter", "save_adapter"], "agentrl.algos.models.lora"),
    **dict.fromkeys(["ALGORITHMS", "Algorithm", "algorithm_class", "register_algorithm"],
                    "agentrl.algos.objectives"),
    **dict.fromkeys(["GRPO", "GRPOConfig"], "agentrl.algos.objectives.grpo"),
    **dict.fromkeys(["PPO", "PPOConfig"], "agentrl.algos.objectives.ppo"),
    **dict.fromkeys(["DPO", "DPOConfig"], "agentrl.algos.objectives.dpo"),
    **dict.fromkeys(["SFT", "SFTConfig"], "agentrl.algos.objectives.sft"),
    **dict.fromkeys(["AsyncConfig", "TrainConfig"], "agentrl.algos.training.config"),
    **dict.fromkeys(["Trainer", "train"], "agentrl.algos.training.trainer"),
    **dict.fromkeys(["AsyncTrainer"], "agentrl.algos.training.async_trainer"),
    **dict.fromkeys(["heldout_tasks", "TaskSource"], "agentrl.algos.training.tasks"),
    **dict.fromkeys(["latest_checkpoint"], "agentrl.algos.training.checkpoint"),
    **dict.fromkeys(["evaluate"], "agentrl.algos.evaluation.evaluate"),
    **dict.fromkeys(["EvalReport", "load_report", "results_table"], "agentrl.algos.evaluation.report"),
    **dict.fromkeys(["MetricsLogger", "read_metrics"], "agentrl.algos.evaluation.run_log"),
    **dict.fromkeys(["plot_eval", "plot_run"], "agentrl.algos.evaluation.plot"),
    **dict.fromkeys(["PipelineConfig", "run_pipeline"], "agentrl.algos.recipes.main_job"),
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrl.algos' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # Importing an old module path such as agentrl.algos.evaluation.evaluate binds the module on this package;
        # it must not hide the public function of the same name.
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
