"""docs/examples/trl_grpo.py and trl_environment_factory.py (docs/trl.md's two paths) run offline (--tiny) on
ToolUse-v0 and Search-v0: one real GRPOTrainer step each, the env's reward logged, an adapter saved; with
``--adapter`` each trains that adapter on (no fresh LoRA on top)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from helpers import ROOT, perturb_lora

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


@pytest.mark.parametrize("path_name", list(EXAMPLES))
def test_each_trl_path_trains_a_given_adapter_on(path_name, tmp_path, capsys, tokenizer):
    """``--adapter``: the trainer's LoRA is the adapter's (its rank 4, not the example's fresh r=16; its weights,
    moved by at most one small optimizer step), trainable, and what ``--out`` saves."""
    import torch
    from safetensors.torch import load_file

    from agentrl.algos.models import tiny_model
    from agentrl.algos.models.lora import LoRAConfig, apply_lora, save_adapter

    # the example's --tiny model (same hidden sizes; its vocabulary may grow, which the LoRA does not touch),
    # with a rank-4 adapter whose B matrices are noise (a fresh LoRA's are zero)
    adapter = save_adapter(perturb_lora(apply_lora(tiny_model(tokenizer), LoRAConfig(r=4, alpha=8)), seed=1),
                           tmp_path / "adapter")
    saved = load_file(str(adapter / "adapter_model.safetensors"))
    path, _ = EXAMPLES[path_name]
    out = tmp_path / "run"
    trainer = load(path).main(["--tiny", "--adapter", str(adapter), "--steps", "1", "--tasks", "4",
                               "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "16",
                               "--out", str(out)])
    assert trainer.state.global_step == 1
    assert f"started from adapter {adapter}" in capsys.readouterr().out

    # PEFT saves "...q_proj.lora_A.weight" for the parameter "...q_proj.lora_A.default.weight"
    lora = {n.replace(".default.", "."): p for n, p in trainer.model.named_parameters() if "lora_" in n}
    assert sorted(lora) == sorted(saved), "the trainer's LoRA is not the adapter's (a fresh LoRA on top?)"
    assert all(p.requires_grad for p in lora.values()), "the adapter was loaded frozen"
    for name, want in saved.items():
        got = lora[name].detach().float().cpu()
        assert got.shape == want.shape, f"{name}: {tuple(got.shape)}, the adapter's is {tuple(want.shape)}"
        # one Adam step at lr 2e-4 moves each weight by about 2e-4; the adapter's B noise has std 0.3
        torch.testing.assert_close(got, want.float(), atol=1e-3, rtol=0, msg=f"{name} did not start from the adapter")
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
