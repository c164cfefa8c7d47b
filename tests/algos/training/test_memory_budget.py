"""Activation memory: gradient checkpointing of the decoder layers and micro-batches sized from a memory budget."""

from __future__ import annotations

import platform

import pytest
import torch

from agentrl.algos.config import apply_overrides, config_from_dict
from agentrl.algos.models import tiny_model
from agentrl.algos.models.lora import LoRAConfig, apply_lora
from agentrl.algos.objectives.logprobs import token_logprobs
from agentrl.algos.training.config import TrainConfig
from agentrl.algos.training.memory_plan import (
    activation_bytes_per_token,
    checkpointed_layers,
    memory_plan,
    set_gradient_checkpointing,
    set_malloc_mmap_threshold,
    trim_heap,
)


@pytest.fixture(scope="module")
def lora_model(tokenizer):
    torch.manual_seed(0)
    return apply_lora(tiny_model(tokenizer, num_layers=3), LoRAConfig(r=4, alpha=8, target_modules="all-linear"))


def _batch():
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, 1000, (1, 40), generator=g).expand(3, -1)  # a shared prefix (>= 32 tokens)
    ids = torch.cat([prefix, torch.randint(0, 1000, (3, 20), generator=g)], dim=1)
    mask = torch.ones_like(ids)
    mask[2, -5:] = 0
    return ids, mask


def _count_checkpoint_calls(model) -> list[int]:
    calls: list[int] = []
    for m in model.modules():
        func = m.__dict__.get("_gradient_checkpointing_func")
        if func is not None and hasattr(m, "_can_checkpoint_with_cache"):
            m._gradient_checkpointing_func = (lambda f: lambda *a, **k: (calls.append(1), f(*a, **k))[1])(func)
    return calls


def _grads(model, checkpointing: bool, share_prefix: bool):
    set_gradient_checkpointing(model, checkpointing)
    calls = _count_checkpoint_calls(model)
    model.eval()  # as the update runs it (dropout off)
    model.zero_grad(set_to_none=True)
    ids, mask = _batch()
    with checkpointed_layers(model) as n_layers:
        lp = token_logprobs(model, ids, mask, share_prefix=share_prefix)
    (lp * torch.linspace(-1, 1, lp.numel()).view_as(lp)).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}
    set_gradient_checkpointing(model, False)
    return lp.detach(), grads, n_layers, len(calls)


@pytest.mark.parametrize("share_prefix", [True, False])
def test_checkpointed_step_gives_the_same_gradients(lora_model, share_prefix):
    lp0, g0, n0, calls0 = _grads(lora_model, False, share_prefix)
    lp1, g1, n1, calls1 = _grads(lora_model, True, share_prefix)
    assert (n0, calls0) == (0, 0)
    assert n1 == 3 and calls1 >= 3  # every layer really ran under torch.utils.checkpoint (prefix + tail: 6)
    torch.testing.assert_close(lp1, lp0)
    assert set(g0) == set(g1) and any(g.abs().sum() > 0 for g in g0.values())
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-5, atol=1e-6, msg=k)


def test_checkpointing_is_off_while_sampling_and_in_no_grad_passes(lora_model):
    ids, mask = _batch()
    with torch.no_grad():
        before = lora_model.generate(input_ids=ids[:1, :10], max_new_tokens=6, do_sample=False)
        plain = token_logprobs(lora_model, ids, mask)
    set_gradient_checkpointing(lora_model, True)
    try:
        calls = _count_checkpoint_calls(lora_model)
        lora_model.eval()
        with torch.no_grad():
            out = lora_model.generate(input_ids=ids[:1, :10], max_new_tokens=6, do_sample=False, use_cache=True)
            with checkpointed_layers(lora_model):
                lp = token_logprobs(lora_model, ids, mask)
        assert calls == []  # generation and no-grad logprobs run the layers as they are (KV cache included)
        assert torch.equal(out, before)
        torch.testing.assert_close(lp, plain)
        assert not any(m.training for m in lora_model.modules())  # the context restored every layer's mode
    finally:
        set_gradient_checkpointing(lora_model, False)


