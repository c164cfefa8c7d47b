"""LoRA adapters with PEFT: set up, save, load, merge; the reference policy is the same model with the adapter off.

* :class:`LoRAConfig`, :func:`apply_lora` — wrap a model in a trainable adapter; :func:`is_peft` tells a wrapped one.
* :func:`save_adapter`, :func:`load_adapter` — PEFT's on-disk format; :func:`trainable_state_dict`,
  :func:`load_trainable_state_dict` — the adapter tensors for checkpoints.
* :func:`merged_state_dict` — the base weights with the adapter merged in (fp32), for a sampler copy.

Only the adapter trains; the base weights are frozen and shared with the reference policy (KL, DPO), which is
the model inside ``with model.disable_adapter():`` — never a second copy in memory. Adapters are saved in
PEFT's own format (``adapter_config.json`` + ``adapter_model.safetensors``), so anyone can load them without
agentrl::

    from transformers import AutoModelForCausalLM
    from peft import PeftModel
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), "runs/x/adapter")
"""

from __future__ import annotations

import logging
import warnings
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


def save_adapter(model, path: str | Path) -> Path:
    """Save the adapter in PEFT format at ``path``, atomically (written beside it, then renamed into place)."""
    path = Path(path)
    with atomic_dir(path) as tmp:
        model.save_pretrained(str(tmp))
    return path


def load_adapter(model, path: str | Path, *, trainable: bool = False):
    """Load a PEFT adapter saved by :func:`save_adapter` (or by anyone with PEFT) onto a base ``model``."""
    from peft import PeftModel

    if not (Path(path) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{path} is not a PEFT adapter folder (no adapter_config.json)")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return PeftModel.from_pretrained(model, str(path), is_trainable=trainable)


def merged_state_dict(peft_model) -> dict[str, Any]:
    """The base model's state dict with every active LoRA adapter merged in, computed in fp32.

    Keys are those of the plain (un-wrapped) architecture. ``peft_model`` is not modified.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    lora = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    out: dict[str, Any] = {}
    with torch.no_grad():
        for name, m in lora.items():
            layer = m.get_base_layer()
            w = layer.weight.float()
            if not getattr(m, "disable_adapters", False) and not getattr(m, "merged", False):
                for adapter in m.active_adapters:
                    if adapter not in getattr(m, "lora_A", {}):
                        continue
                    if type(layer).__name__ == "Linear" and not getattr(m, "fan_in_fan_out", False) \
                            and not getattr(m, "use_dora", {}).get(adapter, False):
                        a = m.lora_A[adapter].weight.float()
                        b = m.lora_B[adapter].weight.float()
                        w = w + (b @ a) * m.scaling[adapter]
                    else:  # other layer kinds: PEFT's own delta (computed in fp32 on CPU)
                        w = w + m.get_delta_weight(adapter).float()
            out[f"{name}.weight"] = w
            if getattr(layer, "bias", None) is not None:
                out[f"{name}.bias"] = layer.bias
        prefixes = tuple(f"{n}." for n in lora)
        for pname, p in base.state_dict().items():
            if not pname.startswith(prefixes):
                out[pname] = p
    return out
