"""The training loop's algorithm-level rules: the reference policy is the stage's starting policy, dropout is off
in RL forward passes, DPO's logprobs are at temperature 1, GRPO with beta > 0 trains on equal-reward groups,
and a checkpoint resumes on a device other than the CPU."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
from helpers import ScoreEnv, tiny_train_config, tiny_train_model

from agentrl.algos.models.lora import LoRAConfig, apply_lora
from agentrl.algos.objectives.logprobs import token_logprobs
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.algos.training import checkpoint
from agentrl.algos.training import update as update_module
from agentrl.algos.training.reference import REFERENCE_ADAPTER, Reference
from agentrl.algos.training.trainer import Trainer


def _started_adapter(tokenizer, seed=0):
    """A tiny model wrapped in a LoRA adapter that is not zero (as after an SFT cold start or --adapter)."""
    model = apply_lora(tiny_train_model(tokenizer), LoRAConfig(r=4, alpha=8))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return model


def _ids(tokenizer):
    return torch.tensor([tokenizer("<|im_start|>user\nSay something (12).<|im_end|>\n<|im_start|>assistant\n"
                                   "eeee hello there")["input_ids"]])


def _lp(model, ids):
    with torch.no_grad():
        return token_logprobs(model, ids)


def test_reference_is_the_starting_adapter_and_does_not_move(tokenizer, tmp_path):
    model = _started_adapter(tokenizer)
    ids = _ids(tokenizer)
    start = _lp(model, ids)
    with torch.no_grad(), model.disable_adapter():
        base = token_logprobs(model, ids)
    assert not torch.allclose(start, base, atol=1e-3)  # the starting adapter is not the base model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    trainer = Trainer(tiny_train_config(tmp_path, algorithm={"beta": 0.1}, steps=2), model=model, tokenizer=tokenizer)
    ref = trainer.reference
    assert ref.kind == "frozen_adapter"
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable  # the copy never trains
    torch.testing.assert_close(ref.logprobs(ids), start, rtol=0, atol=1e-6)
    hist = trainer.train()
    assert sum(h["train/optimizer_steps"] for h in hist) == 2
    assert hist[0]["train/kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference at the start
    # the policy merges the trained adapter only: merging the copy too would shift logprobs by about
    # |start - base| (~0.04 nats a token here); merged-vs-LoRA rounding after an update is ~1e-4
    assert hist[1]["train/logprob_gap"] < 0.05 * float((start - base).abs()[:, 1:].mean())
    assert not torch.allclose(_lp(model, ids), start, atol=1e-4)  # the policy moved ...
    torch.testing.assert_close(ref.logprobs(ids), start, rtol=0, atol=1e-6)  # ... its reference did not
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable
    assert model.active_adapter == "default"
    latest = checkpoint.latest_checkpoint(tmp_path / "run")
    saved = torch.load(latest / "state.pt", weights_only=False)
    assert not any(REFERENCE_ADAPTER in k for k in saved["trainable"])
    assert not (latest / "adapter" / REFERENCE_ADAPTER).exists()
    assert not (tmp_path / "run" / "adapter" / REFERENCE_ADAPTER).exists()  # nor in the final adapter
    # a next stage on the same model gets the policy it starts from as its reference
    now = _lp(model, ids)
    torch.testing.assert_close(Reference(model).logprobs(ids), now, rtol=0, atol=1e-6)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable


def test_dpo_from_a_trained_adapter_starts_at_log2(tokenizer, tmp_path):
    """h = beta * (log-ratio margin against the reference) is 0 when the reference is the starting policy;
    a reference at the base model would give h != 0 from the first step."""
    trainer = Trainer(tiny_train_config(tmp_path, algo="dpo"), model=_started_adapter(tokenizer),
                      tokenizer=tokenizer)
    [m] = trainer.train()
    assert m["train/pairs"] >= 1
    assert m["train/loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert m["train/dpo_margin"] == pytest.approx(0.0, abs=1e-4)


def test_a_fresh_adapter_uses_the_base_model_as_reference(tokenizer):
    model = apply_lora(tiny_train_model(tokenizer))
    ref = Reference(model)
    assert ref.kind == "base" and REFERENCE_ADAPTER not in model.peft_config  # no copy: B = 0 is the base
    ids = _ids(tokenizer)
    torch.testing.assert_close(ref.logprobs(ids), _lp(model, ids), rtol=0, atol=0)


def test_lora_dropout_is_off_in_the_rl_forward_passes(tokenizer, tmp_path):
    """With lora.dropout=0.5 a train-mode recompute would differ from the rollout logprobs at epoch 1."""
    model = tiny_train_model(tokenizer)
    cfg = tiny_train_config(tmp_path, lora=LoRAConfig(dropout=0.5), algorithm={"beta": 0.1})
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    with torch.no_grad():  # a non-zero adapter, so dropout on its input would change the outputs
        for n, p in trainer.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    trainer.policy.update_weights(trainer.model)
    [m] = trainer.train()
    assert m["train/optimizer_steps"] == 1
    assert m["train/logprob_gap"] < 1e-4
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert not trainer.model.training


def test_dpo_logprobs_are_at_temperature_one_and_grpo_at_the_rollout_temperature(tokenizer, tmp_path, monkeypatch):
    seen = []
    real = update_module.token_logprobs

    def recording(*args, **kwargs):
        seen.append(kwargs["temperature"])
        return real(*args, **kwargs)

    monkeypatch.setattr(update_module, "token_logprobs", recording)
    monkeypatch.setattr("agentrl.algos.training.reference.token_logprobs", recording)
    cool = CollectorConfig(max_new_tokens=8, max_turns=1, temperature=0.8)
    for algo, want in (("dpo", 1.0), ("grpo", 0.8)):
        seen.clear()
        trainer = Trainer(tiny_train_config(tmp_path / algo, algo=algo, collector=cool,
                                            algorithm={"beta": 0.1} if algo == "grpo" else None),
                          model=tiny_train_model(tokenizer, stop_scale=4.0), tokenizer=tokenizer)
        [m] = trainer.train()
        assert m["train/optimizer_steps"] == 1
        assert seen and set(seen) == {want}, algo  # policy and reference passes alike
        assert ("train/logprob_gap" in m) == (algo == "grpo")  # DPO's T=1 logprobs are not the rollout's


def test_grpo_with_kl_trains_on_equal_reward_groups(tokenizer, tmp_path):
    """Every reward equal: with beta > 0 the tokens stay in the batch for their KL term (one optimizer step),
    with beta = 0 there is nothing to train on."""
    env_id = "Test/ScoreConst-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=ScoreEnv, kwargs={"constant": 0.5})
    for beta, steps in ((0.1, 1), (0.0, 0)):
        trainer = Trainer(tiny_train_config(tmp_path / str(beta), env=env_id, algorithm={"beta": beta}),
                          model=tiny_train_model(tokenizer, stop_scale=8.0), tokenizer=tokenizer)
        [m] = trainer.train()
        assert m["train/optimizer_steps"] == steps
        assert (m["train/loss_tokens"] > 0) == (beta > 0)
        assert m["train/skipped_groups"] == (0 if beta > 0 else 2)


def test_resume_loads_the_state_on_the_cpu_whatever_the_model_device(tokenizer, tmp_path):
    """A model on another device (here ``meta``, which needs no accelerator) resumes: the RNG state must stay a
    CPU ByteTensor (``torch.set_rng_state`` rejects any other device), the optimizer state follows the params.
    (On a CPU-only machine this is the closest stand-in for CUDA: a map_location of the model's device moves
    the RNG state off the CPU in both cases.)"""
    model = apply_lora(tiny_train_model(tokenizer))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    sum(p.sum() for p in params).backward()
    opt.step()
    rng = torch.get_rng_state()
    path = checkpoint.save_checkpoint(tmp_path, model=model, optimizer=opt, step=1, data_position=3, config={})
    torch.rand(10)  # move the RNG on
    moved = model.to("meta")
    opt2 = torch.optim.AdamW([p for p in moved.parameters() if p.requires_grad], lr=1e-3)
    state = checkpoint.load_checkpoint(path, model=moved, optimizer=opt2)
    assert (state.step, state.data_position) == (1, 3)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(s["exp_avg"].device.type == "meta" for s in opt2.state.values())
