"""KL(policy || base) of an adapter on its own episodes (agentrl.algos.evaluation.kl): 0 for a zero-initialised
LoRA, above 0 after one optimizer step, equal to the KL computed by hand from the two models' distributions."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")


def episode(ids, mask):
    return types.SimpleNamespace(token_ids=ids, loss_mask=mask)


@pytest.fixture
def lora_model(tokenizer):
    from agentrl.algos.models import tiny_model
    from agentrl.algos.models.lora import apply_lora

    return apply_lora(tiny_model(tokenizer, hidden_size=32))


EPISODES = [episode(list(range(10, 30)), [0] * 8 + [1] * 12), episode(list(range(40, 52)), [0] * 5 + [1] * 7)]


def test_a_zero_initialised_adapter_is_the_base(lora_model):
    from agentrl.algos.evaluation.kl import kl_to_base

    report = kl_to_base(lora_model, EPISODES)
    assert report.tokens == 19 and report.episodes == 2
    assert report.token_mean == pytest.approx(0.0, abs=1e-7)


def test_one_step_moves_the_policy_away_from_the_base_by_the_kl_computed_by_hand(lora_model):
    from agentrl.algos.evaluation.kl import kl_to_base

    params = [p for p in lora_model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-2)
    ids = torch.tensor([EPISODES[0].token_ids])
    loss = torch.nn.functional.cross_entropy(lora_model(input_ids=ids).logits[0, :-1], ids[0, 1:])
    loss.backward()
    opt.step()
    report = kl_to_base(lora_model, EPISODES)
    assert report.token_mean > 1e-4
    with torch.no_grad():  # by hand: the reply tokens' predicting positions, adapter on and off
        total, n = 0.0, 0
        for e in EPISODES:
            x = torch.tensor([e.token_ids])
            p = torch.log_softmax(lora_model(input_ids=x).logits[0], -1)
            with lora_model.disable_adapter():
                q = torch.log_softmax(lora_model(input_ids=x).logits[0], -1)
            for i, m in enumerate(e.loss_mask):
                if m:
                    total += float((p[i - 1].exp() * (p[i - 1] - q[i - 1])).sum())
                    n += 1
    assert report.token_mean == pytest.approx(total / n, rel=1e-4)
    assert lora_model.training  # left as it was


def test_episodes_sharing_their_opening_give_the_kl_of_two_full_forwards_each(lora_model):
    # The shared prefix runs once into a KV cache (adapter on and off); each episode's own tokens run on top of
    # it. The result must be what two full forwards per episode give (sequence_kl, the definition).
    from agentrl.algos.evaluation.kl import kl_to_base, sequence_kl
    from agentrl.algos.rollout.trajectory import shared_prefix_len

    torch.manual_seed(0)
    for p in lora_model.parameters():
        if p.requires_grad:
            p.data.normal_(0, 0.2)  # a trained-looking adapter: B no longer 0
    opening = list(range(100, 130))
    episodes = [episode(opening + [7, 8, 9, 10, 11, 12], [0] * 31 + [1] * 5),
                episode(opening + [7, 8, 20, 21], [0] * 32 + [1] * 2),
                episode(opening + [50] + list(range(60, 70)), [0] * 31 + [1] * 3 + [0] * 3 + [1] * 4)]
    assert shared_prefix_len([e.token_ids for e in episodes]) == 30
    report = kl_to_base(lora_model, episodes)
    by_definition = [sequence_kl(lora_model, e.token_ids, e.loss_mask) for e in episodes]
    assert report.tokens == sum(n for _, n in by_definition) == 14 and report.token_mean > 1e-2
    # equal up to fp32 rounding (a cached prefix sums in another order)
    assert report.token_mean == pytest.approx(sum(s for s, _ in by_definition) / 14, rel=1e-4)
    assert report.per_episode == pytest.approx([s / n for s, n in by_definition], rel=1e-4)
    assert kl_to_base(lora_model, episodes[:1]).token_mean == pytest.approx(by_definition[0][0] / 5, rel=1e-4)


def test_a_model_without_an_adapter_or_replies_is_refused(tokenizer, lora_model):
    from agentrl.algos.evaluation.kl import kl_to_base
    from agentrl.algos.models import tiny_model

    with pytest.raises(ValueError, match="PEFT model"):
        kl_to_base(tiny_model(tokenizer, hidden_size=32), EPISODES)
    with pytest.raises(ValueError, match="no episode has a reply token"):
        kl_to_base(lora_model, [episode([1, 2, 3], [0, 0, 0])])
