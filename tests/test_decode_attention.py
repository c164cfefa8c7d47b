"""algos.policy.decode_attention: the CPU decoding attention equals transformers' SDPA path."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from agentrl.algos.policy import DECODE_ATTENTION, decode_attention, use_decode_attention


class _Attn(torch.nn.Module):
    def __init__(self, heads, kv_heads):
        super().__init__()
        self.num_key_value_groups = heads // kv_heads
        self.is_causal = True


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("heads,kv_heads", [(9, 3), (4, 4)])
def test_decode_attention_matches_sdpa(dtype, tol, heads, kv_heads):
    g = torch.Generator().manual_seed(0)
    bsz, length, dim = 5, 37, 16
    q = torch.randn(bsz, heads, 1, dim, generator=g).to(dtype)
    # keys/values as the growing cache hands them: views into buffers with spare room
    kbuf = torch.randn(bsz, kv_heads, length + 8, dim, generator=g).to(dtype)
    vbuf = torch.randn(bsz, kv_heads, length + 8, dim, generator=g).to(dtype)
    k, v = kbuf[:, :, :length], vbuf[:, :, :length]
    mask = torch.ones(bsz, 1, 1, length, dtype=torch.bool)
    mask[0, ..., :10] = False  # left padding of a shorter row
    mask[3, ..., :1] = False
    module = _Attn(heads, kv_heads)
    with torch.no_grad():
        ours, _ = decode_attention(module, q, k, v, mask, scaling=dim**-0.5)
        ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=dim**-0.5)
        additive = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
        ours_additive, _ = decode_attention(module, q, k, v, additive, scaling=dim**-0.5)
    assert ours.shape == ref.shape == (bsz, 1, heads, dim)
    assert torch.allclose(ours.float(), ref.float(), atol=tol, rtol=tol)
    assert torch.allclose(ours_additive.float(), ref.float(), atol=tol, rtol=tol)


def test_decode_attention_leaves_prefill_and_training_to_sdpa():
    module = _Attn(4, 2)
    q = torch.randn(2, 4, 6, 8, requires_grad=True)  # 6 query tokens: prefill
    k, v = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    ours, _ = decode_attention(module, q, k, v, None, scaling=8**-0.5)
    ref, _ = sdpa_attention_forward(module, q, k, v, None, scaling=8**-0.5)
    assert torch.equal(ours, ref)
    ours.sum().backward()  # differentiable: it is SDPA
    assert q.grad is not None


def test_use_decode_attention_switches_a_cpu_model_and_keeps_its_outputs(smol_tokenizer):
    from agentrl.algos.models import tiny_model

    model = tiny_model(smol_tokenizer, seed=3)
    ids = torch.randint(0, 100, (2, 12))
    with torch.no_grad():
        before = model(ids, use_cache=True)
        nxt = model(ids[:, -1:] * 0 + 7, past_key_values=before.past_key_values, use_cache=True).logits
    assert use_decode_attention(model)
    assert model.config._attn_implementation == DECODE_ATTENTION
    with torch.no_grad():
        again = model(ids, use_cache=True)
        nxt2 = model(ids[:, -1:] * 0 + 7, past_key_values=again.past_key_values, use_cache=True).logits
    assert torch.allclose(before.logits, again.logits, atol=1e-5)
    assert torch.allclose(nxt, nxt2, atol=1e-5)
