"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (``serve_policy`` wrapping the HF backend)."""

from __future__ import annotations

import pytest
import requests
import torch
from helpers import EchoEnv, echo_tasks, stop_biased_model

from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.algos.policy.server import serve_policy
from agentrl.algos.rollout.collector import CollectorConfig, collect


@pytest.fixture(scope="module")
def model(tokenizer):
    return stop_biased_model(tokenizer, seed=0)


@pytest.fixture
def server(model, tokenizer):
    with serve_policy(HFPolicy(model, tokenizer), model_name="tiny") as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        yield srv


def test_remote_generation_equals_local(server, model, tokenizer):
    remote = OpenAIPolicy(server.url, "tiny", tokenizer)
    local = HFPolicy(model, tokenizer)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("one two", "three four five")]
    for sp in (SamplingParams(temperature=0.0, stop_token_ids=(2,)), SamplingParams(temperature=0.8, top_k=50)):
        reqs = [GenerationRequest(p, 12, seed=9 + i) for i, p in enumerate(prompts)]
        got, want = remote.generate(reqs, sp), local.generate(reqs, sp)
        for g, w in zip(got, want, strict=True):
            assert g.token_ids == w.token_ids and g.finish_reason == w.finish_reason
            assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-5)
    remote.close()


@pytest.mark.parametrize("continuous", [True, False])
def test_collect_through_the_server_matches_the_local_backend(server, model, tokenizer, continuous):
    """Whether each next turn is posted as soon as its env answers (continuous) or by rounds."""
    cfg = CollectorConfig(max_new_tokens=16, temperature=1.0, seed=4, continuous=continuous)
    remote = collect(lambda: EchoEnv(turns=3), OpenAIPolicy(server.url, "tiny", tokenizer), echo_tasks(2), 2,
                     config=cfg)
    local = collect(lambda: EchoEnv(turns=3), HFPolicy(model, tokenizer), echo_tasks(2), 2, config=cfg)
    assert any(len(t.turns) > 1 for t in remote)
    for a, b in zip(remote, local, strict=True):
        assert a.token_ids == b.token_ids and a.loss_mask == b.loss_mask and a.termination == b.termination
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_server_speaks_the_completions_protocol(server, tokenizer):
    r = requests.get(f"{server.url}/v1/models", timeout=10)
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "tiny"
    body = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0, "logprobs": 0}
    r = requests.post(f"{server.url}/v1/completions", json=body, timeout=30)
    choice = r.json()["choices"][0]
    assert len(choice["token_ids"]) == len(choice["logprobs"]["token_logprobs"]) <= 3
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
    bad = requests.post(f"{server.url}/v1/completions", json={"model": "tiny", "prompt": "text"}, timeout=10)
    assert bad.status_code == 400 and "token ids" in bad.json()["error"]["message"]


def test_http_errors_surface_with_the_status(server, tokenizer):
    policy = OpenAIPolicy(server.url + "/nowhere", "tiny", tokenizer)
    with pytest.raises(RuntimeError, match="HTTP 404"):
        policy.generate([GenerationRequest([5, 6], 2)], SamplingParams())


def test_parse_choice_reads_both_token_id_shapes():
    with_ids = {"token_ids": [4, 2], "finish_reason": "stop", "logprobs": {"token_logprobs": [-0.5, -0.1]}}
    as_strings = {"finish_reason": "length",
                  "logprobs": {"tokens": ["token_id:4", "token_id:9"], "token_logprobs": [-0.5, -0.2]}}
    a = OpenAIPolicy.parse_choice(with_ids, [2])
    b = OpenAIPolicy.parse_choice(as_strings, [2])
    assert (a.token_ids, a.finish_reason) == ([4, 2], "stop")
    assert (b.token_ids, b.logprobs, b.finish_reason) == ([4, 9], [-0.5, -0.2], "length")
    with pytest.raises(RuntimeError, match="return-tokens-as-token-ids"):
        OpenAIPolicy.parse_choice({"logprobs": {"tokens": ["hi"], "token_logprobs": [-1.0]}}, [2])
    with pytest.raises(RuntimeError, match="logprobs"):
        OpenAIPolicy.parse_choice({"token_ids": [1, 2]}, [2])


def test_a_session_returns_replies_as_the_server_answers_them(tokenizer):
    """OpenAIPolicy's session posts each request when added; a step returns what has been answered so far."""
    import threading

    release = threading.Event()
    policy = OpenAIPolicy("http://127.0.0.1:9", "m", tokenizer)

    def post(body):  # the "server": a long request waits until the test lets it go
        if body["max_tokens"] > 1:
            assert release.wait(10)
        n = body["max_tokens"]
        return {"choices": [{"token_ids": [7] * n, "logprobs": {"token_logprobs": [-0.5] * n}}]}

    policy._post = post
    with policy.session(SamplingParams(temperature=1.0)) as s:
        long, short = s.add(GenerationRequest([1, 2], 5)), s.add(GenerationRequest([3], 1))
        assert s.join_ready(1) and s.pending == 2
        assert [t for t, _ in s.step()] == [short]  # answered while the long one is still out
        later = s.add(GenerationRequest([4], 1))
        assert [t for t, _ in s.step()] == [later]
        release.set()
        (ticket, result), = s.step()
        assert ticket == long and result.token_ids == [7] * 5 and s.pending == 0
    policy.close()
