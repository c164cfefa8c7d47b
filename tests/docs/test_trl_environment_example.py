"""docs/examples/trl_environment_factory.py runs offline (--tiny): one real GRPOTrainer step, an adapter saved."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import ROOT

pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("datasets")

EXAMPLE = ROOT / "docs" / "examples" / "trl_environment_factory.py"


def test_trl_environment_factory_example_runs_one_step(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("trl_environment_factory_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tmp_path / "run"
    trainer = example.main(["--tiny", "--steps", "1", "--tasks", "4", "--prompts-per-step", "2",
                            "--num-generations", "2", "--max-completion-length", "16", "--out", str(out)])
    assert trainer.state.global_step == 1
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and "rewards/environment_reward/mean" in logs[0] and "rewards/environment_correct/mean" in logs[0]
    assert (out / "adapter_config.json").is_file()
    assert "step   1  env reward" in capsys.readouterr().out
