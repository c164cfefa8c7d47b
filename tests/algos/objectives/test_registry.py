"""The algorithm registry (agentrl.algos.objectives.ALGORITHMS): built-ins, run-time registration, entry points."""

from __future__ import annotations

import copy

import pytest
from helpers import run_with_plugin

from agentrl.algos import objectives
from agentrl.algos.objectives import algorithm_class, algorithm_names, register_algorithm
from agentrl.algos.objectives.base import Algorithm

PLUGIN = '''
from dataclasses import dataclass

from agentrl.algos.objectives.base import Algorithm


@dataclass
class ReinforceConfig:
    scale: float = 1.0


class Reinforce(Algorithm):
    config_class = ReinforceConfig

    def prepare(self, trajectories):
        return [], {}

    def loss(self, logprobs, ref_logprobs, batch):
        return logprobs.sum(), {}
'''


def test_builtins_come_first_and_subclass_the_contract():
    assert algorithm_names()[:4] == ["grpo", "ppo", "dpo", "sft"]
    assert all(issubclass(algorithm_class(n), Algorithm) for n in ["grpo", "ppo", "dpo", "sft"])
    assert objectives.ALGORITHMS.group == "agentrl.algorithms"


def test_register_algorithm_at_run_time_and_unknown_names(monkeypatch):
    monkeypatch.setattr(objectives, "ALGORITHMS", copy.deepcopy(objectives.ALGORITHMS))
    register_algorithm("mine", "agentrl.algos.objectives.sft:SFT")
    assert algorithm_names()[-1] == "mine" and algorithm_class("mine") is algorithm_class("sft")
    with pytest.raises(ValueError, match=r"algo must be one of \('grpo', 'ppo', 'dpo', 'sft'.*'mine'\)"):
        algorithm_class("nope")
    with pytest.raises(ValueError, match="identifier"):
        register_algorithm("not a name", "agentrl.algos.objectives.sft:SFT")


def test_a_third_party_entry_point_is_picked_up(tmp_path, monkeypatch):
    """What ``pip install`` of a package declaring ``[project.entry-points."agentrl.algorithms"]`` leaves: a fresh
    process lists the algorithm and loads its class."""
    code = ("from agentrl.algos.objectives import algorithm_class, algorithm_names\n"
            "from agentrl.algos.objectives.base import Algorithm\n"
            "print(algorithm_names()); print(issubclass(algorithm_class('reinforce'), Algorithm))")
    out = run_with_plugin(tmp_path, "agentrl.algorithms", "reinforce = reinforce_plugin:Reinforce",
                          "reinforce_plugin", PLUGIN, code)
    assert out.split("\n")[:2] == ["['grpo', 'ppo', 'dpo', 'sft', 'reinforce']", "True"], out
