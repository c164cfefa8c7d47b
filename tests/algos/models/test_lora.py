"""LoRA via PEFT: only the adapter trains, the reference is the adapter disabled, adapters load with plain PEFT."""

from __future__ import annotations

import json

import torch
from helpers import tiny_llama

from agentrl.algos.models.lora import (
    LoRAConfig,
    apply_lora,
    load_adapter,
    load_trainable_state_dict,
    save_adapter,
    trainable_state_dict,
)
from agentrl.algos.objectives.logprobs import token_logprobs


def test_default_targets_all_linear_layers_but_the_head():
    model = apply_lora(tiny_llama(), LoRAConfig(r=4, alpha=8))
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if "lora_A" in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert all(("lora_" in n) == p.requires_grad for n, p in model.named_parameters())
    only_q = apply_lora(tiny_llama(), LoRAConfig(r=2, target_modules=["q_proj"]))
    assert {n.split(".lora_A")[0].rsplit(".", 1)[-1]
            for n, _ in only_q.named_parameters() if "lora_A" in n} == {"q_proj"}


def test_training_changes_lora_params_only_and_reference_stays_base():
    base = tiny_llama()
    ids = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        base_lp = token_logprobs(base, ids)
    model = apply_lora(base, LoRAConfig(r=4, alpha=8))
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora = trainable_state_dict(model)
    with torch.no_grad():
        torch.testing.assert_close(token_logprobs(model, ids), base_lp)  # B = 0 at init: same function
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        (-token_logprobs(model, ids).sum()).backward()
        opt.step()
    assert all(not torch.equal(p, lora[n]) for n, p in model.named_parameters() if p.requires_grad)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if not p.requires_grad)
    with torch.no_grad():
        assert not torch.allclose(token_logprobs(model, ids), base_lp)
        with model.disable_adapter():
            torch.testing.assert_close(token_logprobs(model, ids), base_lp)


def test_adapter_saves_in_peft_format_and_loads_with_plain_peft(tmp_path):
    from peft import PeftModel

    model = apply_lora(tiny_llama(), LoRAConfig(r=4, alpha=8))
    with torch.no_grad():
        for _n, p in model.named_parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    ids = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        want = token_logprobs(model, ids)
    path = save_adapter(model, tmp_path / "adapter")
    assert (path / "adapter_config.json").is_file() and (path / "adapter_model.safetensors").is_file()
    save_adapter(model, tmp_path / "adapter")  # overwriting is atomic too
    assert not (tmp_path / "adapter.tmp").exists() and not (tmp_path / "adapter.old").exists()
    loaded = PeftModel.from_pretrained(tiny_llama(), str(path))  # plain transformers + peft
    with torch.no_grad():
        torch.testing.assert_close(token_logprobs(loaded, ids), want)
    again = load_adapter(tiny_llama(), path, trainable=True)
    assert any(p.requires_grad for p in again.parameters())
    state = trainable_state_dict(model)
    fresh = apply_lora(tiny_llama(), LoRAConfig(r=4, alpha=8))
    load_trainable_state_dict(fresh, state)
    with torch.no_grad():
        torch.testing.assert_close(token_logprobs(fresh, ids), want)


SAVE_IN_A_NEW_PROCESS = """
import sys
import torch
from helpers import tiny_llama
from agentrl.algos.models.lora import LoRAConfig, apply_lora, save_adapter
model = apply_lora(tiny_llama(), LoRAConfig(r=4, alpha=8))
with torch.no_grad():
    for p in (p for p in model.parameters() if p.requires_grad):
        p.fill_(0.01)
save_adapter(model, sys.argv[1])
"""


def test_the_same_adapter_saves_to_the_same_bytes_in_every_process(tmp_path):
    """PEFT keeps ``target_modules`` as a set and writes it in set order, which follows the process's string
    hashing: two processes with other hash seeds must still write byte-identical adapters (a retrained adapter is
    checked against a recorded hash)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from agentrl.algos.evaluation.ledger import adapter_sha256

    tests = Path(__file__).resolve().parents[2]
    hashes, orders = set(), set()
    for seed in ("1", "2", "3", "4"):
        out = tmp_path / f"adapter-{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(tests)}
        subprocess.run([sys.executable, "-c", SAVE_IN_A_NEW_PROCESS, str(out)], env=env, check=True, timeout=300)
        hashes.add(adapter_sha256(out))
        orders.add(tuple(json.loads((out / "adapter_config.json").read_text())["target_modules"]))
    assert len(hashes) == 1 and len(orders) == 1
    (order,) = orders
    assert list(order) == sorted(order) and len(order) == 2 * 7  # two layers' seven projections
