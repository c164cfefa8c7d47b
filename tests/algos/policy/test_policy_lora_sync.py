"""LoRA weight sync to an OpenAI-compatible server: ``OpenAIPolicy.update_weights`` against the local reference
server (``serve_policy(..., enable_lora=True)``, vLLM's runtime LoRA endpoints) on 127.0.0.1."""

from __future__ import annotations

import pytest
import requests
import torch
from helpers import peft_copy, perturb_lora, served_models, two_prompts

from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.algos.policy.server import serve_policy


def _sample(policy, prompts, sp):
    return policy.generate([GenerationRequest(p, 10, seed=5 + i) for i, p in enumerate(prompts)], sp)


def _same(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.token_ids == w.token_ids
        torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-5, rtol=0)


SAMPLINGS = (SamplingParams(temperature=0.0, stop_token_ids=(2,)), SamplingParams(temperature=1.0))


@pytest.mark.parametrize("lora_api", ["vllm", "sglang"])
def test_update_weights_makes_the_server_sample_with_the_new_adapter(lora_server, base, tokenizer, tmp_path,
                                                                     lora_api):
    remote = OpenAIPolicy(lora_server.url, "tiny", tokenizer, adapter_dir=str(tmp_path), lora_api=lora_api,
                          run_id="run1", rank=0)
    prompts = two_prompts(tokenizer)
    base_local = HFPolicy(base, tokenizer)
    before = _sample(remote, prompts, SAMPLINGS[1])
    _same(before, _sample(base_local, prompts, SAMPLINGS[1]))

    trained = peft_copy(base, seed=1)
    remote.update_weights(trained)
    assert remote.version == 1 and remote.adapter_name == "tiny-run1-r0-v1"
    assert (tmp_path / "tiny-run1-r0-v1" / "adapter_config.json").is_file()
    listed = served_models(lora_server.url)
    assert listed == ["tiny", "tiny-run1-r0-v1"]
    # The server now samples with the adapter: tokens and logprobs are the local HF policy's with the same adapter,
    # and the logprobs of the base model's own samples have changed.
    for sp in SAMPLINGS:
        _same(_sample(remote, prompts, sp), _sample(HFPolicy(trained, tokenizer), prompts, sp))
    rescored = _sample(remote, prompts, SAMPLINGS[1])
    assert any(a.logprobs != b.logprobs for a, b in zip(rescored, before, strict=True))

    # A second update: a new name, the previous adapter unloaded and its folder removed.
    perturb_lora(trained, seed=2)
    remote.update_weights(trained)
    assert remote.version == 2 and remote.adapter_name == "tiny-run1-r0-v2"
    listed = served_models(lora_server.url)
    assert listed == ["tiny", "tiny-run1-r0-v2"]
    assert not (tmp_path / "tiny-run1-r0-v1").exists()
    for sp in SAMPLINGS:
        _same(_sample(remote, prompts, sp), _sample(HFPolicy(trained, tokenizer), prompts, sp))
    old = requests.post(f"{lora_server.url}/v1/completions", timeout=30,
                        json={"model": "tiny-run1-r0-v1", "prompt": [5, 6], "max_tokens": 2, "logprobs": 0})
    assert old.status_code == 404 and "does not exist" in old.json()["error"]["message"]
    remote.close()


def test_lora_endpoints_answer_like_vllm(lora_server, base, tmp_path):
    path = tmp_path / "a"
    peft_copy(base, seed=3).save_pretrained(str(path))
    url = f"{lora_server.url}/v1/load_lora_adapter"
    r = requests.post(url, json={"lora_name": "a", "lora_path": str(path)}, timeout=30)
    assert r.status_code == 200 and "added successfully" in r.text
    again = requests.post(url, json={"lora_name": "a", "lora_path": str(path)}, timeout=30)
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
    missing = requests.post(url, json={"lora_name": "b", "lora_path": str(tmp_path / "none")}, timeout=30)
    assert missing.status_code == 400 and "adapter_config.json" in missing.json()["error"]["message"]
    r = requests.post(f"{lora_server.url}/v1/unload_lora_adapter", json={"lora_name": "a"}, timeout=30)
    assert r.status_code == 200 and "removed" in r.text
    r = requests.post(f"{lora_server.url}/v1/unload_lora_adapter", json={"lora_name": "a"}, timeout=30)
    assert r.status_code == 404


def test_a_server_without_runtime_lora_gets_a_clear_error(base, tokenizer, tmp_path):
    with serve_policy(HFPolicy(base, tokenizer), model_name="tiny") as srv:
        remote = OpenAIPolicy(srv.url, "tiny", tokenizer, adapter_dir=str(tmp_path))
        with pytest.raises(RuntimeError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
            remote.update_weights(peft_copy(base, seed=1))
        assert remote.version == 0 and remote.model_name == "tiny"  # still samples the base model
        with pytest.raises(TypeError, match="PEFT"):
            remote.update_weights(base)
        remote.close()