def test_auto_micro_batch_is_monotone_in_the_budget(lora_model):
    budgets = [1.01, 1.1, 1.5, 2.0, 4.0, 16.0]
    for ckpt in (True, False):
        sizes = [memory_plan(lora_model, gradient_checkpointing=ckpt, micro_batch_tokens="auto", memory_budget_gb=b)[1]
                 for b in budgets]
        assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
        assert all(s % 256 == 0 and s >= 256 for s in sizes)
    # checkpointing keeps less per token, so the same budget holds more tokens
    assert activation_bytes_per_token(lora_model, True) < activation_bytes_per_token(lora_model, False)


def test_auto_checkpointing_turns_on_when_the_budget_is_short(lora_model):
    per_token = activation_bytes_per_token(lora_model, False)
    fixed = 16384
    need = 1 + (fixed * per_token) / 2**30  # GiB, over the fixed part of 1 GiB
    assert memory_plan(lora_model, gradient_checkpointing="auto", micro_batch_tokens=fixed,
                       memory_budget_gb=need * 1.05) == (False, fixed)
    assert memory_plan(lora_model, gradient_checkpointing="auto", micro_batch_tokens=fixed,
                       memory_budget_gb=1 + (need - 1) / 2) == (True, fixed)
    assert memory_plan(lora_model, gradient_checkpointing=False, micro_batch_tokens=fixed,
                       memory_budget_gb=1.01) == (False, fixed)  # explicit settings are kept


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"memory_budget_gb": 0}, "memory_budget_gb"),
    ({"memory_budget_gb": -1.0}, "memory_budget_gb"),
    ({"micro_batch_tokens": 0}, "micro_batch_tokens"),
    ({"micro_batch_tokens": "big"}, "micro_batch_tokens"),
    ({"gradient_checkpointing": "sometimes"}, "gradient_checkpointing"),
    ({"malloc_mmap_threshold_mb": 0}, "malloc_mmap_threshold_mb"),
    ({"malloc_mmap_threshold_mb": -4}, "malloc_mmap_threshold_mb"),
    ({"policy_max_batch_tokens": 0}, "policy_max_batch_tokens"),
])
def test_bad_values_name_the_key(lora_model, kwargs, key):
    if key == "malloc_mmap_threshold_mb":
        with pytest.raises(ValueError, match=key):
            set_malloc_mmap_threshold(kwargs[key])
    elif key != "policy_max_batch_tokens":  # a policy setting: only the config checks it
        args = {"gradient_checkpointing": "auto", "micro_batch_tokens": "auto", "memory_budget_gb": 2.0, **kwargs}
        with pytest.raises(ValueError, match=key):
            memory_plan(lora_model, **args)
    with pytest.raises(ValueError, match=key):
        TrainConfig.from_dict(kwargs).validate()


def test_new_keys_round_trip_through_dicts_and_overrides():
    cfg = TrainConfig(gradient_checkpointing=True, micro_batch_tokens=4096, memory_budget_gb=3.5)
    again = config_from_dict(TrainConfig, cfg.to_dict())
    assert (again.gradient_checkpointing, again.micro_batch_tokens, again.memory_budget_gb) == (True, 4096, 3.5)
    d = apply_overrides({}, ["gradient_checkpointing=false", "micro_batch_tokens=auto", "memory_budget_gb=6"])
    over = config_from_dict(TrainConfig, d)
    assert (over.gradient_checkpointing, over.micro_batch_tokens, over.memory_budget_gb) == (False, "auto", 6.0)
    assert isinstance(over.memory_budget_gb, float)
    defaults = TrainConfig()
    assert (defaults.gradient_checkpointing, defaults.micro_batch_tokens) == ("auto", "auto")


