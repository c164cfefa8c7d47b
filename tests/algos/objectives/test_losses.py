"""The losses on small tensors against hand computations, and token_logprobs against full logits."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import tiny_llama

from agentrl.algos.objectives.batching import token_weights
from agentrl.algos.objectives.dpo import dpo_loss, make_pairs, sequence_logprob
from agentrl.algos.objectives.grpo import GRPOConfig, group_advantages, grpo_loss, k3_kl
from agentrl.algos.objectives.logprobs import token_logprobs
from agentrl.algos.objectives.ppo import PPOConfig, baselined_advantages, clipped_surrogate, ppo_loss
from agentrl.algos.objectives.sft import sft_loss


def _lp(ratios, old=-1.0):
    """Logprobs giving the wanted ratios against old logprobs ``old``."""
    r = torch.tensor(ratios, dtype=torch.float64)
    return ((torch.log(r) + old).reshape(1, -1).requires_grad_(True),
            torch.full((1, len(ratios)), old, dtype=torch.float64))


def test_clipped_surrogate_both_bounds():
    # ratio:      1.5   0.5   1.5   0.5   1.1   0.9
    # advantage:  +1    -1    -1    +1    +1    -1
    lp, old = _lp([1.5, 0.5, 1.5, 0.5, 1.1, 0.9])
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0, 1.0, -1.0]], dtype=torch.float64)
    per_tok, info = clipped_surrogate(lp, old, adv, eps_low=0.2, eps_high=0.28)
    # by hand: -min(r*A, clip(r, 0.8, 1.28)*A)
    expected = [-1.28, 0.8, 1.5, -0.5, -1.1, 0.9]
    assert per_tok.detach().flatten().tolist() == pytest.approx(expected)
    assert info["clipped_high"].flatten().tolist() == [True, False, False, False, False, False]
    assert info["clipped_low"].flatten().tolist() == [False, True, False, False, False, False]
    per_tok.sum().backward()
    g = lp.grad.flatten()
    # clipped tokens have zero gradient; the others d(-r*A)/dlogp = -r*A
    assert g[0] == 0 and g[1] == 0
    assert g[2:].tolist() == pytest.approx([1.5, -0.5, -1.1, 0.9])


def test_ppo_loss_token_mean_and_stats():
    lp, old = _lp([1.5, 0.5, 1.0, 1.0])
    adv = torch.tensor([2.0], dtype=torch.float64)  # trajectory-level, broadcast
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.float64)
    w = torch.tensor(token_weights(mask.tolist()), dtype=torch.float64)
    loss, stats = ppo_loss(lp, old, adv, w, PPOConfig())
    # tokens: -min(1.5*2, 1.28*2) = -2.56, -min(0.5*2, 0.8*2) = -1.0, -2.0; the 4th is masked
    assert loss.item() == pytest.approx((-2.56 - 1.0 - 2.0) / 3)
    assert stats["clip_frac_high"] == pytest.approx(1 / 3)
    assert stats["clip_frac_low"] == 0.0  # ratio 0.5 with a positive advantage is not clipped
    assert stats["ratio_max"] == pytest.approx(1.5)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["loss_tokens"] == 3


def test_k3_kl_hand_values():
    lp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-2.0, -2.0, -0.1])
    q = ref - lp
    assert k3_kl(lp, ref).tolist() == pytest.approx([math.exp(-1) + 1 - 1, 0.0, math.exp(0.4) - 0.4 - 1])
    assert (k3_kl(lp, ref) >= 0).all() and float(q[1]) == 0


def test_grpo_loss_adds_beta_kl():
    lp, old = _lp([1.0, 1.0])
    ref = old - 1.0  # q = ref - lp = -1 on both tokens
    adv = torch.tensor([0.5], dtype=torch.float64)
    w = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    cfg = GRPOConfig(beta=0.1)
    loss, stats = grpo_loss(lp, old, adv, w, cfg, ref_logprobs=ref)
    kl = math.exp(-1) + 1 - 1
    assert loss.item() == pytest.approx(-0.5 + 0.1 * kl)
    assert stats["kl"] == pytest.approx(kl)
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(lp, old, adv, w, cfg)
    loss0, stats0 = grpo_loss(lp, old, adv, w, GRPOConfig(beta=0.0))
    assert loss0.item() == pytest.approx(-0.5) and "kl" not in stats0


def test_group_advantages_by_hand():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5]
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    std = math.sqrt((4 * 0.25) / 3)
    adv = group_advantages(rewards, groups, scale_std=True)
    assert adv[:4] == pytest.approx([0.5 / (std + 1e-6), -0.5 / (std + 1e-6)] * 1
                                    + [-0.5 / (std + 1e-6), 0.5 / (std + 1e-6)])
    assert adv[4:] == [0.0] * 4  # equal rewards: no signal
    # -0.1 * 3 / 3 != -0.1 in floats: equal rewards must still give exactly 0, not 1e-17 / (0 + 1e-6)
    assert group_advantages([-0.1] * 3, [0] * 3) == [0.0] * 3
    assert baselined_advantages([-0.1] * 3, [0] * 3) == [0.0] * 3
    assert group_advantages(rewards, groups, scale_std=False)[:4] == pytest.approx([0.5, -0.5, -0.5, 0.5])
    # groups are found by id, not by position
    assert group_advantages([1.0, 5.0, 0.0, 7.0], [0, 1, 0, 1], scale_std=False) == pytest.approx([0.5, -1, -0.5, 1])


def test_ppo_baselines():
    assert baselined_advantages([1, 0, 0, 1], [0] * 4) == pytest.approx([0.5, -0.5, -0.5, 0.5])
    # leave-one-out: 1 - mean(0, 0, 1) = 2/3; 0 - mean(1, 0, 1) = -2/3
    assert baselined_advantages([1, 0, 0, 1], [0] * 4, "leave_one_out") == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])


def test_dpo_pairs_and_loss_by_hand():
    assert make_pairs([0.0, 1.0, 0.5, 1.0], [0] * 4) == [(1, 2), (3, 0)]
    assert make_pairs([1.0, 1.0, 1.0, 0.0], [0] * 4) == [(1, 3)]  # rank 0 vs rank 2 are equal: dropped
    assert make_pairs([1.0, 1.0, 1.0, 1.0], [0] * 4) == []
    assert make_pairs([1, 0, 1, 0], [0, 0, 1, 1]) == [(0, 1), (2, 3)]
    chosen, rejected = torch.tensor([-3.0], requires_grad=True), torch.tensor([-5.0], requires_grad=True)
    loss, stats = dpo_loss(chosen, rejected, torch.tensor([-4.0]), torch.tensor([-4.0]), beta=0.1)
    h = 0.1 * ((-3 + 4) - (-5 + 4))
    assert loss.item() == pytest.approx(math.log1p(math.exp(-h)))
    assert stats["dpo_accuracy"] == 1.0 and stats["dpo_margin"] == pytest.approx(2.0)
    loss.backward()
    s = 1 / (1 + math.exp(h))  # d(-log sigmoid(h))/dh = -sigmoid(-h)
    assert float(chosen.grad) == pytest.approx(-0.1 * s) and float(rejected.grad) == pytest.approx(0.1 * s)


def test_masked_tokens_get_zero_gradient():
    torch.manual_seed(0)
    lp = (-torch.rand(2, 6)).requires_grad_(True)
    old = lp.detach() + 0.05 * torch.randn(2, 6)
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0]], dtype=torch.float32)
    w = torch.tensor(token_weights(mask.tolist()))
    for loss in (
        grpo_loss(lp, old, torch.tensor([1.0, -1.0]), w, GRPOConfig(beta=0.2), ref_logprobs=old - 0.1)[0],
        ppo_loss(lp, old, torch.tensor([1.0, -1.0]), w, PPOConfig())[0],
        sft_loss(lp, w),
        dpo_loss(sequence_logprob(lp, mask)[:1], sequence_logprob(lp, mask)[1:], torch.zeros(1), torch.zeros(1),
                 beta=0.1)[0],
    ):
        lp.grad = None
        loss.backward()
        assert (lp.grad[mask == 0] == 0).all()
        assert (lp.grad[mask == 1] != 0).all()


def test_sft_loss_is_token_mean_nll():
    lp = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))
    mask = torch.tensor([[0, 1, 1]])
    w = torch.tensor(token_weights(mask.tolist()))
    assert float(sft_loss(lp, w)) == pytest.approx(-(math.log(0.25) + math.log(0.9)) / 2)


def test_token_weights_modes():
    masks = [[0, 1, 1, 1], [0, 0, 1, 0]]
    tm = token_weights(masks, "token_mean")
    assert tm == [[0, 0.25, 0.25, 0.25], [0, 0, 0.25, 0]]
    sm = token_weights(masks, "seq_mean")
    assert sm[0] == pytest.approx([0, 1 / 6, 1 / 6, 1 / 6]) and sm[1] == pytest.approx([0, 0, 0.5, 0])
    x = torch.tensor([[9.0, 1.0, 2.0, 3.0], [9.0, 9.0, 4.0, 9.0]])
    assert float((x * torch.tensor(tm)).sum()) == pytest.approx(10 / 4)  # the mean over all action tokens
    assert float((x * torch.tensor(sm)).sum()) == pytest.approx((2 + 4) / 2)  # the mean of sequence means
    with pytest.raises(ValueError, match="aggregation"):
        token_weights(masks, "sum")


def _tiny_llama(seed=0):
    return tiny_llama(vocab=300, seed=seed, tie=True).eval()


def test_token_logprobs_matches_full_logits_chunked_with_entropy():
    model = _tiny_llama()
    ids = torch.randint(0, 300, (3, 23))
    am = torch.ones_like(ids)
    am[1, 17:] = 0
    with torch.no_grad():
        full = torch.log_softmax(model(ids, attention_mask=am).logits.float() / 0.7, -1)
    want = torch.cat([torch.zeros(3, 1), full[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)], 1)
    want_ent = torch.cat([torch.zeros(3, 1), -(full.exp() * full).sum(-1)[:, :-1]], 1)
    for chunk in (1, 5, 1024):
        lp, ent = token_logprobs(model, ids, am, temperature=0.7, chunk_size=chunk, return_entropy=True)
        assert lp.shape == (3, 23) and (lp[:, 0] == 0).all()
        torch.testing.assert_close(lp[am.bool()], want[am.bool()], atol=1e-5, rtol=0)
        torch.testing.assert_close(ent[am.bool()], want_ent[am.bool()], atol=1e-5, rtol=0)


def test_token_logprobs_differentiable_and_reference_with_adapter_disabled():
    from peft import LoraConfig, get_peft_model

    base = _tiny_llama()
    ids = torch.randint(0, 300, (2, 12))
    with torch.no_grad():
        base_lp = token_logprobs(base, ids)
    model = get_peft_model(base, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    lp = token_logprobs(model, ids, chunk_size=4)
    assert not torch.allclose(lp, base_lp)  # the (non-zero) adapter changes the policy
    with torch.no_grad(), model.disable_adapter():
        ref = token_logprobs(model, ids, chunk_size=4)
    torch.testing.assert_close(ref, base_lp)
    lp[:, 1:].sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_token_logprobs_gradients_equal_the_full_logits_autograd():
    """The hand-written LM-head backward matches autograd through full logits (all weights trainable)."""
    model = _tiny_llama(seed=3).train()
    ids = torch.randint(0, 300, (2, 17))
    am = torch.ones_like(ids)
    am[0, 12:] = 0
    pos = torch.zeros_like(ids)
    pos[:, 5:] = 1
    w = torch.randn(2, 17)

    def naive():
        logits = model(ids, attention_mask=am).logits.float() / 0.6
        lp = torch.log_softmax(logits, -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
        keep = (am[:, 1:] * pos[:, 1:]).bool()
        return (lp * w[:, 1:] * keep).sum()

    model.zero_grad()
    naive().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    lp = token_logprobs(model, ids, am, temperature=0.6, chunk_size=3, positions=pos)
    assert (lp[:, :5] == 0).all() and (lp[0, 12:] == 0).all()
    (lp * w).sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], atol=1e-5, rtol=1e-4, msg=n)


def test_shared_prefix_gives_the_same_logprobs_and_gradients():
    from peft import LoraConfig, get_peft_model

    from agentrl.algos.objectives.logprobs import padded_shared_prefix_len

    model = get_peft_model(_tiny_llama(seed=5), LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    prefix = torch.randint(0, 300, (40,))
    rows = [torch.cat([prefix, torch.randint(0, 300, (n,))]) for n in (9, 14, 5)]
    ids = torch.zeros(3, 54, dtype=torch.long)
    am = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        am[i, :len(r)] = 1
    assert padded_shared_prefix_len(ids, am) >= 40
    w = torch.randn(3, 54)
    results = []
    for share in (False, True):
        model.zero_grad()
        lp = token_logprobs(model, ids, am, share_prefix=share)
        (lp * w).sum().backward()
        results.append((lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    for n, g in results[0][1].items():
        torch.testing.assert_close(results[1][1][n], g, atol=1e-5, rtol=1e-4, msg=n)


# ---------------------------------------------------------------------------------------------- issue 13 fixes


def test_dual_clip_and_log_ratio_clamp_keep_one_huge_ratio_token_from_dominating():
    """100 on-policy tokens and one whose log-ratio is 60 (probability grew e^60-fold since sampling), all
    with advantage -1: without the hardening that token's loss term is e^60 and its gradient huge (or the
    loss overflows); with it the term is capped at clip_ratio_c * |A| and its gradient is exactly 0."""
    n = 101
    old = torch.full((1, n), -5.0, dtype=torch.float64)
    new = old.clone()
    new[0, 0] = old[0, 0] + 60.0
    new.requires_grad_(True)
    adv = torch.tensor([-1.0], dtype=torch.float64)
    w = torch.full((1, n), 1.0 / n, dtype=torch.float64)
    off = PPOConfig(clip_ratio_c=0.0, log_ratio_clamp=0.0)
    loss_off, _ = ppo_loss(new, old, adv, w, off)
    assert float(loss_off.detach()) > 1e20  # the one token is the whole loss
    loss, stats = ppo_loss(new, old, adv, w, PPOConfig())  # defaults: clip_ratio_c=3, log_ratio_clamp=20
    loss.backward()
    assert torch.isfinite(new.grad).all()
    assert new.grad[0, 0] == 0  # beyond the cap: no gradient
    # every other token: ratio 1, loss |A| = 1 each; the huge one: 3 * |A|
    assert float(loss.detach()) == pytest.approx((100 * 1.0 + 3.0) / n, rel=1e-12)
    assert stats["clip_frac_dual"] == pytest.approx(1 / n)
    # in float32 exp(100) overflows: the capped term's gradient would be 0 * inf = NaN without the clamp
    new32 = torch.tensor([[-5.0 + 100.0, -5.0]], requires_grad=True)
    loss32, _ = ppo_loss(new32, torch.full((1, 2), -5.0), torch.tensor([-1.0]), torch.full((1, 2), 0.5), PPOConfig())
    loss32.backward()
    assert torch.isfinite(new32.grad).all() and float(loss32.detach()) == pytest.approx(0.5 * 3.0 + 0.5 * 1.0)
    # the dual clip never touches positive advantages (the ordinary clip bounds those)
    per_pos, _ = clipped_surrogate(new.detach(), old, torch.tensor([1.0], dtype=torch.float64), 0.2, 0.28, 3.0, 20.0)
    assert float(per_pos[0, 0]) == pytest.approx(-1.28)


def test_grpo_loss_uses_the_dual_clip_too():
    new = torch.tensor([[0.0, math.log(10.0)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 2, dtype=torch.float64)
    loss, _ = grpo_loss(new, old, torch.tensor([-2.0], dtype=torch.float64),
                        torch.full((1, 2), 0.5, dtype=torch.float64), GRPOConfig())
    assert float(loss) == pytest.approx(0.5 * 2.0 + 0.5 * 3.0 * 2.0)  # ratio 10 capped at 3


def test_k3_value_is_unbiased_for_the_reverse_kl_and_its_gradient_is_the_forward_kls():
    """Exact expectations over a 5-way categorical pi_theta = softmax(theta): E_pi[k3] = KL(pi || ref), and the
    expected gradient of k3 through log pi (tokens held fixed, as the loss does) = grad KL(ref || pi)."""
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.randn(5, generator=g, dtype=torch.float64), 0)
    logp = torch.log_softmax(theta, 0)
    p = logp.exp().detach()
    k3 = k3_kl(logp, ref)  # k3 of each outcome a
    reverse = (logp.exp() * (logp - ref)).sum()
    forward = (ref.exp() * (ref - logp)).sum()
    assert float((p * k3).sum()) == pytest.approx(float(reverse), rel=1e-12)
    (grad_k3,) = torch.autograd.grad((p * k3).sum(), theta, retain_graph=True)  # sampling weights p held fixed
    (grad_fwd,) = torch.autograd.grad(forward, theta, retain_graph=True)
    (grad_rev,) = torch.autograd.grad(reverse, theta)
    torch.testing.assert_close(grad_k3, grad_fwd, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(grad_k3, grad_rev, rtol=1e-3, atol=1e-6)


def test_dr_grpo_aggregation_divides_token_sums_by_a_constant():
    masks = [[0, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]]
    w = token_weights(masks, "seq_mean_token_sum_norm", norm_tokens=8)
    # 2 sequences with action tokens: every action token weighs 1 / (2 * 8), whatever its sequence's length
    assert w == [[0, 1 / 16, 1 / 16, 1 / 16], [1 / 16, 0, 0, 0], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match="norm_tokens"):
        token_weights(masks, "seq_mean_token_sum_norm")


def _tiny_causal_lm(kind: str):
    """A tiny random model of an architecture whose forward transforms the LM head's logits."""
    import transformers as tf

    common = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)
    if kind == "gemma2":
        cfg = tf.Gemma2Config(**common, head_dim=8, final_logit_softcapping=0.5)  # a small cap really bends
        model = tf.Gemma2ForCausalLM(cfg)
    elif kind == "granite":
        cfg = tf.GraniteConfig(**common, logits_scaling=0.05)
        model = tf.GraniteForCausalLM(cfg)
    else:
        cfg = tf.CohereConfig(**common, logit_scale=8.0)
        model = tf.CohereForCausalLM(cfg)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return model.eval()


