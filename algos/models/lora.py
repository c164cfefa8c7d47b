"""LoRA adapters with PEFT: set up, save, load, merge.

* :class:`LoRAConfig`, :func:`apply_lora` — wrap a model in a trainable adapter; :func:`is_peft` tells a wrapped one.
* :func:`save_adapter`, :func:`load_adapter` — PEFT's on-disk format; :func:`check_adapter_base` refuses an adapter
  of another base model before anything loads; :func:`trainable_state_dict`,
  :func:`load_trainable_state_dict` — the adapter tensors for checkpoints.
* :func:`iter_merged_weights` — the base weights with the adapter merged in (fp32, one layer at a time), for a
  merged copy; :func:`merged_state_dict` collects them into one dict; :class:`MergeError` — what cannot be
  merged.

Only the adapter trains; the base weights are frozen and shared with the reference policy (KL, DPO): the
policy at the start of the RL stage, i.e. the model with the adapter disabled after a fresh LoRA, or a frozen
second adapter holding the starting weights (:mod:`agentrl.algos.training.reference`) — never a second copy of
the model. Adapters are saved in
PEFT's own format (``adapter_config.json`` + ``adapter_model.safetensors``), so anyone can load them without
agentrl::

    from transformers import AutoModelForCausalLM
    from peft import PeftModel
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), "runs/x/adapter")
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.algos._io import atomic_dir

logger = logging.getLogger(__name__)


def is_peft(model) -> bool:
    """Whether ``model`` is a PEFT wrapper (a ``PeftModel``, as :func:`apply_lora` and :func:`load_adapter` return)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


@dataclass
class LoRAConfig:
    """LoRA adapter settings (PEFT ``LoraConfig``)."""

    r: int = 16
    """Rank of the update matrices."""
    alpha: int = 32
    """Scaling numerator: the update is scaled by alpha / r."""
    dropout: float = 0.0
    """Dropout on the adapter's input during training."""
    target_modules: list[str] | str = field(default_factory=lambda: "all-linear")
    """Module names to adapt (e.g. ['q_proj', 'v_proj']), or 'all-linear' (every linear layer but the LM head)."""


def apply_lora(model, config: LoRAConfig | None = None):
    """Wrap ``model`` in a trainable PEFT LoRA model (base weights frozen). Returns the ``PeftModel``.

    The adapter's B matrices start at zero, so the wrapped model computes exactly what ``model`` did.
    Adapter weights are kept in float32 even on a bf16 base (PEFT's ``autocast_adapter_dtype``), so small
    updates are not rounded away.
    """
    from peft import LoraConfig, get_peft_model

    config = config or LoRAConfig()
    peft_config = LoraConfig(
        r=config.r,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=config.target_modules,
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft calls transformers' deprecated is_gradient_checkpointing alias; not ours to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        peft_model = get_peft_model(model, peft_config)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    logger.info("LoRA r=%d alpha=%d on %s: %d trainable parameters of %d (%.2f%%)", config.r, config.alpha,
                config.target_modules, trainable, total, 100 * trainable / max(total, 1))
    return peft_model


