"""The cache of de-quantized GGUF weights (agentrl.algos.models.gguf_cache): reuse, invalidation by file content
and dtype, damaged entries rebuilt, atomic writes, the opt-out. A tiny random model stands in for the GGUF's
weights (the builder), so these run in seconds; one slow test uses the real SmolLM2 GGUF."""

from __future__ import annotations

import hashlib
import logging
import os
import time

import pytest
import torch

from agentrl.algos import models
from agentrl.algos.models import gguf_cache, load_tokenizer, tiny_model


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(gguf_cache.NO_WEIGHT_CACHE_ENV, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def gguf(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + os.urandom(4096))
    return f


class Builder:
    """Counts its calls; each call returns the same tiny model (seeded) in the asked dtype."""

    def __init__(self, tok, dtype=torch.float32, seed=0):
        self.tok, self.dtype, self.seed, self.calls = tok, dtype, seed, 0

    def __call__(self):
        self.calls += 1
        model = tiny_model(self.tok, hidden_size=32, seed=self.seed, dtype=self.dtype)
        return model.train()  # cached_dense_model must hand it back in eval mode


def assert_same_parameters(a, b):
    sa, sb = dict(a.named_parameters()), dict(b.named_parameters())
    assert sa.keys() == sb.keys()
    for name in sa:
        assert sa[name].dtype == sb[name].dtype, name
        assert torch.equal(sa[name], sb[name]), name


def entries(cache):
    folder = cache / "weights"
    return sorted(p.name for p in folder.iterdir() if p.name != "hashes") if folder.is_dir() else []


def test_second_load_reads_the_cache_and_does_not_call_the_builder(cache, gguf, tok):
    build = Builder(tok)
    first = gguf_cache.cached_dense_model(gguf, torch.float32, build)
    assert build.calls == 1 and not first.training
    [name] = entries(cache)
    assert name.startswith("m-")
    assert ({"config.json", "model.safetensors", "agentrl_weights.json"}
            <= {p.name for p in (cache / "weights" / name).iterdir()})
    second = gguf_cache.cached_dense_model(gguf, torch.float32, build)
    assert build.calls == 1  # read back, not rebuilt
    assert second is not first and not second.training
    assert_same_parameters(first, second)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(first(ids).logits, second(ids).logits)


def test_different_file_content_gives_a_new_entry(cache, gguf, tok):
    build = Builder(tok)
    gguf_cache.cached_dense_model(gguf, torch.float32, build)
    before = gguf_cache.weights_cache_path(gguf, torch.float32)
    st = os.stat(gguf)
    data = bytearray(gguf.read_bytes())
    data[-1] ^= 0xFF  # same size; the modification time is put back below
    gguf.write_bytes(bytes(data))
    os.utime(gguf, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert gguf_cache.file_sha256(gguf) == hashlib.sha256(bytes(data)).hexdigest()
    assert gguf_cache.weights_cache_path(gguf, torch.float32) != before
    gguf_cache.cached_dense_model(gguf, torch.float32, build)
    assert build.calls == 2 and len(entries(cache)) == 2


def test_hash_is_memoised_while_the_file_is_unchanged(cache, gguf, monkeypatch):
    sha = gguf_cache.file_sha256(gguf)
    assert sha == hashlib.sha256(gguf.read_bytes()).hexdigest()
    monkeypatch.setattr(hashlib, "sha256", lambda *a: pytest.fail("re-hashed an unchanged file"))
    assert gguf_cache.file_sha256(gguf) == sha


def test_different_dtype_gives_a_new_entry(cache, gguf, tok):
    fp32, bf16 = Builder(tok, torch.float32), Builder(tok, torch.bfloat16)
    gguf_cache.cached_dense_model(gguf, torch.float32, fp32)
    model = gguf_cache.cached_dense_model(gguf, torch.bfloat16, bf16)
    assert (fp32.calls, bf16.calls) == (1, 1) and len(entries(cache)) == 2
    again = gguf_cache.cached_dense_model(gguf, torch.bfloat16, bf16)
    assert bf16.calls == 1 and {p.dtype for p in again.parameters()} == {torch.bfloat16}
    assert_same_parameters(model, again)
    gguf_cache.cached_dense_model(gguf, torch.float32, fp32)
    assert fp32.calls == 1


def test_another_transformers_version_gives_a_new_entry(cache, gguf, tok, monkeypatch):
    import transformers

    build = Builder(tok)
    gguf_cache.cached_dense_model(gguf, torch.float32, build)
    monkeypatch.setattr(transformers, "__version__", "0.0.0-another")
    gguf_cache.cached_dense_model(gguf, torch.float32, build)
    assert build.calls == 2 and len(entries(cache)) == 2


def _truncate(folder):
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _wrong_shape(folder):
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    name = next(k for k in tensors if k.endswith("q_proj.weight"))
    tensors[name] = torch.zeros(tensors[name].shape[0] + 1, tensors[name].shape[1])
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _missing_tensor(folder):
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    del tensors[next(k for k in tensors if k.endswith("up_proj.weight"))]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


DAMAGES = {
    "truncated safetensors": _truncate,
    "unreadable safetensors": lambda d: (d / "model.safetensors").write_bytes(b"\x00garbage"),
    "missing safetensors": lambda d: (d / "model.safetensors").unlink(),
    "missing config": lambda d: (d / "config.json").unlink(),
    "missing manifest": lambda d: (d / "agentrl_weights.json").unlink(),
    "wrong shape": _wrong_shape,
    "missing tensor": _missing_tensor,
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_entry_is_rebuilt_with_a_warning(cache, gguf, tok, caplog, damage):
    build = Builder(tok)
    reference = gguf_cache.cached_dense_model(gguf, torch.float32, build)
    folder = gguf_cache.weights_cache_path(gguf, torch.float32)
    DAMAGES[damage](folder)
    with caplog.at_level(logging.WARNING, logger=gguf_cache.__name__):
        model = gguf_cache.cached_dense_model(gguf, torch.float32, build)
    assert build.calls == 2  # rebuilt, not loaded
    assert any("unusable" in r.getMessage() for r in caplog.records)
    assert_same_parameters(reference, model)
    gguf_cache.cached_dense_model(gguf, torch.float32, build)  # the rebuilt entry is good again
    assert build.calls == 2


def test_a_failed_write_leaves_no_entry_and_is_not_fatal(cache, gguf, tok, caplog):
    class Failing(Builder):
        def __call__(self):
            model = super().__call__()
            original = model.save_pretrained

            def save_half(folder, **kw):
                original(folder, **kw)
                (folder / "model.safetensors").write_bytes(b"half")
                raise OSError("disk full")

            model.save_pretrained = save_half
            return model

    build = Failing(tok)
    with caplog.at_level(logging.WARNING, logger=gguf_cache.__name__):
        model = gguf_cache.cached_dense_model(gguf, torch.float32, build)
    assert not model.training and any("could not cache" in r.getMessage() for r in caplog.records)
    assert entries(cache) == []  # neither a partial entry nor its temporary folder is left
    good = Builder(tok)
    gguf_cache.cached_dense_model(gguf, torch.float32, good)
    gguf_cache.cached_dense_model(gguf, torch.float32, good)
    assert good.calls == 1


def test_temporary_folders_of_dead_processes_are_removed(cache, gguf, tok):
    folder = gguf_cache.weights_cache_path(gguf, torch.float32)
    stale = folder.with_name(f"{folder.name}.tmp999999999-dead")  # above any pid_max: no such process
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    gguf_cache.cached_dense_model(gguf, torch.float32, Builder(tok))
    assert entries(cache) == [folder.name]


def test_opt_out_builds_every_time_and_writes_nothing(cache, gguf, tok, monkeypatch):
    monkeypatch.setenv(gguf_cache.NO_WEIGHT_CACHE_ENV, "1")
    build = Builder(tok)
    model = gguf_cache.cached_dense_model(gguf, torch.float32, build)
    gguf_cache.cached_dense_model(gguf, torch.float32, build)
    assert build.calls == 2 and not model.training
    assert not (cache / "weights").exists()
    monkeypatch.setenv(gguf_cache.NO_WEIGHT_CACHE_ENV, "maybe")
    with pytest.raises(ValueError, match=gguf_cache.NO_WEIGHT_CACHE_ENV):
        gguf_cache.cached_dense_model(gguf, torch.float32, build)


def test_load_model_caches_a_gguf_through_the_dequantizer(cache, gguf, tok, monkeypatch):
    calls = []

    def fake_dequantize(path, name, dtype, kwargs):
        calls.append((path, name, dtype, dict(kwargs)))
        return tiny_model(tok, hidden_size=32, dtype=dtype)

    monkeypatch.setattr(models, "_dequantize_gguf", fake_dequantize)
    monkeypatch.setattr(models, "load_tokenizer", lambda name: tok)
    first, _ = models.load_model(str(gguf), dtype="fp32", device="cpu", attn_implementation="eager")
    second, _ = models.load_model(str(gguf), dtype="fp32", device="cpu", attn_implementation="eager")
    assert calls == [(str(gguf.parent), gguf.name, torch.float32, {"attn_implementation": "eager"})]
    assert second.config._attn_implementation == "eager"
    assert second.config.name_or_path == str(gguf.parent)  # as an uncached load names it
    assert second.name_or_path == str(gguf.parent)  # what PEFT records as an adapter's base
    assert_same_parameters(first, second)
    from peft import LoraConfig, get_peft_model

    adapter = get_peft_model(second, LoraConfig(r=2, target_modules=["q_proj"]))
    assert adapter.peft_config["default"].base_model_name_or_path == str(gguf.parent)  # not the cache folder


@pytest.mark.slow
def test_real_gguf_cached_weights_equal_the_uncached_load(cache, monkeypatch, capfd):
    monkeypatch.setenv(gguf_cache.NO_WEIGHT_CACHE_ENV, "1")
    t = time.time()
    uncached, _ = models.load_model(device="cpu")
    cold = time.time() - t
    assert "stay quantized" not in capfd.readouterr().err  # the misleading transformers warning is avoided
    monkeypatch.setenv(gguf_cache.NO_WEIGHT_CACHE_ENV, "0")
    models.load_model(device="cpu")  # de-quantizes and writes the cache
    t = time.time()
    warm, _ = models.load_model(device="cpu")
    print(f"uncached load {cold:.1f} s, warm cached load {time.time() - t:.2f} s (imports already done)")
    assert len(entries(cache)) == 1 and not warm.training
    assert_same_parameters(uncached, warm)
    for (name, a), (_, b) in zip(uncached.named_buffers(), warm.named_buffers(), strict=True):
        assert torch.equal(a, b), name
    a, b = warm.config.to_dict(), uncached.config.to_dict()
    differ = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert differ <= {"architectures"}, {k: (a.get(k), b.get(k)) for k in differ}  # save_pretrained fills it in
    assert warm.generation_config.to_dict() == uncached.generation_config.to_dict()
    assert getattr(warm, "hf_quantizer", None) is None and not getattr(warm, "is_quantized", False)
    assert not hasattr(warm.config, "quantization_config")
