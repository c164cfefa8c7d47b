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


def test_a_model_without_an_adapter_or_replies_is_refused(tokenizer, lora_model):
    from agentrl.algos.evaluation.kl import kl_to_base
    from agentrl.algos.models import tiny_model

    with pytest.raises(ValueError, match="PEFT model"):
        kl_to_base(tiny_model(tokenizer, hidden_size=32), EPISODES)
    with pytest.raises(ValueError, match="no episode has a reply token"):
        kl_to_base(lora_model, [episode([1, 2, 3], [0, 0, 0])])
