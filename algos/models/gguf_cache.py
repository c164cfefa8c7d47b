"""What agentrl derives from a GGUF file once and keeps: the converted tokenizer and the de-quantized weights.

Both live under :func:`~agentrl.envs.datasets.default_cache_dir` (``$AGENTRL_CACHE_DIR``, else
``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``):

- ``tokenizers/<stem>-<key>`` — :func:`gguf_tokenizer`: the tokenizer transformers converts from the GGUF.
- ``weights/<stem>-<key>`` — :func:`cached_dense_model`: the dense model (``config.json``,
  ``model.safetensors``, ``generation_config.json`` and our manifest ``agentrl_weights.json``) that
  transformers de-quantizes from the GGUF. The key covers the SHA-256 of the GGUF file's bytes, the dtype and the
  transformers version. The hash is memoised in ``weights/hashes/`` by the file's path, size, inode, mtime and
  ctime, so an unchanged file is not read again; rewriting the file changes its ctime, and it is hashed anew.

Every entry is written to a per-process temporary folder and renamed into place, so a killed or failed write never
leaves a half-written entry under the final name. An entry that cannot be read back (missing or truncated file,
a tensor of the wrong shape or dtype, no manifest) is removed with a logged warning and rebuilt; a cache that
cannot be written is skipped with a logged warning. Neither is fatal.

``AGENTRL_NO_WEIGHT_CACHE=1`` turns the weight cache off (every load de-quantizes the GGUF, nothing is written).
Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: The environment variable that turns the de-quantized weight cache off (``1``/``true``/``yes``).
NO_WEIGHT_CACHE_ENV = "AGENTRL_NO_WEIGHT_CACHE"
_MANIFEST = "agentrl_weights.json"
_MANIFEST_VERSION = 1


def _cache_root() -> Path:
    from agentrl.envs.datasets import default_cache_dir

    return default_cache_dir()


def weight_cache_enabled() -> bool:
    """False when ``$AGENTRL_NO_WEIGHT_CACHE`` is ``1``/``true``/``yes``; True when it is unset, empty or
    ``0``/``false``/``no``.

    Raises:
        ValueError: any other value (the message names the variable).
    """
    value = os.environ.get(NO_WEIGHT_CACHE_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return True
    if value in ("1", "true", "yes"):
        return False
    raise ValueError(f"{NO_WEIGHT_CACHE_ENV} must be 1/true/yes (cache off) or 0/false/no (cache on), got {value!r}")


def _unique_tmp(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp{os.getpid()}-{os.urandom(4).hex()}")


def _remove_stale_tmps(path: Path) -> None:
    """Remove ``<path>.tmp<pid>-*`` siblings left by processes that no longer run."""
    if not path.parent.is_dir():
        return
    for entry in path.parent.glob(f"{path.name}.tmp*"):
        pid = entry.name[len(path.name) + 4:].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:  # the process exists (owned by someone else)
            pass


def file_sha256(file: str | os.PathLike) -> str:
    """The SHA-256 of ``file``'s bytes, memoised in ``weights/hashes/`` by path, size, inode, mtime and ctime."""
    file = os.path.realpath(file)
    st = os.stat(file)
    stamp = [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
    memo = _cache_root() / "weights" / "hashes" / f"{hashlib.sha1(file.encode()).hexdigest()[:16]}.json"
    try:
        saved = json.loads(memo.read_text(encoding="utf-8"))
        if saved.get("file") == file and saved.get("stat") == stamp and len(saved.get("sha256", "")) == 64:
            return saved["sha256"]
    except (OSError, ValueError, AttributeError):
        pass
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    sha = digest.hexdigest()
    tmp = _unique_tmp(memo)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"file": file, "stat": stamp, "sha256": sha}), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        logger.debug("could not memoise the hash of %s in %s", file, memo, exc_info=True)
        tmp.unlink(missing_ok=True)
    return sha


def weights_cache_path(file: str | os.PathLike, dtype: Any) -> Path:
    """The cache folder of the dense weights of GGUF ``file`` in ``dtype``: ``weights/<stem>-<key>``, the key
    covering the file's SHA-256, the dtype and the transformers version."""
    import transformers

    origin = f"{file_sha256(file)}:{dtype}:{transformers.__version__}"
    key = hashlib.sha1(origin.encode()).hexdigest()[:16]
    return _cache_root() / "weights" / f"{Path(file).stem}-{key}"


def cached_source(folder: str | os.PathLike) -> str | None:
    """The GGUF file a weight-cache folder was de-quantized from (its manifest's ``source``), or None when
    ``folder`` is not such a folder (adapters saved before the cached load named its source recorded the folder)."""
    try:
        return json.loads((Path(folder) / _MANIFEST).read_text(encoding="utf-8")).get("source") or None
    except (OSError, ValueError, AttributeError):
        return None


