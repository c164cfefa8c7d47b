"""LoRA adapters with PEFT: set up, save, load; the reference policy is the same model with the adapter off.

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
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)


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


def is_peft_model(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


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
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(str(tmp))
    if path.exists():
        old = path.with_name(path.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old)
    else:
        os.replace(tmp, path)
    return path


def load_adapter(model, path: str | Path, *, trainable: bool = False):
    """Load a PEFT adapter saved by :func:`save_adapter` (or by anyone with PEFT) onto a base ``model``."""
    from peft import PeftModel

    if not (Path(path) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{path} is not a PEFT adapter folder (no adapter_config.json)")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return PeftModel.from_pretrained(model, str(path), is_trainable=trainable)
