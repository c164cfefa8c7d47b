"""Token-budget packing and the micro-batch weighting (accumulated gradient == full-batch gradient)."""

from __future__ import annotations

import random

import pytest
import torch
from helpers import tiny_llama

from agentrl.algos.objectives.batching import TrainRow, collate, pack_microbatches, token_weights
from agentrl.algos.objectives.grpo import GRPOConfig, grpo_loss
from agentrl.algos.objectives.logprobs import token_logprobs


def test_ffd_packing_respects_budget_and_covers_every_item():
    rng = random.Random(0)
    lengths = [rng.randint(5, 120) for _ in range(60)]
    bins = pack_microbatches(lengths, 256)
    assert sorted(i for b in bins for i in b) == list(range(60))
    for b in bins:
        assert len(b) * max(lengths[i] for i in b) <= 256
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)
    # by hand: 100 + 90 (2*100 <= 200) | 60 + 50 + 40 (3*60 = 180) | 30 (4*60 = 240 > 200 and 3*100 > 200)
    assert pack_microbatches([50, 100, 30, 90, 60, 40], 200) == [[1, 3], [4, 0, 5], [2]]


def test_oversized_item_gets_its_own_microbatch_and_rows_count():
    assert pack_microbatches([500, 10, 10], 100) == [[0], [1, 2]]
    # pairs (2 rows each) of length 30: two pairs = 4 rows * 30 = 120 <= 128, a third would be 180
    assert pack_microbatches([30, 30, 30], 128, rows=[2, 2, 2]) == [[0, 1], [2]]
    with pytest.raises(ValueError):
        pack_microbatches([1], 0)


def test_shared_prefix_is_counted_once_per_microbatch():
    # four rows of 700 tokens opening with the same 600: 4 x 700 = 2800 padded, 600 + 4 x 100 = 1000 computed
    assert pack_microbatches([700] * 4, 1000) == [[0], [1], [2], [3]]
    assert pack_microbatches([700] * 4, 1000, shared=600) == [[0, 1, 2, 3]]
    assert pack_microbatches([700] * 5, 1000, shared=600) == [[0, 1, 2, 3], [4]]
    with pytest.raises(ValueError, match="shared"):
        pack_microbatches([700, 500], 1000, shared=600)


def test_micro_batches_find_the_rows_common_prefix():
    from agentrl.algos.training.update import forward_shared_prefix_len, micro_batches

    def item(ids):
        return TrainRow(token_ids=ids, loss_mask=[1] * len(ids), old_logprobs=[0.0] * len(ids),
                        weights=[0.0] * len(ids))

    prefix = list(range(100))
    rows = [item(prefix + [1000 + r] * 20) for r in range(6)]
    assert forward_shared_prefix_len(rows) == 100 and forward_shared_prefix_len(rows[:1]) == 0
    below_min = [item(list(range(10)) + [1]), item(list(range(10)) + [2])]
    assert forward_shared_prefix_len(below_min) == 0  # below min_prefix
    # 6 rows of 120 with 100 shared: 100 + 6 x 20 = 220 tokens computed, though 720 padded
    assert [len(b) for b in micro_batches([[r] for r in rows], 220)] == [6]
    assert [len(b) for b in micro_batches([[r] for r in rows], 219)] == [5, 1]


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean"])
def test_microbatched_gradient_equals_full_batch_gradient(mode):
    model = tiny_llama(vocab=200)
    g = torch.Generator().manual_seed(1)
    items_raw = []
    for _ in range(7):
        n = int(torch.randint(6, 30, (1,), generator=g))
        ids = torch.randint(0, 200, (n,), generator=g).tolist()
        mask = [0] * 3 + [int(x) for x in (torch.rand(n - 3, generator=g) > 0.3)]
        mask[-1] = 1
        old = [(-float(torch.rand(1, generator=g)) if m else 0.0) for m in mask]
        items_raw.append((ids, mask, old, float(torch.randn(1, generator=g))))
    weights = token_weights([m for _, m, _, _ in items_raw], mode)
    items = [TrainRow(ids, mask, old, w, adv) for (ids, mask, old, adv), w in zip(items_raw, weights, strict=True)]
    cfg = GRPOConfig(aggregation=mode)

    def loss_of(batch_items):
        b = collate(batch_items, pad_id=0)
        lp = token_logprobs(model, b["input_ids"], b["attention_mask"], chunk_size=8)
        return grpo_loss(lp, b["old_logprobs"], b["advantages"], b["weights"], cfg)[0]

    model.zero_grad()
    full = loss_of(items)
    full.backward()
    full_grad = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    total = 0.0
    bins = pack_microbatches([len(it) for it in items], token_budget=64)
    assert len(bins) > 2  # really micro-batched
    for b in bins:
        loss = loss_of([items[i] for i in b])
        loss.backward()
        total += loss.item()
    assert total == pytest.approx(full.item(), rel=1e-5, abs=1e-6)
    for p, gf in zip(model.parameters(), full_grad, strict=True):
        torch.testing.assert_close(p.grad, gf, atol=1e-6, rtol=1e-4)


