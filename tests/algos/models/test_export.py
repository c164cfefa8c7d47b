"""``export_model`` / ``agentrl export-model``: a model folder an engine loads; ``engine_model_dir``: its cache."""

from __future__ import annotations

import json

import pytest
import torch

from agentrl.algos import cli
from agentrl.algos.models import load_model
from agentrl.algos.models.export import engine_model_dir, export_model, is_model_dir


def test_export_writes_a_folder_that_loads_to_the_same_weights(tiny_dir, tmp_path):
    out = export_model(str(tiny_dir), tmp_path / "m")
    assert is_model_dir(out)
    assert (out / "chat_template.jinja").is_file() or "chat_template" in (out / "tokenizer_config.json").read_text()
    assert json.loads((out / "agentrl_export.json").read_text())["model"] == str(tiny_dir)
    a, tok_a = load_model(str(tiny_dir), dtype="fp32", device="cpu")
    b, tok_b = load_model(str(out), dtype="fp32", device="cpu")
    for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, q), name
    conv = [{"role": "user", "content": "hi"}]
    assert tok_a.apply_chat_template(conv, add_generation_prompt=True) == \
        tok_b.apply_chat_template(conv, add_generation_prompt=True)
    assert not list(tmp_path.glob("m.tmp*"))  # written aside, renamed into place


def test_export_refuses_a_non_empty_folder(tiny_dir, tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x").write_text("keep me")
    with pytest.raises(FileExistsError):
        export_model(str(tiny_dir), tmp_path / "m")
    assert cli.main(["export-model", str(tmp_path / "m"), "--model", str(tiny_dir)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "m" / "x").read_text() == "keep me"


def test_cli_export_model(tiny_dir, tmp_path, capsys):
    assert cli.main(["export-model", str(tmp_path / "m"), "--model", str(tiny_dir), "--dtype", "bf16"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["dtype"] == "bfloat16"


def test_engine_model_dir_serves_a_model_folder_as_it_is(tiny_dir, tmp_path):
    assert engine_model_dir(str(tiny_dir), cache_dir=tmp_path) == tiny_dir.resolve()
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_engine_model_dir_exports_the_gguf_alias_once(tmp_path):
    first = engine_model_dir("smollm2-135m", cache_dir=tmp_path)
    assert is_model_dir(first) and first.parent == tmp_path
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert engine_model_dir("smollm2-135m", cache_dir=tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp  # read from the cache, not exported again
