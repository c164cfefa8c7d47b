"""docs/examples/trl_grpo.py and trl_environment_factory.py (docs/trl.md's two paths) run offline (--tiny) on
ToolUse-v0 and Search-v0: one real GRPOTrainer step each, the env's reward logged, an adapter saved."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import ROOT

pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("datasets")

EXAMPLES = {
    "rollout_func": (ROOT / "docs" / "examples" / "trl_grpo.py", "env_reward_func"),
    "environment_factory": (ROOT / "docs" / "examples" / "trl_environment_factory.py", "env_reward_func"),
}


def load(path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@pytest.mark.parametrize("env", ["AgentRL/ToolUse-v0", "AgentRL/Search-v0"])
@pytest.mark.parametrize("path_name", list(EXAMPLES))
def test_each_trl_path_trains_one_step_on_each_env(path_name, env, tmp_path, capsys):
    path, reward = EXAMPLES[path_name]
    out = tmp_path / "run"
    trainer = load(path).main(["--tiny", "--env", env, "--steps", "1", "--tasks", "4", "--prompts-per-step", "2",
                               "--num-generations", "2", "--max-completion-length", "16", "--out", str(out)])
    assert trainer.state.global_step == 1
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and f"rewards/{reward}/mean" in logs[0]
    assert (out / "adapter_config.json").is_file()
    assert "step   1  env reward" in capsys.readouterr().out