@pytest.mark.parametrize("kind", ["gemma2", "granite", "cohere"])
def test_token_logprobs_apply_the_architectures_logit_transform(kind):
    model = _tiny_causal_lm(kind)
    ids = torch.randint(0, 300, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = torch.log_softmax(model(ids).logits.float() / 0.7, -1)
    want = full[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    for chunk in (3, 1024):
        lp = token_logprobs(model, ids, temperature=0.7, chunk_size=chunk, share_prefix=False)
        torch.testing.assert_close(lp[:, 1:], want, atol=2e-5, rtol=1e-5)
    # gradients flow through the transform too (the soft-cap takes the autograd path)
    model.zero_grad()
    token_logprobs(model, ids, temperature=0.7)[:, 1:].sum().backward()
    model2 = _tiny_causal_lm(kind)
    model2(ids).logits.float().div(0.7).log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).sum().backward()
    head, head2 = model.get_output_embeddings().weight, model2.get_output_embeddings().weight
    torch.testing.assert_close(head.grad, head2.grad, atol=1e-4, rtol=1e-4)


def test_token_logprobs_refuse_a_model_with_an_unknown_logit_transform():
    model = _tiny_llama()
    real_forward = model.forward

    def scaled_forward(*args, **kwargs):
        out = real_forward(*args, **kwargs)
        out.logits = out.logits * 3.0  # a transform the config does not declare
        return out

    model.forward = scaled_forward
    with pytest.raises(TypeError, match="transforms its LM head"):
        token_logprobs(model, torch.randint(0, 300, (1, 9)))
