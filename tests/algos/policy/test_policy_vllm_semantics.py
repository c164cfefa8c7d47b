"""What a real vLLM server does that the reference server (``serve_policy``) now does too, and what
``OpenAIPolicy`` must do about it: adapter names unique to a run and rank (vLLM refuses to load a name twice),
requests that state the whole sampling distribution (vLLM fills omitted settings from the model's
generation_config.json), and logprobs of the distribution actually sampled from (top-k/top-p included)."""

from __future__ import annotations

import pytest
import requests
import torch
from helpers import peft_copy, served_models, two_prompts

from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.algos.policy.sampling import sample_tokens
from agentrl.algos.policy.server import serve_policy


def test_adapter_names_never_repeat_across_runs_resumes_and_ranks(lora_server, base, tokenizer, tmp_path):
    """eval --adapter, then train, then a resumed train, then two data-parallel ranks: one server, no name twice
    (before, each counted '<model>-lora-v1', '-v2', ... from 0 and the second load was answered HTTP 400)."""
    folder = tmp_path / "user-adapter"
    peft_copy(base, seed=3).save_pretrained(str(folder))
    evaluated = OpenAIPolicy(lora_server.url, "tiny", tokenizer)
    evaluated.use_adapter(folder)  # agentrl eval --adapter
    evaluated.close()  # unloads it: the server serves what it served before

    trained = peft_copy(base, seed=1)
    names = []
    for _run in range(2):  # a run, then the same run resumed: a new process, a new policy object
        policy = OpenAIPolicy(lora_server.url, "tiny", tokenizer, adapter_dir=str(tmp_path / "a"))
        for _ in range(2):
            policy.update_weights(trained)
            names.append(policy.adapter_name)
        policy.close()
    ranks = [OpenAIPolicy(lora_server.url, "tiny", tokenizer, adapter_dir=str(tmp_path / "a"), run_id="same", rank=r)
             for r in (0, 1)]
    for policy in ranks:  # even with one run id, the rank tells them apart
        policy.update_weights(trained)
        names.append(policy.adapter_name)
    assert names[4:] == ["tiny-same-r0-v1", "tiny-same-r1-v1"]
    assert len(set(names)) == len(names) and evaluated.adapter_name not in names
    assert sorted(served_models(lora_server.url)[1:]) == sorted(names[4:])  # the closed policies unloaded theirs
    # each policy samples with its own adapter
    req = [GenerationRequest(two_prompts(tokenizer)[0], 6, seed=1)]
    assert ranks[1].generate(req, SamplingParams(temperature=0.0))[0].token_ids == \
        HFPolicy(trained, tokenizer).generate(req, SamplingParams(temperature=0.0))[0].token_ids


def test_the_rank_comes_from_the_launcher(tokenizer, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    policy = OpenAIPolicy("http://127.0.0.1:9", "m", tokenizer)
    assert policy.adapter_prefix == f"m-{policy.run_id}-r3" and len(policy.run_id) == 8
    assert OpenAIPolicy("http://127.0.0.1:9", "m", tokenizer).run_id != policy.run_id


# ---------------------------------------------------------------------------------------------- sampling settings


def test_requests_state_the_whole_distribution(base, tokenizer):
    """A server whose generation config says top_k=1 (as Qwen2.5's says top_k=20) must not apply it to a request
    that means top_k off: the server's samples are the local backend's."""
    with serve_policy(HFPolicy(base, tokenizer), model_name="tiny", sampling_defaults={"top_k": 1}) as srv:
        remote = OpenAIPolicy(srv.url, "tiny", tokenizer)
        local = HFPolicy(base, tokenizer)
        reqs = [GenerationRequest(p, 12, seed=9 + i) for i, p in enumerate(two_prompts(tokenizer))]
        for sp in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.9, top_p=0.8),
                   SamplingParams(temperature=1.0, top_k=5)):
            got, want = remote.generate(reqs, sp), local.generate(reqs, sp)
            for g, w in zip(got, want, strict=True):
                assert g.token_ids == w.token_ids
                torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-5, rtol=0)
        # what goes over the wire: every setting, neutral where SamplingParams has none
        body = remote._payload(reqs[0], SamplingParams(temperature=0.7))
        assert {k: body[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                     "presence_penalty", "frequency_penalty")} == {
            "temperature": 0.7, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0}
        # a bare request does get the server's default (top_k=1: the argmax)
        bare = requests.post(f"{srv.url}/v1/completions", timeout=30, json={
            "model": "tiny", "prompt": reqs[0].prompt_ids, "max_tokens": 5, "temperature": 1.0, "seed": 3})
        greedy = local.generate([GenerationRequest(reqs[0].prompt_ids, 5)], SamplingParams(temperature=0.0))[0]
        assert bare.json()["choices"][0]["token_ids"] == greedy.token_ids
        remote.close()


