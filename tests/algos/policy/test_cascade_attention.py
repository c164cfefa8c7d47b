"""Shared-prefix (cascade) attention in HFPolicy: the attention function against SDPA over the concatenated keys,
and HFPolicy decoding with ``cascade=True`` against ``cascade=False`` (same tokens, same logprobs) over several
turns, groups, rows of different cached lengths, calls without a common prefix, and several model families."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import stop_biased_model

from agentrl.algos.policy import _cascade
from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.hf import HFPolicy

# ------------------------------------------------------------------------------------ the attention function


def _reference(query, prefix_k, prefix_v, key, value, allowed, scale):
    """SDPA (math, fp32) over [prefix; suffix] with K/V repeated per query head: the plain definition."""
    b, h = query.shape[:2]
    g = h // key.shape[1]
    k = torch.cat([prefix_k.expand(b, -1, -1, -1), key], 2).float().repeat_interleave(g, 1)
    v = torch.cat([prefix_v.expand(b, -1, -1, -1), value], 2).float().repeat_interleave(g, 1)
    mask = torch.cat([torch.ones(*allowed.shape[:-1], prefix_k.shape[2], dtype=torch.bool), allowed], -1)
    out = F.scaled_dot_product_attention(query.float(), k, v, attn_mask=mask, scale=scale)
    return out.transpose(1, 2)  # [B, Lq, H, D]


def _case(q_len, dtype, seed=0):
    """Random queries/keys with left padding, a padded query row, GQA (6 query heads on 2 KV heads)."""
    g = torch.Generator().manual_seed(seed)
    b, h, hkv, d, p, s = 3, 6, 2, 16, 40, 12
    query = torch.randn(b, h, q_len, d, generator=g).to(dtype)
    key, value = (torch.randn(b, hkv, s, d, generator=g).to(dtype) for _ in range(2))
    prefix_k, prefix_v = (torch.randn(1, hkv, p, d, generator=g).to(dtype) for _ in range(2))
    mask2d = torch.ones(b, s, dtype=torch.long)
    mask2d[1, :5] = 0  # row 1: left padding
    mask2d[2, : s - q_len] = 0  # row 2: no cached suffix at all
    if q_len > 1:
        mask2d[2, s - q_len] = 0  # ... and its first query is padding: it may attend to no suffix key
    state = _cascade.CascadeState(_cascade.Prefix(tuple(range(p)), [(prefix_k, prefix_v)]))
    state.set_mask(mask2d)
    add, any_key = state.suffix_mask(q_len, h // hkv, dtype)
    col = torch.arange(s)
    causal = col[None, :] <= (s - q_len + torch.arange(q_len))[:, None]
    allowed = (mask2d.bool()[:, None, None, :] & causal[None, None]).expand(b, h, q_len, s)
    return query, key, value, prefix_k, prefix_v, add, any_key, allowed, d ** -0.5


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("q_len", [1, 5])
def test_cascade_attention_equals_sdpa_fp32(q_len, fused):
    query, key, value, pk, pv, add, any_key, allowed, scale = _case(q_len, torch.float32)
    if q_len > 1:
        assert not any_key.all()  # the case includes a query with no suffix key (prefix only)
    out = _cascade.attend_parts(query, key, value, pk, pv, add, any_key, scale, fused=fused)
    ref = _reference(query, pk, pv, key, value, allowed, scale)
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("q_len", [1, 5])
def test_cascade_attention_bf16_within_bf16_rounding(q_len):
    query, key, value, pk, pv, add, any_key, allowed, scale = _case(q_len, torch.bfloat16, seed=1)
    out = _cascade.attend_parts(query, key, value, pk, pv, add, any_key, scale)
    ref = _reference(query, pk, pv, key, value, allowed, scale)  # fp32 math on the same bf16 inputs
    assert out.dtype == torch.bfloat16
    # bf16 keeps 8 significant bits: outputs of magnitude <= ~1.5 round by <= ~4e-3 each, a few roundings add up
    err = (out.float() - ref).abs().max().item()
    assert err < 2e-2
    # and is of the order of SDPA's own bf16 error on the concatenated keys
    b, h = query.shape[:2]
    g = h // key.shape[1]
    k = torch.cat([pk.expand(b, -1, -1, -1), key], 2).repeat_interleave(g, 1)
    v = torch.cat([pv.expand(b, -1, -1, -1), value], 2).repeat_interleave(g, 1)
    mask = torch.cat([torch.ones(*allowed.shape[:-1], pk.shape[2], dtype=torch.bool), allowed], -1)
    sdpa = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=scale).transpose(1, 2)
    assert err <= 4 * (sdpa.float() - ref).abs().max().item() + 4e-3


# ------------------------------------------------------------------------------------ HFPolicy decoding

SYSTEM = ("You are a careful assistant with tools. Call one tool at a time, read its result, then answer. "
          "Tools: add(a, b), multiply(a, b), lookup(name). Reply 'Answer: <answer>' when done.\n")


@pytest.fixture(scope="module")
def model(tokenizer):
    return stop_biased_model(tokenizer)


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _run(policy, requests, sp):
    for i, r in enumerate(requests):
        r.seed = 1000 + i  # sampling at T > 0 is seeded per request: both policies draw the same numbers
    return [(r.token_ids, r.logprobs) for r in policy.generate(requests, sp)]


def _same(a, b, atol=1e-4):
    assert len(a) == len(b)
    for (ta, la), (tb, lb) in zip(a, b, strict=True):
        assert ta == tb
        torch.testing.assert_close(torch.tensor(la), torch.tensor(lb), atol=atol, rtol=0)


def _conversation(tok, policies, sp):
    """Four calls on each policy: groups, follow-up turns with different cached lengths and a new row, a call
    with no common prefix, and a shared-prefix call again; returns per policy the results of every call."""
    system = _ids(tok, SYSTEM)
    assert len(system) >= _cascade.MIN_PREFIX + 16
    users = [_ids(tok, f"Question {i}: " + "what is 7 plus 4? " * (i + 1)) for i in range(3)]
    glue = _ids(tok, "\n<tool>result: 42</tool>\n")
    first = [system + users[0], system + users[0], system + users[1], system + users[2]]  # a group of two
    runs = {}
    for name, policy in policies.items():
        out = [_run(policy, [GenerationRequest(p, 12, key=f"t{i}") for i, p in enumerate(first)], sp)]
        # turn 2: three of the four trajectories (their caches differ in length) plus a new, uncached one
        second = [first[i] + out[0][i][0] + glue for i in (0, 2, 3)] + [system + users[1] + glue]
        keys = ["t0", "t2", "t3", "t4"]
        assert len({len(p) for p in second}) >= 3  # rows of different cached lengths
        out.append(_run(policy, [GenerationRequest(p, 10, key=k) for p, k in zip(second, keys, strict=True)], sp))
        # no common prefix: a trajectory with a cached shared prefix and an unrelated prompt
        third = [second[0] + out[1][0][0] + glue, _ids(tok, "Unrelated prompt about the weather " * 3)]
        out.append(_run(policy, [GenerationRequest(third[0], 8, key="t0"), GenerationRequest(third[1], 8, key="u")],
                        sp))
        # shared prefix again, one row cached without it (from the fallback call), one cut back mid-suffix
        fourth = [third[0] + out[2][0][0] + glue, second[1] + out[1][1][0][:1] + glue]
        out.append(_run(policy, [GenerationRequest(p, 8, key=k) for p, k in zip(fourth, ["t0", "t2"], strict=True)],
                        sp))
        runs[name] = out
    return runs


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cascade_decoding_equals_plain_decoding(tokenizer, model, temperature):
    sp = SamplingParams(temperature=temperature, stop_token_ids=(tokenizer.convert_tokens_to_ids("<|im_end|>"),))
    policies = {"cascade": HFPolicy(model, tokenizer, cascade=True),
                "plain": HFPolicy(model, tokenizer, cascade=False)}
    runs = _conversation(tokenizer, policies, sp)
    for call_c, call_p in zip(runs["cascade"], runs["plain"], strict=True):
        _same(call_c, call_p)
    assert policies["cascade"].stats["shared_prefix_calls"] == 3  # the unrelated call fell back
    assert policies["plain"].stats["shared_prefix_calls"] == 0
    assert policies["cascade"].stats["prefill_tokens"] < policies["plain"].stats["prefill_tokens"]
    assert model.config._attn_implementation != _cascade.NAME  # restored after each call


def test_stored_caches_share_the_prefix(tokenizer, model):
    sp = SamplingParams(temperature=0.0)
    system = _ids(tokenizer, SYSTEM)
    prompts = [system + _ids(tokenizer, f"Question {i}?") for i in range(4)]
    policy = HFPolicy(model, tokenizer)
    policy.generate([GenerationRequest(p, 6, key=i) for i, p in enumerate(prompts)], sp)
    entries = [policy._cache[i] for i in range(4)]
    prefix = entries[0].prefix
    assert prefix is not None and all(e.prefix is prefix for e in entries)  # one copy, referenced by all
    assert list(prefix.tokens) == prompts[0][: len(prefix)] and len(prefix) >= len(system) - 1
    for e in entries:  # each trajectory keeps only the keys/values after the prefix
        assert e.kv[0][0].shape[2] == len(e.tokens) - len(prefix)
        assert policy.cached_tokens(next(k for k, v in policy._cache.items() if v is e)) == len(e.tokens)


def test_activate_restores_the_attention_implementation(tokenizer, model):
    before = model.config._attn_implementation
    prefix = _cascade.Prefix((1, 2), [])
    with pytest.raises(ValueError), _cascade.activate(model, prefix):
        assert model.config._attn_implementation == _cascade.NAME
        raise ValueError("boom")
    assert model.config._attn_implementation == before
    with pytest.raises(RuntimeError, match="outside"):  # the function refuses to run without a state
        _cascade.cascade_attention(model.model.layers[0].self_attn, *([torch.zeros(1, 4, 1, 16)] * 3), None)


def _family_model(tok, family, **extra):
    import transformers

    cfg_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[family]
    kw = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True,
              pad_token_id=tok.pad_token_id)
    kw.update(extra)
    torch.manual_seed(0)
    model = model_cls(cfg_cls(**kw)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    return model


@pytest.mark.parametrize(("family", "extra", "shares"), [
    ("llama", {"num_key_value_heads": 4}, True),  # no GQA
    ("qwen2", {}, True),
    ("qwen3", {}, True),
    ("mistral", {"sliding_window": None}, True),
    ("mistral", {"sliding_window": 4096}, False),  # sliding window: decodes without a shared prefix
])
def test_model_families(tokenizer, family, extra, shares):
    model = _family_model(tokenizer, family, **extra)
    assert _cascade.supported(model) == shares
    sp = SamplingParams(temperature=0.0)
    system = _ids(tokenizer, SYSTEM)
    prompts = [system + _ids(tokenizer, f"Question {i}?") for i in range(3)]
    results = {}
    for cascade in (True, False):
        policy = HFPolicy(model, tokenizer, cascade=cascade)
        first = _run(policy, [GenerationRequest(p, 6, key=i) for i, p in enumerate(prompts)], sp)
        again = [p + t + _ids(tokenizer, " ok.") for p, (t, _) in zip(prompts, first, strict=True)]
        second = _run(policy, [GenerationRequest(p, 6, key=i) for i, p in enumerate(again)], sp)
        results[cascade] = (first, second, policy.stats["shared_prefix_calls"])
    _same(results[True][0], results[False][0])
    _same(results[True][1], results[False][1])
    assert results[True][2] == (2 if shares else 0)
