"""A model as a folder an inference engine loads: de-quantized weights, tokenizer and chat template.

Engines (vLLM, SGLang) read a Hugging Face model folder, not the GGUF the default alias ships as.
:func:`export_model` writes one (``agentrl export-model DIR``); :func:`engine_model_dir` is what a managed engine
(:mod:`agentrl.algos.policy.engine`) serves: a model folder as given, else an export kept in the cache
(``$AGENTRL_CACHE_DIR/engine-models/``, written once per model file and transformers version).

Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from agentrl.algos.models import DEFAULT_MODEL, load_model, resolve_model

logger = logging.getLogger(__name__)

_MARK = "agentrl_export.json"


def export_model(name: str = DEFAULT_MODEL, out: str | Path = "model", *, dtype: str = "fp32") -> Path:
    """Write ``name`` (an alias, hub id, folder or ``.gguf``) to the folder ``out`` as an engine loads it.

    The folder gets ``config.json`` and ``model.safetensors`` (dense weights in ``dtype``; fp32 by default, which
    holds the de-quantized GGUF weights exactly, and an engine casts to its own ``--dtype``), the tokenizer files
    with the chat template, ``generation_config.json`` and ``agentrl_export.json`` (what was exported). The write
    goes to a temporary sibling renamed into place, so a failed export leaves no half-written ``out``.

    Raises:
        FileExistsError: ``out`` exists and is not empty.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    model, tokenizer = load_model(name, dtype=dtype, device="cpu")
    if not tokenizer.chat_template:
        raise ValueError(f"model {name!r} has no chat template; an engine could not render conversations")
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}-{os.urandom(4).hex()}")
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        import transformers

        (tmp / _MARK).write_text(json.dumps({"model": name, "dtype": dtype,
                                             "transformers": transformers.__version__}, indent=1) + "\n")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("exported %s to %s", name, out)
    return out


def is_model_dir(path: str | Path) -> bool:
    """True when ``path`` is a folder with a ``config.json`` and weights (``*.safetensors`` or ``*.bin``)."""
    p = Path(path)
    return (p / "config.json").is_file() and (any(p.glob("*.safetensors")) or any(p.glob("pytorch_model*.bin")))


def engine_model_dir(name: str = DEFAULT_MODEL, *, cache_dir: str | Path | None = None) -> Path:
    """A model folder for ``name`` that an engine can load: ``name`` itself when it is one (:func:`is_model_dir`),
    else its export (:func:`export_model`) under ``cache_dir`` (default ``$AGENTRL_CACHE_DIR/engine-models``),
    keyed by the model file's path, size and mtime and the transformers version, written on first use.

    A hub id that is not a local folder is exported too (transformers loads it from its own cache)."""
    if Path(name).is_dir() and is_model_dir(name):
        return Path(name).resolve()
    import transformers

    path, gguf = resolve_model(name)
    source = Path(path) / gguf if gguf else Path(path)
    stat = f"{source.stat().st_size}-{source.stat().st_mtime_ns}" if source.exists() else ""
    key = hashlib.sha256(f"{source.resolve() if source.exists() else name}|{stat}|"
                         f"{transformers.__version__}".encode()).hexdigest()[:16]
    if cache_dir is None:
        from agentrl.envs.datasets import default_cache_dir

        cache_dir = default_cache_dir() / "engine-models"
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).name or name)[:60]
    target = Path(cache_dir) / f"{stem}-{key}"
    if (target / _MARK).is_file() and is_model_dir(target):
        return target
    if target.exists():
        logger.warning("removing the incomplete engine model folder %s", target)
        shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        return export_model(name, target)
    except OSError:
        if (target / _MARK).is_file():  # another process exported it first
            return target
        raise
