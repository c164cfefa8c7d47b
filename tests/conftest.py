"""Fixtures shared by several test modules (plain helpers are in helpers.py)."""

from __future__ import annotations

import pytest
from helpers import TEMPLATES, make_template_tokenizer


@pytest.fixture(scope="session")
def smol_tokenizer():
    from agentrl.algos.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def template_tokenizers(smol_tokenizer):
    return {kind: make_template_tokenizer(smol_tokenizer, kind) for kind in TEMPLATES}


@pytest.fixture(scope="module")
def tokenizer():
    from agentrl.algos.models import load_tokenizer

    return load_tokenizer()
