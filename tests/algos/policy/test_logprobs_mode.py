"""``OpenAIPolicy.connect`` asks a server which logprobs it returns, and warns in one line, naming vLLM's
``--logprobs-mode processed_logprobs``, when they are raw (before temperature and top-k/top-p): a user's vLLM
started without that flag would otherwise skew the rollout correction silently.

Fast: the bundled reference server (processed logprobs, as it samples), and the same server over a policy that
records raw logprobs the way vLLM's default ``raw_logprobs`` mode defines them (the model's log-softmax at
temperature 1, untruncated). Slow: the real vLLM CPU build (``.venv-vllm``) started with and without the flag.
"""

from __future__ import annotations

import logging

import pytest
import torch
from helpers import save_model_dir

from agentrl.algos.models import load_model, tiny_model
from agentrl.algos.policy.base import Policy
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.algos.policy.server import serve_policy

FLAG = "--logprobs-mode processed_logprobs"


class RawLogprobs(Policy):
    """Samples as ``inner`` does but records each sampled token's logprob under the model's untempered,
    untruncated distribution: what vLLM returns in its default ``raw_logprobs`` mode."""

    def __init__(self, inner: HFPolicy):
        self.inner = inner

    def generate(self, requests, sampling):
        results = self.inner.generate(requests, sampling)
        for req, res in zip(requests, results, strict=True):
            ids = torch.tensor([list(req.prompt_ids) + list(res.token_ids)])
            with torch.no_grad():
                logp = torch.log_softmax(self.inner.model(ids).logits[0].float(), dim=-1)
            start = len(req.prompt_ids) - 1
            res.logprobs = [float(logp[start + i, t]) for i, t in enumerate(res.token_ids)]
        return results


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    return save_model_dir(tmp_path_factory.mktemp("tiny"), tiny_model(tokenizer, hidden_size=128), tokenizer)


def _connect(url, tokenizer, caplog):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentrl.algos.policy.openai"):
        policy = OpenAIPolicy.connect(url, tokenizer)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return policy, warnings


def test_a_server_returning_the_sampled_distribution_s_logprobs_passes(model_dir, tokenizer, caplog):
    model, tok = load_model(str(model_dir), dtype="fp32", device="cpu")
    with serve_policy(HFPolicy(model, tok), model_name="tiny") as srv:
        policy, warnings = _connect(srv.url, tokenizer, caplog)
        try:
            assert policy.raw_logprobs is False and warnings == []
            assert policy.logprobs_mode() == "processed"
        finally:
            policy.close()


def test_a_server_returning_raw_logprobs_gets_a_one_line_warning_naming_the_flag(model_dir, tokenizer, caplog):
    model, tok = load_model(str(model_dir), dtype="fp32", device="cpu")
    with serve_policy(RawLogprobs(HFPolicy(model, tok)), model_name="tiny") as srv:
        policy, warnings = _connect(srv.url, tokenizer, caplog)
        try:
            assert policy.raw_logprobs is True and policy.logprobs_mode() == "raw"
            [line] = warnings
            assert FLAG in line and srv.url in line and "\n" not in line
        finally:
            policy.close()
        quiet = OpenAIPolicy.connect(srv.url, tokenizer, check_logprobs=False)
        assert quiet.raw_logprobs is None  # not asked
        quiet.close()


def test_a_server_that_cannot_answer_the_probe_is_not_judged(tokenizer, caplog):
    policy = OpenAIPolicy("http://127.0.0.1:9", "m", tokenizer)  # nothing listens on port 9
    policy.PROBE_TIMEOUT_S = 5.0
    with caplog.at_level(logging.WARNING, logger="agentrl.algos.policy.openai"):
        assert policy.check_logprobs_mode() is None
    assert policy.raw_logprobs is False and not caplog.records
    policy.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["processed_logprobs", "raw_logprobs"])
def test_the_real_vllm_with_and_without_the_flag(model_dir, tokenizer, caplog, tmp_path, mode):
    from agentrl.algos.policy.engine import VLLMEngine

    # The engine passes --logprobs-mode processed_logprobs; a later flag wins (argparse), as on a user's command line.
    with VLLMEngine(model_dir, served_model_name="tiny", dtype="fp32", log_path=tmp_path / "vllm.log",
                    extra_args=["--logprobs-mode", mode], startup_timeout_s=600) as engine:
        policy, warnings = _connect(engine.url, tokenizer, caplog)
        try:
            if mode == "raw_logprobs":
                assert policy.raw_logprobs is True and len(warnings) == 1 and FLAG in warnings[0]
            else:
                assert policy.raw_logprobs is False and warnings == []
        finally:
            policy.close()
