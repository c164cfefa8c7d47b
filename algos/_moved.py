"""Old module paths that keep importing after the files moved into folders.

``import agentrl.algos.collector`` gives the very module object ``agentrl.algos.rollout.collector`` (not a
copy), so documented imports, pickles and ``monkeypatch.setattr("agentrl.algos.trainer.X", ...)`` keep
working. The finder sits last on ``sys.meta_path``: it answers only for names no file on disk provides.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: old dotted path -> where the module lives now
MOVED: dict[str, str] = {
    "agentrl.algos.chat": "agentrl.algos.rollout.chat",
    "agentrl.algos.collector": "agentrl.algos.rollout.collector",
    "agentrl.algos.trajectory": "agentrl.algos.rollout.trajectory",
    "agentrl.algos.lora": "agentrl.algos.models.lora",
    "agentrl.algos.grpo": "agentrl.algos.objectives.grpo",
    "agentrl.algos.ppo": "agentrl.algos.objectives.ppo",
    "agentrl.algos.dpo": "agentrl.algos.objectives.dpo",
    "agentrl.algos.sft": "agentrl.algos.objectives.sft",
    "agentrl.algos.batching": "agentrl.algos.objectives.batching",
    "agentrl.algos.logprobs": "agentrl.algos.objectives.logprobs",
    "agentrl.algos.trainer": "agentrl.algos.training.trainer",
    "agentrl.algos.async_trainer": "agentrl.algos.training.async_trainer",
    "agentrl.algos.evaluate": "agentrl.algos.evaluation.evaluate",
    "agentrl.algos.metrics": "agentrl.algos.evaluation.metrics",
    "agentrl.algos.plot": "agentrl.algos.evaluation.plot",
    "agentrl.algos.pipeline": "agentrl.algos.recipes.main_job",
    "agentrl.algos.trl_adapter": "agentrl.algos.integrations.trl",
    "agentrl.algos.ray_workers": "agentrl.algos.integrations.ray",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:  # already executed under its new name
        pass


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(new)) if new else None


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
