"""The compiled update passes (TrainConfig ``compile``, agentrl.algos.training.compiled) against eager: per-token
logprobs and gradients, recompiles across micro-batch shapes, the fall-back when compiling fails, and GRPO steps.

Compiling on 2 CPU cores takes ~10-20 s per new graph set: the compiled functions are process-wide, so the tests
share them (run this file alone: ``python -m pytest -q tests/algos/training/test_compiled.py``).
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from helpers import tiny_train_config, tiny_train_model
from torch._dynamo.utils import counters

from agentrl.algos.config import config_to_dict
from agentrl.algos.models import tiny_model
from agentrl.algos.models.lora import apply_lora
from agentrl.algos.objectives.logprobs import MIN_SHARED_PREFIX, token_logprobs
from agentrl.algos.training import compiled
from agentrl.algos.training.config import TrainConfig
from agentrl.algos.training.fused_lora import fused_lora
from agentrl.algos.training.memory_plan import set_gradient_checkpointing
from agentrl.algos.training.trainer import Trainer


def _lora_model(tokenizer, dtype=torch.float32):
    model = apply_lora(tiny_model(tokenizer, hidden_size=32, dtype=dtype))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # B starts at zero: give the adapter a product, so its gradients are all non-zero
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def _batch(bsz, seq_len, prefix=0, seed=0):
    gen = torch.Generator().manual_seed(seed * 1000 + bsz * 100 + seq_len)
    ids = torch.randint(5, 2000, (bsz, seq_len), generator=gen)
    ids[:, :prefix] = ids[0, :prefix]
    mask = torch.ones_like(ids)
    mask[-1, seq_len - 3:] = 0  # the last row is shorter: right padding
    return ids, mask


def _pass(model, ids, mask, mode):
    """Per-token logprobs, a loss, and the adapter's gradients of one forward and backward pass."""
    model.zero_grad(set_to_none=True)
    model.train()
    with fused_lora(model), compiled.compiled_passes(model, mode):
        lp = token_logprobs(model, ids, mask)
        weights = torch.linspace(-1, 1, ids.numel()).view_as(ids)
        loss = -(lp * weights * mask).sum() / mask.sum()
        loss.backward()
    model.eval()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}
    return lp.detach().float(), float(loss.detach()), grads


def _max_rel(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max()) for k in b)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_fp32_compiled_logprobs_loss_and_grads_are_eagers(tokenizer, checkpointing):
    model = _lora_model(tokenizer)
    set_gradient_checkpointing(model, checkpointing)
    # a shared prefix (the decoder runs it once, its KV cache with eager attention) and a plain batch
    for ids, mask in (_batch(3, MIN_SHARED_PREFIX + 12, prefix=MIN_SHARED_PREFIX + 4), _batch(2, 19)):
        lp_e, loss_e, g_e = _pass(model, ids, mask, "off")
        lp_c, loss_c, g_c = _pass(model, ids, mask, "on")
        assert compiled.failure() is None
        assert float((lp_c - lp_e).abs().max()) < 1e-4
        assert loss_c == pytest.approx(loss_e, rel=1e-5, abs=1e-6)
        assert _max_rel(g_c, g_e) < 1e-4
        assert all(float(g.abs().max()) > 0 for g in g_e.values())


@pytest.mark.skipif(not torch.ones(1, dtype=torch.bfloat16).add(1).eq(2).all(), reason="no bf16 on this CPU")
def test_bf16_compiled_is_as_close_to_fp32_as_eager_bf16_is(tokenizer):
    model = _lora_model(tokenizer, torch.bfloat16)
    reference = copy.deepcopy(model).float()  # the same weights in fp32
    ids, mask = _batch(3, 40)
    lp_r, loss_r, g_r = _pass(reference, ids, mask, "off")
    lp_e, loss_e, g_e = _pass(model, ids, mask, "off")
    lp_c, loss_c, g_c = _pass(model, ids, mask, "on")
    assert compiled.failure() is None
    err_e, err_c = float((lp_e - lp_r).abs().max()), float((lp_c - lp_r).abs().max())
    assert err_c <= 2 * err_e + 1e-3, (err_c, err_e)  # stated tolerance: within twice eager bf16's own rounding
    assert float((lp_c - lp_e).abs().max()) < 5e-2
    assert abs(loss_c - loss_r) <= 2 * abs(loss_e - loss_r) + 1e-3
    assert _max_rel(g_c, g_r) <= 2 * _max_rel(g_e, g_r) + 1e-3