def test_trainer_resolves_the_plan_and_reports_peak_rss(tmp_path, tokenizer):
    from helpers import tiny_train_config, tiny_train_model

    from agentrl.algos.training.trainer import Trainer

    trainer = Trainer(tiny_train_config(tmp_path, gradient_checkpointing=True, memory_budget_gb=1.5),
                      model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    assert trainer.checkpointing is True
    assert trainer.micro_batch_tokens == memory_plan(trainer.model, gradient_checkpointing=True,
                                                     micro_batch_tokens="auto", memory_budget_gb=1.5)[1]
    metrics = trainer.train()[-1]
    assert metrics["perf/peak_rss_gib"] > 0
    assert metrics["train/optimizer_steps"] == 1


@pytest.mark.skipif(not platform.libc_ver()[0] == "glibc", reason="mallopt is glibc's")
def test_malloc_mmap_threshold_is_set_on_glibc_and_by_the_trainer(tmp_path, tokenizer, monkeypatch):
    from helpers import tiny_train_config, tiny_train_model

    from agentrl.algos.training import trainer as trainer_mod
    from agentrl.algos.training import update as update_mod

    assert set_malloc_mmap_threshold(16) is True  # mallopt returned 1: glibc took the value
    assert isinstance(trim_heap(), bool)
    seen, trims, micro = [], [], []
    monkeypatch.setattr(trainer_mod, "set_malloc_mmap_threshold", seen.append)
    monkeypatch.setattr(trainer_mod, "trim_heap", lambda: trims.append(1))
    monkeypatch.setattr(update_mod, "trim_heap", lambda: micro.append(1))
    a = trainer_mod.Trainer(tiny_train_config(tmp_path / "a", malloc_mmap_threshold_mb=8, steps=2),
                            model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    metrics = a.train()
    assert seen == [8] and len(trims) == 4  # the threshold once; a trim before every update and after every step
    # and one after every micro-batch of every update (at least one per optimizer step)
    assert len(micro) >= sum(m["train/optimizer_steps"] for m in metrics) >= 1
    n_micro = len(micro)
    trainer_mod.Trainer(tiny_train_config(tmp_path / "b", malloc_mmap_threshold_mb=None),
                        model=tiny_train_model(tokenizer), tokenizer=tokenizer).train()
    assert seen == [8] and len(trims) == 4 and len(micro) == n_micro  # null leaves the allocator alone


def test_main_job_passes_its_memory_budget_to_both_stages():
    from agentrl.algos.recipes.main_job import MainJobConfig, stage_config

    cfg = config_from_dict(MainJobConfig, apply_overrides({}, ["memory_budget_gb=3.5"]))
    assert stage_config(cfg, "sft", "s").memory_budget_gb == stage_config(cfg, "rl", "r").memory_budget_gb == 3.5
    assert stage_config(MainJobConfig(), "rl", "r").memory_budget_gb == MainJobConfig().memory_budget_gb == 1.5


# ------------------------------------------------------------------------- the shared prefix, once per update


def _prefix_rows(n_rows=4, prefix=40, tails=(7, 12, 5, 9)):
    g = torch.Generator().manual_seed(3)
    head = torch.randint(0, 1000, (prefix,), generator=g).tolist()
    return [head + torch.randint(0, 1000, (t,), generator=g).tolist() for t in tails[:n_rows]]


def _collated(rows):
    ids = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
    return ids, mask


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_prefix_pass_gives_every_micro_batch_the_same_logprobs_and_gradients(lora_model, checkpointing):
    from agentrl.algos.objectives.logprobs import prefix_pass

    rows = _prefix_rows()
    parts = [rows[:1], rows[1:3], rows[3:]]  # three micro-batches, one of a single row
    decoder = lora_model.get_base_model().model
    with torch.no_grad():  # the model's one-time logit-transform check (two 8-token probe passes) runs here,
        token_logprobs(lora_model, *_collated(parts[0]))  # not under the counting hook, whatever ran before
    tokens: list[int] = []
    hook = decoder.register_forward_pre_hook(lambda m, a, kw: tokens.append(kw["input_ids"].numel()), with_kwargs=True)
    set_gradient_checkpointing(lora_model, checkpointing)
    lora_model.eval()
    try:
        results = []
        for once in (False, True):
            lora_model.zero_grad(set_to_none=True)
            tokens.clear()
            lps = []
            with checkpointed_layers(lora_model):
                prefix = prefix_pass(lora_model, torch.tensor(rows[0][:40])) if once else None
            for k, part in enumerate(parts):
                ids, mask = _collated(part)
                with checkpointed_layers(lora_model):
                    lp = token_logprobs(lora_model, ids, mask, prefix=prefix)
                (lp * torch.linspace(-1, 1 + k, lp.numel()).view_as(lp)).sum().backward()
                lps.append(lp.detach())
            if prefix is not None:
                prefix.backward()
            results.append((lps, {n: p.grad.clone() for n, p in lora_model.named_parameters() if p.requires_grad},
                            sum(tokens)))
    finally:
        hook.remove()
        set_gradient_checkpointing(lora_model, False)
    (lps0, g0, tokens0), (lps1, g1, tokens1) = results
    for a, b in zip(lps0, lps1, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert set(g0) == set(g1) and any(g.abs().sum() > 0 for g in g1.values())  # LoRA A: 0 while B is 0
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-6, msg=k)
    # forward tokens: each micro-batch ran the 40 prefix tokens (a single row: every token) before; now the prefix
    # runs once and each micro-batch only its rows' tails (longest tail x rows)
    assert tokens0 == 47 + (40 + 2 * 12) + (40 + 9)
    assert tokens1 == 40 + 7 + 2 * 12 + 9


def test_a_prefix_that_a_row_does_not_open_with_is_refused(lora_model):
    from agentrl.algos.objectives.logprobs import prefix_pass

    rows = _prefix_rows()
    prefix = prefix_pass(lora_model, torch.tensor(rows[0][:40]))
    ids, mask = _collated(rows[:2])
    ids[1, 3] += 1
    with pytest.raises(ValueError, match="open with the prefix's 40 tokens"):
        token_logprobs(lora_model, ids, mask, prefix=prefix)
    with pytest.raises(ValueError, match="prefix_ids"):
        prefix_pass(lora_model, torch.tensor([rows[0][:40]]))


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_an_update_in_many_micro_batches_equals_one_in_a_single_micro_batch(tokenizer, beta):
    """The update runs the rows' common prefix once (a PrefixPass) when it has several micro-batches: one SGD step
    in micro-batches of one row each moves the weights as one micro-batch of every row does (with a KL term to
    the reference too, whose passes all run before the policy's)."""
    from agentrl.algos.objectives.batching import TrainRow, token_weights
    from agentrl.algos.objectives.grpo import GRPO, GRPOConfig
    from agentrl.algos.training.reference import Reference
    from agentrl.algos.training.update import apply_update, micro_batches, rows_logprobs

    rows = _prefix_rows()
    masks = [[0] * 42 + [1] * (len(r) - 42) for r in rows]
    weights = token_weights(masks)
    groups = [[TrainRow(r, m, [-1.0] * len(r), w, adv)] for r, m, w, adv in
              zip(rows, masks, weights, (1.0, -1.0, 0.5, -0.5), strict=True)]
    moved = []
    for tokens in (4096, 1):
        torch.manual_seed(0)
        model = apply_lora(tiny_model(tokenizer, num_layers=2), LoRAConfig(r=4, alpha=8, target_modules="all-linear"))
        assert len(micro_batches(groups, tokens)) == (1 if tokens == 4096 else 4)
        reference = Reference(model) if beta else None
        with torch.no_grad():  # the policy moves away from the reference (B = 0 at init): a KL gradient too
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(n)))
        flat = [g[0] for g in groups]  # the no-gradient pass shares the prefix across micro-batches too
        lps = rows_logprobs(model, flat, temperature=1.0, pad_id=0, micro_batch_tokens=tokens, logprob_chunk=64)
        before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        out = apply_update(model, opt, GRPO(GRPOConfig(beta=beta)), groups, lr=1.0, temperature=1.0, pad_id=0,
                           micro_batch_tokens=tokens, logprob_chunk=64, max_grad_norm=1e9, reference=reference,
                           sampled=False)
        moved.append(({n: p.detach() - before[n] for n, p in model.named_parameters() if p.requires_grad},
                      out["train/loss"], lps))
    (d0, loss0, lps0), (d1, loss1, lps1) = moved
    assert loss1 == pytest.approx(loss0, rel=1e-5)
    for a, b in zip(lps0, lps1, strict=True):
        assert b == pytest.approx(a, rel=1e-5, abs=1e-6) and any(a)
    assert any(d.abs().sum() > 0 for d in d0.values())
    for n in d0:
        torch.testing.assert_close(d1[n], d0[n], rtol=1e-4, atol=1e-6, msg=n)
