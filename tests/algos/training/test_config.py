"""TrainConfig stays light to import and its algorithm sections do not depend on import order."""

import copy
import subprocess
import sys
from dataclasses import dataclass

from agentrl.algos import objectives
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
            "assert cfg.grpo is not None and cfg.sft is not None, 'no algorithm sections'; "
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
    assert cfg.late_algo.k == 3
    assert cfg.algorithm_config() is cfg.late_algo
    assert TrainConfig(grpo={"beta": 0.1}).algorithm_config().beta == 0.1