def test_micro_batches_of_other_shapes_reuse_the_graphs(tokenizer):
    model = _lora_model(tokenizer)
    for bsz, seq_len in ((2, 9), (1, 9)):  # warm-up: a size of 1 is specialised, so one row is its own graph
        _pass(model, *_batch(bsz, seq_len), "on")
    graphs, frames = counters["stats"]["unique_graphs"], counters["stats"]["calls_captured"]
    for bsz, seq_len in ((2, 17), (3, 33), (5, 12), (1, 50), (4, 71), (3, 9)):
        _pass(model, *_batch(bsz, seq_len), "on")
    assert compiled.failure() is None
    assert counters["stats"]["unique_graphs"] == graphs, "a new micro-batch shape compiled a new graph"
    assert counters["stats"]["calls_captured"] == frames


def _grpo(tokenizer, tmp_path, mode, steps=1):
    # 4 tasks and a small lr: both steps' groups still differ in reward, so both steps update
    cfg = tiny_train_config(tmp_path / mode, steps=steps, compile=mode, stop_without_signal=0, tasks_per_step=4,
                            lr=1e-4)
    trainer = Trainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    return trainer.train()


def test_compile_on_trains_two_grpo_steps_like_eager(tokenizer, tmp_path):
    eager = _grpo(tokenizer, tmp_path, "off", steps=2)
    on = _grpo(tokenizer, tmp_path, "on", steps=2)
    assert compiled.failure() is None
    assert len(on) == 2 and all(m["train/optimizer_steps"] == 1 for m in on)
    assert "time/compile" not in eager[0]
    assert all(0 <= m["time/compile"] <= m["time/train"] for m in on)
    for e, c in zip(eager, on, strict=True):  # the same rollouts (sampling is not compiled), the same update
        assert c["train/loss"] == pytest.approx(e["train/loss"], rel=1e-4, abs=1e-6)
        assert c["train/grad_norm"] == pytest.approx(e["train/grad_norm"], rel=1e-4, abs=1e-6)
        assert c["reward/mean"] == e["reward/mean"]


def test_a_failing_compiler_logs_one_line_and_the_update_runs_eager(tokenizer, tmp_path, monkeypatch, caplog):
    def no_compiler(fn, **_kwargs):
        def call(*_args, **_kw):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")
        return call

    monkeypatch.setattr(compiled, "_STATE", {"failed": None, "probed": set()})
    monkeypatch.setattr(compiled, "_COMPILED", {})
    monkeypatch.setattr(torch, "compile", no_compiler)
    eager = _grpo(tokenizer, tmp_path, "off", steps=2)
    with caplog.at_level(logging.WARNING, logger="agentrl.algos.training.compiled"):
        fell_back = _grpo(tokenizer, tmp_path, "on", steps=2)
    lines = [r.getMessage() for r in caplog.records if r.name == "agentrl.algos.training.compiled"]
    assert len(lines) == 1 and "runs eager" in lines[0] and "No working C++ compiler" in lines[0]
    assert compiled.failure() is not None
    for e, f in zip(eager, fell_back, strict=True):  # eager: the same numbers
        assert f["train/loss"] == pytest.approx(e["train/loss"], rel=1e-6, abs=1e-9)
        assert f["train/grad_norm"] == pytest.approx(e["train/grad_norm"], rel=1e-6, abs=1e-9)


def test_a_call_that_fails_after_the_probe_reruns_eager_and_turns_compiling_off(tokenizer, monkeypatch, caplog):
    def unsupported(fn, **_kwargs):
        def call(*_args, **_kw):
            raise torch._dynamo.exc.Unsupported("an op dynamo cannot trace")
        return call

    monkeypatch.setattr(compiled, "_STATE", {"failed": None, "probed": set()})
    monkeypatch.setattr(compiled, "_COMPILED", {})
    monkeypatch.setattr(compiled, "_probe", lambda module: None)  # the probe passed; a later call fails
    monkeypatch.setattr(torch, "compile", unsupported)
    model = _lora_model(tokenizer)
    ids, mask = _batch(2, 15)
    lp_e, loss_e, g_e = _pass(model, ids, mask, "off")
    with caplog.at_level(logging.WARNING, logger="agentrl.algos.training.compiled"):
        lp_f, loss_f, g_f = _pass(model, ids, mask, "on")
        _pass(model, ids, mask, "on")
    assert len([r for r in caplog.records if r.name == "agentrl.algos.training.compiled"]) == 1
    assert "Unsupported" in compiled.failure()
    assert torch.equal(lp_f, lp_e) and loss_f == loss_e and all(torch.equal(g_f[k], g_e[k]) for k in g_e)


def test_the_compile_key(tokenizer):
    with pytest.raises(ValueError, match="compile must be"):
        TrainConfig(compile="fast").validate()
    assert "compile" not in config_to_dict(TrainConfig())  # 'off': configs and setups recorded before the key
    assert config_to_dict(TrainConfig(compile="auto"))["compile"] == "auto"
    cpu_model = tiny_model(tokenizer, hidden_size=32)
    assert not compiled.wants_compile("auto", cpu_model) and compiled.wants_compile("on", cpu_model)
    with pytest.raises(ValueError, match="compile must be one of"):
        compiled.wants_compile("yes", cpu_model)