# ---------------------------------------------------------------------------------------------- prepare rules


def _traj(reward, group, n_action=3, termination="answered"):
    from agentrl.algos.rollout.trajectory import Trajectory

    ids = list(range(10, 14 + n_action))
    mask = [0] * 4 + [1] * n_action
    return Trajectory(ids, mask, [-1.0] * len(ids), prompt_len=4, reward=reward, group_id=group, task={},
                      termination=termination)


def test_grpo_keeps_equal_reward_groups_for_the_kl_term_only_when_beta_is_positive():
    from agentrl.algos.objectives.grpo import GRPO

    trajs = [_traj(1.0, 0), _traj(0.0, 0), _traj(0.5, 1), _traj(0.5, 1)]  # group 1: equal rewards
    rows, stats = GRPO(GRPOConfig(beta=0.0)).prepare(trajs)
    assert [r[0].meta["index"] for r in rows] == [0, 1] and stats["skipped_groups"] == 1
    rows, stats = GRPO(GRPOConfig(beta=0.1)).prepare(trajs)
    assert [r[0].meta["index"] for r in rows] == [0, 1, 2, 3] and stats["skipped_groups"] == 0
    assert [r[0].advantage for r in rows][2:] == [0.0, 0.0]
    # the token-mean normaliser covers every kept token: 4 sequences x 3 action tokens
    assert all(w in (0.0, 1 / 12) for r in rows for w in r[0].weights)


def test_env_error_trajectories_leave_the_baseline_and_the_batch():
    from agentrl.algos.objectives.dpo import DPO
    from agentrl.algos.objectives.grpo import GRPO
    from agentrl.algos.objectives.ppo import PPO, PPOConfig

    # group 0: rewards 1, 0 and an env error (reward 0); without the error the baseline is 0.5
    trajs = [_traj(1.0, 0), _traj(0.0, 0), _traj(0.0, 0, termination="error"), _traj(1.0, 1), _traj(0.0, 1)]
    rows, stats = PPO(PPOConfig()).prepare(trajs)
    assert [r[0].meta["index"] for r in rows] == [0, 1, 3, 4]
    assert [r[0].advantage for r in rows] == [0.5, -0.5, 0.5, -0.5]
    assert stats["env_error_trajectories"] == 1
    rows, stats = GRPO(GRPOConfig(beta=0.1)).prepare(trajs)  # kept-for-KL groups still leave errors out
    assert 2 not in [r[0].meta["index"] for r in rows] and stats["env_error_trajectories"] == 1
    # a group whose other members all errored has nothing to compare: dropped
    rows, stats = PPO(PPOConfig()).prepare([_traj(1.0, 0), _traj(0.0, 0, termination="error")])
    assert rows == [] and stats["skipped_groups"] == 1
    # DPO: with the errored trajectory the ranking is 1, .5, .2, 0 -> pairs (0, 3), (1, 2 = the error);
    # without it 1, .5, .2 -> one pair (0, 1)
    rows, stats = DPO().prepare([_traj(1.0, 0), _traj(0.5, 0), _traj(0.0, 0, termination="error"), _traj(0.2, 0)])
    assert [(a.meta["index"], b.meta["index"]) for a, b in rows] == [(0, 1)]
    assert stats["env_error_trajectories"] == 1


