"""The merge (``iter_merged_weights`` into ``HFPolicy``'s merged copy): layer by layer, the same weights as
the whole-dict merge, PEFT's function for DoRA and ``lora_bias``, clear refusals, and the shared-weights
policy."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.algos.models import tiny_model
from agentrl.algos.models.lora import (
    LoRAConfig,
    MergeError,
    apply_lora,
    iter_merged_weights,
    merged_state_dict,
)
from agentrl.algos.policy import hf as hf_module
from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.hf import HFPolicy


def _perturb(model, seed=0, scale=0.3):
    """Non-zero adapter weights (B matrices, DoRA magnitudes, LoRA biases), so every merge term matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def _llama(tokenizer, *, bias=False, tied=True, dtype=torch.float32, seed=0):
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                         attention_bias=bias, mlp_bias=bias, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(dtype).eval()


def _peft(base, **lora_kwargs):
    kwargs = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM")
    kwargs.update(lora_kwargs)
    return _perturb(get_peft_model(copy.deepcopy(base), LoraConfig(**kwargs)).eval())


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def _merged_copy_matches_peft(peft_model, tokenizer, atol):
    """The merged copy's logits equal the (unmerged) PEFT model's on a fixed input."""
    policy = HFPolicy(peft_model, tokenizer)
    ids = torch.arange(3, 40).view(1, -1)
    torch.testing.assert_close(_logits(policy.model, ids), _logits(peft_model, ids), atol=atol, rtol=0)
    return policy


def test_layer_by_layer_merged_copy_weights_equal_the_whole_dict_merge(tokenizer):
    #  bf16 base as on a GPU: the merged copy holds exactly the fp32 merge rounded once to bf16, i.e. today's
    # formula (w.float() + (B.float() @ A.float()) * scaling).to(bf16), bit for bit.
    base = tiny_model(tokenizer, hidden_size=32, num_layers=3, dtype=torch.bfloat16)
    peft_model = _perturb(apply_lora(copy.deepcopy(base), LoRAConfig(r=4, alpha=8)))
    policy = HFPolicy(peft_model, tokenizer)
    own = policy.model.state_dict()
    whole = merged_state_dict(peft_model)
    assert set(whole) == set(own)
    for name, p in own.items():
        assert torch.equal(p, whole[name].to(p.dtype)), name
    q = peft_model.get_base_model().model.layers[1].self_attn.q_proj
    a, b = q.lora_A["default"].weight.float(), q.lora_B["default"].weight.float()
    expected = (q.get_base_layer().weight.float() + (b @ a) * q.scaling["default"]).to(torch.bfloat16)
    assert torch.equal(own["model.layers.1.self_attn.q_proj.weight"], expected)
    assert not torch.equal(expected, q.get_base_layer().weight)  # the adapter did change the weight


def test_the_merge_streams_one_layer_at_a_time(tokenizer):
    """Each merged fp32 weight is freed before the next is made: at most one is alive while iterating."""
    import weakref

    peft_model = _perturb(apply_lora(tiny_model(tokenizer, hidden_size=32, num_layers=3), LoRAConfig(r=4)))
    lora_names = {n for n, _ in peft_model.get_base_model().named_modules() if hasattr(_, "lora_A")}
    alive: list[weakref.ref] = []
    most = 0
    for name, tensor in iter_merged_weights(peft_model):
        if name.rsplit(".", 1)[0] in lora_names:
            alive.append(weakref.ref(tensor))
        del tensor
        most = max(most, sum(r() is not None for r in alive))
    assert len(alive) == 3 * 7 and most == 1


def test_dora_adapters_merge_to_peft_function(tokenizer):
    peft_model = _peft(_llama(tokenizer), use_dora=True)
    _merged_copy_matches_peft(peft_model, tokenizer, atol=1e-5)


def test_lora_bias_is_merged_into_the_base_bias(tokenizer):
    peft_model = _peft(_llama(tokenizer, bias=True), lora_bias=True)
    policy = _merged_copy_matches_peft(peft_model, tokenizer, atol=1e-5)
    q = peft_model.get_base_model().model.layers[0].self_attn.q_proj
    assert not torch.equal(policy.model.state_dict()["model.layers.0.self_attn.q_proj.bias"],
                           q.get_base_layer().bias)


def test_lm_head_target_on_an_untied_model_is_merged(tokenizer):
    peft_model = _peft(_llama(tokenizer, tied=False), target_modules=["q_proj", "lm_head"])
    _merged_copy_matches_peft(peft_model, tokenizer, atol=1e-5)


def test_lm_head_target_on_tied_embeddings_is_refused_naming_the_option(tokenizer):
    with pytest.warns(UserWarning):  # PEFT itself warns about adapting a tied layer
        peft_model = _peft(_llama(tokenizer, tied=True), target_modules=["q_proj", "lm_head"])
    with pytest.raises(MergeError, match="target_modules includes 'lm_head'.*tie_word_embeddings"):
        HFPolicy(peft_model, tokenizer)


def test_lora_bias_without_a_base_bias_is_refused_before_any_weight_is_written(tokenizer):
    peft_model = _peft(_llama(tokenizer, bias=False), lora_bias=True)
    with pytest.raises(MergeError, match="lora_bias=True"):
        list(iter_merged_weights(peft_model))


def test_a_merged_copy_weight_left_unwritten_is_an_error_lm_head_included(tokenizer, monkeypatch):
    peft_model = _peft(_llama(tokenizer, tied=False))
    real = hf_module.iter_merged_weights
    monkeypatch.setattr(hf_module, "iter_merged_weights",
                        lambda m: ((k, v) for k, v in real(m) if k != "lm_head.weight"))
    with pytest.raises(RuntimeError, match="lack.*lm_head.weight"):
        HFPolicy(peft_model, tokenizer)


def test_shared_weights_policy_samples_what_the_merged_copy_samples(tokenizer):
    base = tiny_model(tokenizer, hidden_size=32)
    peft_model = _perturb(apply_lora(copy.deepcopy(base), LoRAConfig(r=4)), scale=0.1)
    merged = HFPolicy(peft_model, tokenizer)
    shared = HFPolicy(peft_model, tokenizer, share_weights=True)
    assert shared.model is peft_model.get_base_model() and merged.model is not peft_model.get_base_model()
    prompts = [tokenizer("one two", add_special_tokens=False)["input_ids"], [5, 6, 7, 8]]
    sp = SamplingParams(temperature=1.0)
    a = merged.generate([GenerationRequest(p, 6, seed=i) for i, p in enumerate(prompts)], sp)
    peft_model.train()  # a trainer may leave its model in train mode: sampling still runs without dropout
    b = shared.generate([GenerationRequest(p, 6, seed=i) for i, p in enumerate(prompts)], sp)
    assert peft_model.training
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)
    version = shared.version
    shared.update_weights(peft_model)
    assert shared.version == version + 1 and shared.model is peft_model.get_base_model()