def _manifest(model, file: str, dtype: Any) -> dict[str, Any]:
    import transformers

    return {"version": _MANIFEST_VERSION, "source": os.path.realpath(file), "sha256": file_sha256(file),
            "dtype": str(dtype), "transformers": transformers.__version__,
            "parameters": {name: list(p.shape) for name, p in model.named_parameters()}}


def _load_checked(folder: Path, dtype: Any, load_kwargs: dict[str, Any]):
    """The model saved in ``folder``; raises if anything differs from its manifest or failed to load."""
    from transformers import AutoModelForCausalLM

    manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("version") != _MANIFEST_VERSION or manifest.get("dtype") != str(dtype):
        raise ValueError(f"manifest {manifest.get('version')}/{manifest.get('dtype')} is not for {dtype}")
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, output_loading_info=True,
                                                       **load_kwargs)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise ValueError(f"incomplete checkpoint: {problems}")
    shapes = {name: list(p.shape) for name, p in model.named_parameters()}
    if shapes != manifest.get("parameters"):
        raise ValueError("parameter names or shapes differ from the manifest")
    odd = {str(p.dtype) for p in model.parameters()} - {str(dtype)}
    if odd:
        raise ValueError(f"parameters in {sorted(odd)}, expected {dtype}")
    return model


def _save(model, folder: Path, manifest: dict[str, Any]) -> None:
    """Write ``model`` and ``manifest`` to ``folder`` through a temporary sibling renamed into place."""
    _remove_stale_tmps(folder)
    tmp = _unique_tmp(folder)
    try:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(tmp)
        (tmp / _MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")  # last: marks the entry complete
        os.replace(tmp, folder)  # atomic; fails if another process got there first (its copy is as good)
    except Exception:
        if not folder.is_dir():
            logger.warning("could not cache the de-quantized weights in %s; the next load de-quantizes again",
                           folder, exc_info=True)
        shutil.rmtree(tmp, ignore_errors=True)


def cached_dense_model(file: str | os.PathLike, dtype: Any, build: Callable[[], Any], *,
                       load_kwargs: dict[str, Any] | None = None):
    """The dense causal LM derived from GGUF ``file`` in ``dtype``, in eval mode: read from the weight cache, or
    made by ``build()`` (which must return a model whose parameters are all in ``dtype``) and then cached.

    ``load_kwargs`` go to ``AutoModelForCausalLM.from_pretrained`` when reading the cache (e.g.
    ``attn_implementation``). With ``AGENTRL_NO_WEIGHT_CACHE=1`` this is ``build()`` and nothing is read or
    written. A cache entry that fails to load or to match its manifest is removed (logged warning) and rebuilt.
    """
    if not weight_cache_enabled():
        return build().eval()
    file = str(file)
    folder = weights_cache_path(file, dtype)
    if folder.is_dir():
        try:
            model = _load_checked(folder, dtype, dict(load_kwargs or {}))
            logger.debug("loaded the de-quantized weights of %s from %s", file, folder)
            return model.eval()
        except Exception as exc:  # a damaged cache is rebuilt, never loaded and never fatal
            logger.warning("cached weights in %s are unusable (%s: %s); de-quantizing %s again",
                           folder, type(exc).__name__, str(exc)[:300], file)
            shutil.rmtree(folder, ignore_errors=True)
    model = build()
    _save(model, folder, _manifest(model, file, dtype))
    return model.eval()


def gguf_tokenizer(path: str, gguf: str):
    """The tokenizer inside a GGUF file, converted once and cached (conversion takes seconds, loading ~0.3 s).

    The cache key is the file's path, size and modification time and the converting transformers/tokenizers
    versions, so an upgraded package (or a conversion by another library version) converts anew.
    """
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    file = os.path.join(path, gguf)
    st = os.stat(file)
    origin = (f"{os.path.realpath(file)}:{st.st_size}:{st.st_mtime_ns}:"
              f"{transformers.__version__}:{tokenizers.__version__}")
    key = hashlib.sha1(origin.encode()).hexdigest()[:16]
    cached = _cache_root() / "tokenizers" / f"{Path(gguf).stem}-{key}"
    if (cached / "tokenizer_config.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(cached)
        except Exception:  # a damaged cache is rebuilt, never fatal
            logger.warning("cached tokenizer in %s is unreadable; converting the GGUF again", cached)
            shutil.rmtree(cached, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(path, gguf_file=gguf)
    tmp = _unique_tmp(cached)
    try:
        tok.save_pretrained(tmp)
        os.replace(tmp, cached)  # atomic; fails harmlessly if another process got there first
    except OSError:
        logger.debug("could not cache the tokenizer in %s", cached, exc_info=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return tok
