"""Rollout correction (TIS / MIS, token and sequence level): the weights equal the formula on rows whose
stored (rollout) logprobs differ from the model's by a known amount, the update's gradient is the weighted
policy gradient, and 'auto' turns it on exactly when the policy is not the trained model in process."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from helpers import tiny_llama, tiny_train_config, tiny_train_model

from agentrl.algos.objectives.batching import TrainRow
from agentrl.algos.objectives.dpo import DPO
from agentrl.algos.objectives.grpo import GRPO, GRPOConfig
from agentrl.algos.objectives.logprobs import token_logprobs
from agentrl.algos.objectives.ppo import PPO, PPOConfig, RolloutCorrection, importance_weights
from agentrl.algos.policy.base import SamplingParams
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.algos.training.async_trainer import VersionedPolicy
from agentrl.algos.training.trainer import Trainer
from agentrl.algos.training.update import apply_update, resolve_correction, rows_logprobs

# Per action token: log pi_old - log pi_rollout. exp: 1.35, 0.61, 3.32 (over C=2), 0.37 (under 1/C), 1.0, 1.92
GAPS = [[0.3, -0.5, 1.2, -1.0], [0.0, 0.65]]
ADV = [0.8, -0.6]


def _w(gap, mode, cap=2.0):
    r = math.exp(gap)
    if mode == "tis":
        return min(r, cap)
    return r if 1 / cap <= r <= cap else 0.0


# ---------------------------------------------------------------------------------------------- the formula


@pytest.mark.parametrize("mode", ["tis", "mis"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_importance_weights_equal_the_formula(mode, level):
    mask = torch.tensor([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]])
    rollout = torch.randn(2, 5, generator=torch.Generator().manual_seed(0))
    gaps = torch.zeros(2, 5)
    gaps[0, 1:] = torch.tensor(GAPS[0])
    gaps[1, 2:4] = torch.tensor(GAPS[1])
    train = torch.where(mask > 0, rollout + gaps, torch.full_like(rollout, 7.0))  # off-mask: never counted
    w, stats = importance_weights(train, rollout, mask, RolloutCorrection(mode, level, cap=2.0))
    if level == "token":
        want = [[_w(g, mode) for g in row] for row in GAPS]
    else:  # one ratio per row: the product of its tokens' ratios
        want = [[_w(sum(row), mode)] * len(row) for row in GAPS]
    got = [w[0, 1:].tolist(), w[1, 2:4].tolist()]
    for g, e in zip(got, want, strict=True):
        assert g == pytest.approx(e, rel=1e-5)
    assert w[0, 0] == 1 and w[1, 0] == w[1, 1] == w[1, 4] == 1  # not action tokens
    flat = [x for row in want for x in row]
    assert stats["is_weight_mean"] == pytest.approx(sum(flat) / len(flat), rel=1e-5)
    ratios = [math.exp(g) for row in GAPS for g in row] if level == "token" else \
        [math.exp(sum(row)) for row in GAPS for _ in row]
    if mode == "tis":
        assert stats["is_clipped_frac"] == pytest.approx(sum(r > 2 for r in ratios) / len(ratios))
    else:
        assert stats["is_masked_frac"] == pytest.approx(sum(not 0.5 <= r <= 2 for r in ratios) / len(ratios))


def test_a_sequence_ratio_that_overflows_is_truncated_or_masked_not_nan():
    mask = torch.ones(1, 200)
    for mode, want in (("tis", 2.0), ("mis", 0.0)):
        w, _ = importance_weights(torch.zeros(1, 200), torch.full((1, 200), -1.0), mask,
                                  RolloutCorrection(mode, "sequence"))
        assert torch.equal(w, torch.full((1, 200), want))


def test_correction_settings_are_checked():
    for bad, match in (({"correction": "ips"}, "correction must be"), ({"correction_level": "turn"}, "level"),
                       ({"correction_cap": 1.0}, "> 1")):
        with pytest.raises(ValueError, match=match):
            GRPO(GRPOConfig(**bad))
        with pytest.raises(ValueError, match=match):
            PPO(PPOConfig(**bad))
    with pytest.raises(ValueError, match="resolved"):
        RolloutCorrection("auto")


# ---------------------------------------------------------------------------------------------- the update


def _rows(model, gaps=GAPS):
    """Two rows whose recorded (rollout) logprobs are the model's minus ``gaps`` on their action tokens."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for gap, adv in zip(gaps, ADV, strict=True):
        n = 3 + len(gap)
        ids = torch.randint(1, 256, (n,), generator=g).tolist()
        mask = [0] * 3 + [1] * len(gap)
        rows.append(TrainRow(ids, mask, [0.0] * n, [0.0] * n, adv))
    total = sum(len(gap) for gap in gaps)
    lps = rows_logprobs(model, rows, temperature=1.0, pad_id=0, micro_batch_tokens=4096, logprob_chunk=64)
    for row, lp, gap in zip(rows, lps, gaps, strict=True):
        row.old_logprobs = [x - (gap[i - 3] if i >= 3 else 0.0) for i, x in enumerate(lp)]
        row.weights = [1.0 / total if m else 0.0 for m in row.loss_mask]
    return rows


