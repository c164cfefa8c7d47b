"""Token-budget packing and the micro-batch weighting (accumulated gradient == full-batch gradient)."""

from __future__ import annotations

import random

import pytest
import torch

from agentrl.algos.objectives.batching import SeqItem, collate, pack_microbatches, token_weights
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


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=200, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean"])
def test_microbatched_gradient_equals_full_batch_gradient(mode):
    model = _tiny_llama()
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
    items = [SeqItem(ids, mask, old, w, adv) for (ids, mask, old, adv), w in zip(items_raw, weights, strict=True)]
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