def test_settings_a_backend_cannot_sample_are_refused(base, tokenizer):
    with serve_policy(HFPolicy(base, tokenizer), model_name="tiny",
                      sampling_defaults={"repetition_penalty": 1.05}) as srv:
        remote = OpenAIPolicy(srv.url, "tiny", tokenizer)
        req = GenerationRequest(two_prompts(tokenizer)[0], 3, seed=1)
        assert len(remote.generate([req], SamplingParams())[0].token_ids) <= 3  # neutral penalty sent: served
        r = requests.post(f"{srv.url}/v1/completions", timeout=30, json={"model": "tiny", "prompt": [5, 6],
                                                                          "max_tokens": 2})
        assert r.status_code == 400 and "repetition_penalty=1.05" in r.json()["error"]["message"]
        r = requests.post(f"{srv.url}/v1/completions", timeout=30, json={
            "model": "tiny", "prompt": [5, 6], "max_tokens": 2, "min_p": 0.1, "repetition_penalty": 1.0})
        assert r.status_code == 400 and "min_p=0.1" in r.json()["error"]["message"]
        with pytest.raises(ValueError, match="greedy on vLLM"):
            remote.generate([req], SamplingParams(temperature=1e-6))
        remote.close()
    with pytest.raises(ValueError, match="unknown settings"):
        serve_policy(HFPolicy(base, tokenizer), sampling_defaults={"typical_p": 0.9})
    for bad in ({"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -2}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    assert SamplingParams(top_k=-1).top_k == 0  # vLLM's and SGLang's "off"


# ---------------------------------------------------------------------------------------------- logprobs


def test_logprobs_are_those_of_the_distribution_sampled_from():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 40, generator=g) * 3
    gens = [torch.Generator().manual_seed(i) for i in range(64)]
    for sp in (SamplingParams(temperature=0.7), SamplingParams(temperature=1.0, top_k=5),
               SamplingParams(temperature=0.8, top_p=0.6), SamplingParams(temperature=1.3, top_k=8, top_p=0.9)):
        tokens, lps = sample_tokens(logits, sp, gens)
        scaled = logits / sp.temperature
        probs = torch.softmax(scaled, -1)
        if sp.top_k:
            probs = torch.where(scaled >= scaled.topk(sp.top_k, -1).values[:, -1:], probs, 0.0)
            probs = probs / probs.sum(-1, keepdim=True)
        if sp.top_p < 1:  # keep a token when the mass of the more likely ones is below top_p
            above = (probs[:, None, :] > probs[:, :, None]).float() @ probs[:, :, None]
            probs = torch.where(above[..., 0] < sp.top_p, probs, 0.0)
            probs = probs / probs.sum(-1, keepdim=True)
        expected = probs.gather(-1, tokens[:, None])[:, 0]
        assert (expected > 0).all()  # never a truncated token
        torch.testing.assert_close(lps, expected.log(), atol=1e-5, rtol=0)
        if sp.top_k or sp.top_p < 1:  # the rule before: the full distribution's logprob, lower
            full = torch.log_softmax(scaled, -1).gather(-1, tokens[:, None])[:, 0]
            assert (lps - full > 1e-3).any()
    # greedy: the argmax, with its temperature-1 untruncated logprob (as vLLM's greedy requests)
    tokens, lps = sample_tokens(logits, SamplingParams(temperature=0.0, top_k=3, top_p=0.5), gens)
    assert torch.equal(tokens, logits.argmax(-1))
    torch.testing.assert_close(lps, torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0])


def test_hf_policy_records_the_truncated_distribution(base, tokenizer):
    """The recorded logprob of each sampled token, recomputed from one forward pass over the whole sequence."""
    prompt = two_prompts(tokenizer)[1]
    sp = SamplingParams(temperature=0.9, top_k=20, top_p=0.7)
    res = HFPolicy(base, tokenizer).generate([GenerationRequest(prompt, 8, seed=2)], sp)[0]
    ids = torch.tensor([prompt + res.token_ids])
    with torch.no_grad():
        logits = base(ids).logits[0, len(prompt) - 1:-1].float()
    filtered = logits / sp.temperature
    filtered = filtered.masked_fill(filtered < filtered.topk(sp.top_k, -1).values[:, -1:], float("-inf"))
    probs = torch.softmax(filtered, -1)
    srt, order = probs.sort(-1, descending=True)
    drop = torch.zeros_like(srt, dtype=torch.bool).scatter(-1, order, (srt.cumsum(-1) - srt) >= sp.top_p)
    want = torch.log_softmax(filtered.masked_fill(drop, float("-inf")), -1)
    want = want.gather(-1, torch.tensor(res.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(res.logprobs), want, atol=1e-4, rtol=0)
