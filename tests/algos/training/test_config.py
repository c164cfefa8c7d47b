"""TrainConfig stays light to import and its algorithm sections do not depend on import order."""

import copy
import subprocess
import sys
from dataclasses import dataclass

import pytest

from agentrl.algos import objectives
from agentrl.algos.config import config_from_dict
from agentrl.algos.objectives import register_algorithm
from agentrl.algos.objectives.sft import SFT
from agentrl.algos.training.config import TrainConfig


def test_importing_train_config_loads_no_torch():
    code = ("import sys; from agentrl.algos.training.config import TrainConfig; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_building_a_train_config_loads_no_torch():
    """Every algorithm section is built from its config class (the algorithm's module is imported), and still
    no torch: the built-in algorithm files import it lazily (objectives.base.LazyModule)."""
    code = ("import sys; from agentrl.algos.training.config import TrainConfig; "
            "cfg = TrainConfig(); TrainConfig.from_dict({'algo': 'ppo', 'grpo': {'beta': 0.1}}).validate(); "
            "assert type(cfg.algorithm).__name__ == 'GRPOConfig', 'no algorithm section'; "
            "assert 'torch' not in sys.modules, 'torch was imported'; "
            "assert 'agentrl.algos.objectives.grpo' in sys.modules, 'the sections imported no algorithm'")
    subprocess.run([sys.executable, "-c", code], check=True)


@dataclass
class _LateConfig:
    k: int = 3


class _Late(SFT):
    config_class = _LateConfig


def test_an_algorithm_registered_after_import_has_its_section(monkeypatch):
    monkeypatch.setattr(objectives, "ALGORITHMS", copy.deepcopy(objectives.ALGORITHMS))
    register_algorithm("late_algo", _Late)
    cfg = TrainConfig(algo="late_algo")
    cfg.validate()
    assert cfg.algorithm == _LateConfig(k=3)
    assert TrainConfig.from_dict({"algo": "late_algo", "late_algo": {"k": 4}}).algorithm.k == 4
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["late_algo"] == {"k": 3}
    assert TrainConfig(algorithm={"beta": 0.1}).algorithm.beta == 0.1


def test_a_section_of_another_algorithm_is_checked_and_not_kept():
    cfg = TrainConfig.from_dict({"algo": "ppo", "grpo": {"beta": 0.1}, "ppo": {"epochs": 2}})
    assert type(cfg.algorithm).__name__ == "PPOConfig" and cfg.algorithm.epochs == 2 and "grpo" not in cfg.to_dict()
    with pytest.raises(ValueError, match="unknown config key 'grpo.betta'; did you mean 'grpo.beta'"):
        TrainConfig.from_dict({"algo": "ppo", "grpo": {"betta": 0.1}})
    # switching algo over a base config starts the new algorithm's section from its defaults
    tuned = TrainConfig(algorithm={"beta": 0.1})
    dpo = config_from_dict(TrainConfig, {"algo": "dpo"}, base=tuned)
    assert dpo.algorithm == TrainConfig(algo="dpo").algorithm
    assert config_from_dict(TrainConfig, {"steps": 3}, base=tuned).algorithm.beta == 0.1  # the same algo: kept


def test_an_older_runs_config_json_with_every_algorithms_section_resumes():
    """Before issue 58 config.json held a section per registered algorithm; only algo's is read back."""
    old = {**TrainConfig().to_dict(), **{a: TrainConfig(algo=a).to_dict()[a] for a in ("grpo", "ppo", "dpo", "sft")}}
    old["algo"], old["dpo"]["beta"] = "dpo", 0.3
    resumed = TrainConfig.from_dict(old)
    assert resumed.algo == "dpo" and resumed.algorithm.beta == 0.3 and set(resumed.to_dict()) & {"grpo", "sft"} == set()
