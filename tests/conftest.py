"""Fixtures and markers shared by several test modules (plain helpers are in helpers.py).

``@pytest.mark.needs_bwrap`` skips a test (with the reason) where bubblewrap is not installed.

The library finds vLLM's python without knowing where the checkout is (``find_engine_python``: the working
directory's ``.venv-vllm``, among others); the tests know, so ``$AGENTRL_VLLM_PYTHON`` names the checkout's
``.venv-vllm`` when it exists, for tests (and their subprocesses) that run in another directory.
"""

from __future__ import annotations

import os

import pytest
from helpers import ROOT, TEMPLATES, make_template_tokenizer, save_model_dir

from agentrl.algos.policy.engine import VLLM_PYTHON_ENV, VLLM_VENV

if (ROOT / VLLM_VENV / "bin" / "python").is_file():
    os.environ.setdefault(VLLM_PYTHON_ENV, str(ROOT / VLLM_VENV / "bin" / "python"))


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_bwrap: the test runs code in the bubblewrap sandbox (skipped "
                                       "where bwrap is missing)")


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_bwrap") is not None:
        from agentrl.envs.sandbox.bwrap import bwrap_available

        if not bwrap_available():
            pytest.skip("needs bubblewrap (apt-get install -y bubblewrap)")


@pytest.fixture(scope="session")
def tokenizer():
    """The default tokenizer (SmolLM2's), loaded once per session."""
    from agentrl.algos.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, tokenizer):
    """A random-init tiny model (hidden size 32) with the real tokenizer, saved as a model folder."""
    from agentrl.algos.models import tiny_model

    return save_model_dir(tmp_path_factory.mktemp("tiny"), tiny_model(tokenizer, hidden_size=32), tokenizer)


@pytest.fixture(scope="session")
def template_tokenizers(tokenizer):
    return {kind: make_template_tokenizer(tokenizer, kind) for kind in TEMPLATES}


@pytest.fixture(scope="module")
def sb():
    """A small two-worker sandbox with a 5 s default timeout."""
    from agentrl.envs import Sandbox
    from agentrl.envs.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("needs bubblewrap (apt-get install -y bubblewrap)")
    with Sandbox(max_concurrency=2, timeout_s=5) as s:
        yield s


@pytest.fixture
def no_loading(monkeypatch):
    """Loading a model or starting a training run fails the test: the errors must come before either."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the error")

    # the package's names too (what the examples import), patched first: agentrl.algos resolves them lazily from
    # agentrl.algos.models, so patching that first would make the package's "old" value the refusal, and undo
    # would leave it in place for every later test
    for where in ("agentrl.algos", "agentrl.algos.models"):
        monkeypatch.setattr(f"{where}.load_model", refuse)
        monkeypatch.setattr(f"{where}.load_tokenizer", refuse)
    monkeypatch.setattr("agentrl.algos.training.launch.train", refuse)


@pytest.fixture
def held(tmp_path):
    """A live process that holds ``tmp_path/run`` as ``agentrl main-job --out RUN`` would: ``(run, process)``."""
    from helpers import hold_run

    run = tmp_path / "run"
    proc = hold_run(run)
    try:
        yield run, proc
    finally:
        proc.kill()
        proc.wait()