def test_dpo_statistics_are_averaged_over_pairs_not_tokens():
    """Two micro-batches: one long pair the policy gets right, three short pairs it gets wrong. Accuracy over
    pairs is 1/4; weighting by tokens (the long pair's 100 tokens vs 3 x 2 x 2) would say ~0.89."""
    from agentrl.algos.objectives.dpo import DPO
    from agentrl.algos.training.update import StepStats

    algo = DPO()
    stats = StepStats(1e-3, algo.mean_weight, algo.summed_stats)

    def batch(rows, length):
        mask = torch.ones(rows, length)
        return {"loss_mask": mask, "input_ids": torch.zeros(rows, length, dtype=torch.long),
                "attention_mask": torch.ones(rows, length), "old_logprobs": torch.zeros(rows, length)}

    for pairs, length, acc, margin in ((1, 50, 1.0, 2.0), (3, 2, 0.0, -1.0)):
        b = batch(2 * pairs, length)
        stats.add(0, b, torch.zeros(2 * pairs, length), torch.zeros(2 * pairs, length),
                  {"dpo_accuracy": acc, "dpo_margin": margin, "pairs": pairs, "loss_tokens": 2 * pairs * length},
                  sampled=False)
    stats.optimizer_step(0.1, 1.0)
    out = stats.result()
    assert out["train/dpo_accuracy"] == pytest.approx(0.25)
    assert out["train/dpo_margin"] == pytest.approx((2.0 - 3.0) / 4)
    assert out["train/pairs"] == 4 and out["train/loss_tokens"] == 112


# ---------------------------------------------------------------------------------------------- the normaliser


def _saturating_batch(equal_groups: int, groups: int = 8, size: int = 8, n_action: int = 10):
    """``groups`` groups of ``size``; the first ``equal_groups`` all scored 1, the others half 1, half 0."""
    return [_traj(1.0 if g < equal_groups or i % 2 == 0 else 0.0, g, n_action)
            for g in range(groups) for i in range(size)]


@pytest.mark.parametrize(("algo", "aggregation"), [("grpo", "token_mean"), ("grpo", "seq_mean"),
                                                    ("grpo", "seq_mean_token_sum_norm"), ("ppo", "token_mean"),
                                                    ("ppo", "seq_mean")])
def test_every_sampled_token_counts_in_the_normaliser_dropped_groups_included(algo, aggregation):
    # issue 60 (N5): TRL's dapo/dr_grpo and verl's token-mean divide by every sampled token (or sequence) of the
    # batch; dividing by the kept groups' only made a token weigh 4x as much once 6 of 8 groups had equal rewards
    from agentrl.algos.objectives.grpo import GRPO
    from agentrl.algos.objectives.ppo import PPO, PPOConfig

    make = (lambda **kw: GRPO(GRPOConfig(scale_std=False, aggregation=aggregation, norm_tokens=10, **kw))) \
        if algo == "grpo" else (lambda **kw: PPO(PPOConfig(aggregation=aggregation, **kw)))
    reference = 1 / (64 * 10)  # 64 sampled sequences of 10 action tokens (norm_tokens 10)
    for equal in (0, 2, 6):
        rows, stats = make().prepare(_saturating_batch(equal))
        assert stats["skipped_groups"] == equal and len(rows) == 8 * (8 - equal)  # still dropped from the work
        assert [w for r in rows for w in r[0].weights if w] == pytest.approx([reference] * len(rows) * 10)
        rows, _ = make(loss_denominator="kept").prepare(_saturating_batch(equal))  # the documented old way
        assert [w for r in rows for w in r[0].weights if w] == pytest.approx([reference * 8 / (8 - equal)] * len(rows)
                                                                              * 10)


def test_an_unknown_loss_denominator_is_refused_naming_the_key():
    from agentrl.algos.objectives.grpo import GRPO

    with pytest.raises(ValueError, match="loss_denominator must be one of sampled, kept, got 'all'"):
        GRPO(GRPOConfig(loss_denominator="all"))
