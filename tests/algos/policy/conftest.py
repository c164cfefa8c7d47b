"""Fixtures of the policy tests: a tiny model whose replies end now and then, served with LoRA hot-swap."""

from __future__ import annotations

import pytest
from helpers import stop_biased_model

from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.policy.server import serve_policy


@pytest.fixture(scope="module")
def base(tokenizer):
    return stop_biased_model(tokenizer, seed=0)


@pytest.fixture
def lora_server(base, tokenizer):
    """The reference server (``serve_policy``) on 127.0.0.1 for ``base``, named "tiny", with runtime LoRA."""
    with serve_policy(HFPolicy(base, tokenizer), model_name="tiny", enable_lora=True) as srv:
        yield srv