def trainable_state_dict(model) -> dict:
    """The trainable (adapter) tensors by parameter name, detached copies — exact, for checkpoints."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state_dict(model, state: dict) -> None:
    """Copy tensors saved by :func:`trainable_state_dict` back into ``model`` (names must match)."""
    import torch

    params = dict(model.named_parameters())
    missing = [n for n in state if n not in params]
    if missing:
        raise KeyError(f"checkpoint has parameters this model lacks (different LoRA config?): {missing[:3]}")
    with torch.no_grad():
        for n, t in state.items():
            params[n].copy_(t)


#: Keys of ``adapter_config.json`` that PEFT keeps as sets and writes in set order, which changes with Python's
#: string hashing from one process to the next.
_SET_KEYS = ("target_modules", "exclude_modules")


def save_adapter(model, path: str | Path) -> Path:
    """Save the active (trained) adapter in PEFT format at ``path``, atomically (written beside it, then renamed
    into place); a frozen reference adapter is not saved. The same weights give the same bytes in every process
    (PEFT's set-valued keys are written sorted), so a retrained adapter can be checked against a recorded hash."""
    path = Path(path)
    with atomic_dir(path) as tmp:
        model.save_pretrained(str(tmp), selected_adapters=[model.active_adapter],
                              save_embedding_layers=_embeddings_resized(model))
        config = tmp / "adapter_config.json"
        settings = json.loads(config.read_text(encoding="utf-8"))
        for key in _SET_KEYS:
            if isinstance(settings.get(key), list):
                settings[key] = sorted(settings[key], key=str)
        config.write_text(json.dumps(settings, indent=2, sort_keys=True), encoding="utf-8")
    return path


def _embeddings_resized(model) -> bool | str:
    """PEFT's ``save_embedding_layers``: whether the full embedding matrices must go into the adapter because the
    vocabulary was resized after loading. PEFT's ``"auto"`` finds out by reading the base model's ``config.json``
    at ``base_model_name_or_path``; a GGUF base (the default model: a package folder holding a ``.gguf``) has none,
    so PEFT warned on every save and assumed "not resized". A model :func:`~agentrl.algos.models.load_model` loaded
    knows its row count at load time and is compared with that; any other model, or an adapter that targets
    the embeddings or the LM head itself, is left to PEFT (``"auto"``)."""
    from agentrl.algos.models import LOADED_VOCAB_ATTR

    base = model.get_base_model() if is_peft(model) else model
    loaded = getattr(base, LOADED_VOCAB_ATTR, None)
    if loaded is None or not hasattr(base, "get_input_embeddings"):
        return "auto"
    targets = getattr(model.peft_config.get(model.active_adapter), "target_modules", None) if is_peft(model) else None
    if any(name in str(targets) for name in ("embed_tokens", "lm_head")):
        return "auto"
    return base.get_input_embeddings().num_embeddings != loaded


def check_adapter_folder(path: str | Path) -> None:
    """Raise ``FileNotFoundError`` unless ``path`` holds a PEFT adapter (``adapter_config.json``); the message
    says when ``path`` does not exist, and names ``path/adapter`` when that is one (a run's folder given instead
    of its adapter)."""
    if (Path(path) / "adapter_config.json").is_file():
        return
    if not Path(path).exists():
        raise FileNotFoundError(f"adapter {path}: no such folder")
    inner = Path(path) / "adapter"
    hint = f"; did you mean {str(inner)!r}?" if (inner / "adapter_config.json").is_file() else ""
    raise FileNotFoundError(f"{path} is not a PEFT adapter folder (no adapter_config.json){hint}")


def load_adapter(model, path: str | Path, *, trainable: bool = False):
    """Load a PEFT adapter saved by :func:`save_adapter` (or by anyone with PEFT) onto a base ``model``."""
    from peft import PeftModel

    check_adapter_folder(path)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return PeftModel.from_pretrained(model, str(path), is_trainable=trainable)


def adapter_base_model(path: str | Path) -> str | None:
    """The base model an adapter folder was trained on (``base_model_name_or_path`` of its
    ``adapter_config.json``), or None when it does not say or the folder has no such file."""
    import json

    try:
        base = json.loads((Path(path) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return base or None


def check_adapter_base(path: str | Path, model: str) -> None:
    """Refuse, before anything loads, an adapter trained on another base than ``model`` (an alias, hub id, folder
    or ``.gguf``): loading it would fail with a shape error, or silently apply the wrong deltas.

    The names match when they are equal, resolve to the same folder, or end in the same folder or repo name (a
    hub id and its local copy, the default alias's package folder on another machine); an adapter that names no
    base is not checked.

    Raises:
        ValueError: one line naming both models and the ``--model`` to pass.
    """
    from agentrl.algos.models import MODEL_ALIASES, resolve_model
    from agentrl.algos.models.gguf_cache import cached_source

    base = adapter_base_model(path)
    if base is None:
        return
    source = cached_source(Path(base).expanduser())
    if source is not None:  # the weight cache of a GGUF: the model is the GGUF's folder
        base = str(Path(source).parent)
    try:
        resolved = resolve_model(model)[0]
    except FileNotFoundError:
        resolved = model

    def names(x: str) -> set[str]:
        p = Path(x).expanduser()
        return {x.rstrip("/"), p.name, *([str(p.resolve())] if p.exists() else [])}

    if names(base) & (names(model) | names(resolved)):
        return
    alias = next((a for a, (package, _, _) in MODEL_ALIASES.items() if Path(base).name == package), None)
    if alias is not None and alias == model.lower():
        return
    raise ValueError(f"adapter {path} was trained on {alias or base!r}, not on {model!r}: pass "
                     f"--model {alias or base}")


class MergeError(ValueError):
    """An adapter that cannot be merged into a plain merged copy (the message names the option at fault)."""


def _check_mergeable(base, lora: dict[str, Any]) -> None:
    """Refuse adapters whose merged weights a plain copy of the architecture cannot hold.

    A LoRA target whose weight is tied to another parameter (``lm_head`` or ``embed_tokens`` of a model with
    ``tie_word_embeddings=True``): the adapted layer and its twin would need different weights, while the
    merged copy (built from the same config) keeps them tied. Also DoRA on a non-Linear layer, ``lora_bias``
    on a layer without bias and other LoRA variants. Checked before any weight is yielded, so a refused merge
    leaves its consumer untouched.
    """
    import torch

    owners: dict[int, list[str]] = {}
    for pname, p in base.named_parameters(remove_duplicate=False):
        owners.setdefault(p.data_ptr(), []).append(pname)
    for name, m in lora.items():
        weight = m.get_base_layer().weight
        twins = [n for n in owners.get(weight.data_ptr(), []) if not n.startswith(f"{name}.")]
        if twins:
            raise MergeError(
                f"LoRA target_modules includes {name.rsplit('.', 1)[-1]!r}, whose weight is tied to {twins[0]} "
                f"(tie_word_embeddings=True): a merged copy with tied weights cannot hold the merged layer; "
                f"leave {name.rsplit('.', 1)[-1]!r} out of target_modules or untie the model's embeddings")
        layer = m.get_base_layer()
        for adapter in _active(m):
            variant = getattr(m, "lora_variant", {}).get(adapter)
            dora = bool(getattr(m, "use_dora", {}).get(adapter, False))
            if variant is not None and not dora:
                raise MergeError(f"LoRA variant {type(variant).__name__} of adapter {adapter!r} cannot be merged "
                                 "into the merged copy; use a plain LoRA adapter (or DoRA on linear layers)")
            if dora and not isinstance(layer, torch.nn.Linear):
                raise MergeError(f"use_dora=True on {name} ({type(layer).__name__}) cannot be merged into the "
                                 "merged copy; DoRA is merged for Linear layers only")
            if getattr(m, "lora_bias", {}).get(adapter, False) and getattr(layer, "bias", None) is None:
                raise MergeError(f"lora_bias=True on adapter {adapter!r}, but {name} has no bias to merge it into")


def _active(m) -> list[str]:
    """The adapters of LoRA layer ``m`` that take part in its forward pass (none if disabled or merged)."""
    if getattr(m, "disable_adapters", False) or getattr(m, "merged", False):
        return []
    return [a for a in m.active_adapters if a in getattr(m, "lora_A", {})]


def _merged_layer(m, adapters) -> tuple[Any, Any]:
    """``(weight, bias)`` of one LoRA layer with ``adapters`` merged in, computed in fp32 (bias None if none).

    Plain LoRA adds ``B @ A * scaling`` (PEFT's ``get_delta_weight`` for non-Linear layers); DoRA (``use_dora``)
    rescales each output row by ``magnitude / ||W + delta||`` as PEFT's merge does (Linear layers); ``lora_bias``
    adds ``lora_B.bias * scaling`` to the base bias.
    """
    import torch
    from peft.utils.other import transpose

    layer = m.get_base_layer()
    w = layer.weight.detach().to(torch.float32, copy=True)  # the one fp32 copy of this layer, updated in place
    bias = layer.bias.detach().float() if getattr(layer, "bias", None) is not None else None
    for adapter in adapters:
        if isinstance(layer, torch.nn.Linear):
            delta = transpose(m.lora_B[adapter].weight.float() @ m.lora_A[adapter].weight.float(), m.fan_in_fan_out)
            delta.mul_(m.scaling[adapter])
        else:  # embeddings, convolutions: PEFT's own delta
            delta = m.get_delta_weight(adapter).float()
        if getattr(m, "use_dora", {}).get(adapter, False):
            fan = m.fan_in_fan_out
            rows = transpose(w, fan) + transpose(delta, fan)
            factor = m.lora_magnitude_vector[adapter].weight.float() / torch.linalg.norm(rows, dim=1)
            w = transpose(factor.view(-1, 1) * rows, fan)
            del rows
        else:
            w.add_(delta)
        del delta
        if getattr(m, "lora_bias", {}).get(adapter, False):
            bias = bias + m.lora_B[adapter].bias.float() * m.scaling[adapter]
    return w, bias


def iter_merged_weights(peft_model) -> Iterator[tuple[str, Any]]:
    """The base model's weights with every active LoRA adapter merged in, one tensor at a time.

    Yields ``(name, tensor)`` with the keys of the plain (un-wrapped) architecture's ``state_dict``: first each
    adapted layer's weight (and bias), merged in fp32 (see :func:`_merged_layer`), then every other entry as the
    model's own tensor (no copy). Only one layer's fp32 weights exist at a time, so a consumer that copies each
    tensor into place (:meth:`~agentrl.algos.policy.HFPolicy.update_weights`) needs one layer of extra memory,
    never a whole model. ``peft_model`` is not modified.

    Raises:
        MergeError: an adapter this merge cannot reproduce (a LoRA target tied to another weight, DoRA on a
            non-Linear layer, ``lora_bias`` on a layer without bias, another LoRA variant).
    """
    import torch
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    lora = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    _check_mergeable(base, lora)
    with torch.no_grad():
        for name, m in lora.items():
            w, bias = _merged_layer(m, _active(m))
            yield f"{name}.weight", w
            del w
            if bias is not None:
                yield f"{name}.bias", bias
            del bias
        prefixes = tuple(f"{n}." for n in lora)
        for pname, p in base.state_dict().items():
            if not pname.startswith(prefixes):
                yield pname, p


def merged_state_dict(peft_model) -> dict[str, Any]:
    """All of :func:`iter_merged_weights` in one dict (every adapted weight in fp32 at once: for inspection and
    small models; a policy refresh streams the iterator instead)."""
    return dict(iter_merged_weights(peft_model))