def _update(model, algo, rows, correction):
    """One apply_update with plain SGD at lr 1: returns (metrics, the parameter change = minus the gradient)."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    out = apply_update(model, opt, algo, [[r] for r in rows], lr=1.0, temperature=1.0, pad_id=0,
                       micro_batch_tokens=4096, logprob_chunk=64, max_grad_norm=1e9, correction=correction)
    return out, {n: p.detach() - before[n] for n, p in model.named_parameters()}


def _weighted_pg_gradient(model, rows, w):
    """The gradient of sum_t weight_t * w_t * (-A * log pi(a_t)): the clipped surrogate's at ratio 1."""
    model.zero_grad()
    for row, wr in zip(rows, w, strict=True):
        ids = torch.tensor([row.token_ids])
        lp = token_logprobs(model, ids, torch.ones_like(ids), temperature=1.0, chunk_size=64,
                            positions=torch.tensor([row.loss_mask]))[0]
        coef = torch.tensor([row.weights[i] * (wr[i - 3] if i >= 3 else 0.0) for i in range(len(row))])
        (-(row.advantage * coef * lp).sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode,level", [("tis", "token"), ("mis", "token"), ("tis", "sequence")])
def test_the_update_weights_each_token_by_the_formula(mode, level):
    model = tiny_llama(seed=2)
    model.eval()
    rows = _rows(model)
    if level == "token":
        w = [[_w(g, mode) for g in gap] for gap in GAPS]
    else:
        w = [[_w(sum(gap), mode)] * len(gap) for gap in GAPS]
    want = _weighted_pg_gradient(copy.deepcopy(model), rows, w)
    out, delta = _update(model, GRPO(GRPOConfig(correction=mode, correction_level=level)), rows,
                         RolloutCorrection(mode, level, cap=2.0))
    for n, d in delta.items():
        torch.testing.assert_close(-d, want[n], atol=1e-6, rtol=1e-4, msg=n)
    flat = [x for row in w for x in row]
    assert out["train/is_weight_mean"] == pytest.approx(sum(flat) / len(flat), rel=1e-4)
    key = "train/is_clipped_frac" if mode == "tis" else "train/is_masked_frac"
    assert key in out and ("train/is_masked_frac" if mode == "tis" else "train/is_clipped_frac") not in out
    # the ratio is taken against the trainer's own pi_old: exactly 1 on the first epoch, nothing clipped
    assert out["train/ratio_mean"] == pytest.approx(1.0) and out["train/clip_frac_high"] == 0
    # the gap metric still measures the rollout against the trainer
    gaps = [abs(g) for gap in GAPS for g in gap]
    assert out["train/logprob_gap"] == pytest.approx(sum(gaps) / len(gaps), abs=1e-5)
    if mode == "tis" and level == "token":
        assert out[key] == pytest.approx(1 / 6)  # exp(1.2) > 2
    if mode == "mis":
        assert out[key] == pytest.approx(2 / 6)  # exp(1.2) > 2 and exp(-1) < 1/2 dropped


def test_without_a_correction_the_ratio_is_taken_against_the_rollout_logprobs():
    model = tiny_llama(seed=2)
    model.eval()
    rows = _rows(model)
    out, _ = _update(model, PPO(PPOConfig(correction="none")), rows, None)
    ratios = [math.exp(g) for gap in GAPS for g in gap]
    assert out["train/ratio_mean"] == pytest.approx(sum(ratios) / len(ratios), rel=1e-4)
    assert not any(k.startswith("train/is_") for k in out)


def test_later_epochs_keep_the_first_epochs_pi_old_and_weights():
    model = tiny_llama(seed=2)
    model.eval()
    rows = _rows(model)
    out, _ = _update(model, PPO(PPOConfig(epochs=3, correction="tis")), rows, RolloutCorrection("tis"))
    assert out["train/optimizer_steps"] == 3
    w = [_w(g, "tis") for gap in GAPS for g in gap]
    assert out["train/is_weight_mean"] == pytest.approx(sum(w) / len(w), rel=1e-4)  # the same in every epoch
    assert out["train/ratio_max"] > 1.0 + 1e-4  # epochs 2 and 3: the policy moved away from pi_old


# ---------------------------------------------------------------------------------------------- when it is on


def test_auto_is_on_for_a_server_or_truncation_and_off_in_process(tokenizer):
    hf = HFPolicy.__new__(HFPolicy)  # only its type and its precision matter here
    hf.dtype = torch.float32
    server = OpenAIPolicy("http://127.0.0.1:9", "m", tokenizer)
    grpo, plain = GRPO(), CollectorConfig(temperature=1.0)
    assert resolve_correction(grpo, hf, plain) is None  # the rollout logprobs are the trainer's
    assert resolve_correction(grpo, server, plain) == RolloutCorrection("tis", "token", 2.0)
    assert resolve_correction(grpo, VersionedPolicy(server), plain).mode == "tis"  # the async wrapper
    for truncating in (CollectorConfig(top_p=0.9), CollectorConfig(top_k=20), SamplingParams(top_p=0.5)):
        assert resolve_correction(grpo, hf, truncating).mode == "tis"
    assert resolve_correction(grpo, hf, CollectorConfig(temperature=0.0, top_p=0.5)) is None  # greedy: no cut
    assert resolve_correction(GRPO(GRPOConfig(correction="none")), server, plain) is None
    assert resolve_correction(GRPO(GRPOConfig(correction="mis", correction_cap=3.0)), hf, plain) == \
        RolloutCorrection("mis", "token", 3.0)
    assert resolve_correction(PPO(PPOConfig(correction_level="sequence")), server, plain).level == "sequence"
    assert resolve_correction(DPO(), server, plain) is None  # not a per-token policy gradient


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_auto_is_on_in_process_when_the_policy_samples_in_half_precision(tokenizer, tmp_path, dtype):
    """In bf16/fp16 the cached batched decode and the training forward round differently (up to nats on a
    token): without a correction the PPO clip would zero those tokens' gradient on-policy, from rounding alone."""
    hf = HFPolicy.__new__(HFPolicy)
    hf.dtype = dtype
    assert resolve_correction(GRPO(), hf, CollectorConfig(temperature=1.0)) == RolloutCorrection("tis", "token", 2.0)
    assert resolve_correction(PPO(), VersionedPolicy(hf), CollectorConfig()).mode == "tis"
    assert resolve_correction(GRPO(GRPOConfig(correction="none")), hf, CollectorConfig()) is None
    # the trainer's own in-process policy over a half-precision model
    trainer = Trainer(tiny_train_config(tmp_path), model=tiny_train_model(tokenizer).to(dtype), tokenizer=tokenizer)
    assert trainer.correction == RolloutCorrection("tis", "token", 2.0)
    fp32 = Trainer(tiny_train_config(tmp_path / "fp32"), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    assert fp32.correction is None


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_in_process_training_corrects_only_truncated_sampling(tokenizer, tmp_path, top_p):
    """top-p sampling records the truncated distribution's logprobs, above the trainer's full-vocabulary ones:
    'auto' corrects (weight = the nucleus mass, <= 1; ratio 1); untruncated it stays off (ratio 1 anyway)."""
    cfg = tiny_train_config(tmp_path, steps=1, tasks_per_step=2, group_size=4, lr=1e-3,
                            collector=CollectorConfig(max_new_tokens=8, max_turns=1, top_p=top_p))
    trainer = Trainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    [m] = trainer.train()
    assert m["train/optimizer_steps"] == 1
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    if top_p == 1.0:
        assert trainer.correction is None and "train/is_weight_mean" not in m
        assert m["train/logprob_gap"] < 1e-4
    else:
        assert trainer.correction == RolloutCorrection("tis")
        assert 0.8 - 1e-4 <= m["train/is_weight_mean"] < 1.0 and m["train/is_clipped_frac"] == 0
        assert m["train/logprob_gap"] > 1e-3  # -log(nucleus mass) per token
