"""The reference policy of KL (GRPO ``beta > 0``) and DPO: the policy as it was when the training stage started.

A run that starts from a trained adapter (an SFT cold start, ``--adapter``) must be held near *that* policy, not
near the base model under it. :class:`Reference` is built when the stage starts (before a checkpoint is
resumed, so a resumed run keeps the stage's own reference) and never changes afterwards:

* the starting adapter is a fresh LoRA (every ``lora_B`` zero, so the policy equals the base model): the
  reference is the model with its adapter switched off (``model.disable_adapter()``), no copy at all;
* otherwise: a frozen copy of the starting adapter's weights is loaded into the same PEFT model as a second
  adapter named ``"reference"`` (a few MB; the base weights stay shared, never a second full model), and the
  reference pass runs with that adapter active instead of the trained one.

The reference pass runs without gradients and in eval mode (dropout off). The second adapter is never
trained (``requires_grad`` stays False, so neither the optimizer nor a checkpoint's trainable tensors see it)
and the policy never sees it (its weights merge the active, trained adapter only).
"""

from __future__ import annotations

import contextlib
import copy
import logging

import torch

from agentrl.algos.objectives.logprobs import token_logprobs

logger = logging.getLogger(__name__)

REFERENCE_ADAPTER = "reference"


def _adapter_is_identity(model, adapter: str) -> bool:
    """Whether ``adapter`` adds nothing to the base model: a plain LoRA whose every ``lora_B`` is zero."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, adapter_name=adapter)
    if not state or any("lora_A" not in k and "lora_B" not in k for k in state):
        return False  # DoRA magnitudes, trained embeddings, modules_to_save, ...: keep an exact copy
    return all(not bool(t.any()) for k, t in state.items() if "lora_B" in k)


class Reference:
    """The frozen starting policy of ``model`` (a PEFT model), built from its weights at construction time."""

    def __init__(self, model):
        from agentrl.algos.models.lora import is_peft

        if not is_peft(model):
            raise TypeError("the reference policy is kept as a LoRA adapter state: wrap the model with "
                            "apply_lora / load_adapter first")
        self.model = model
        self.adapter = model.active_adapter
        if self.adapter == REFERENCE_ADAPTER:
            raise ValueError(f"the trained adapter may not be named {REFERENCE_ADAPTER!r}")
        if REFERENCE_ADAPTER in model.peft_config:  # an earlier stage's reference: this stage starts anew
            model.delete_adapter(REFERENCE_ADAPTER)
        self.kind = "base" if _adapter_is_identity(model, self.adapter) else "frozen_adapter"
        if self.kind == "frozen_adapter":
            self._copy_adapter()
        logger.info("reference policy: %s", "the base model (fresh adapter)" if self.kind == "base"
                    else f"a frozen copy of the starting adapter {self.adapter!r}")

    def _copy_adapter(self) -> None:
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        model = self.model
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        config = copy.deepcopy(model.peft_config[self.adapter])
        config.inference_mode = True
        model.add_adapter(REFERENCE_ADAPTER, config)
        state = get_peft_model_state_dict(model, adapter_name=self.adapter)
        set_peft_model_state_dict(model, {k: v.detach().clone() for k, v in state.items()},
                                  adapter_name=REFERENCE_ADAPTER)
        model.set_adapter(self.adapter)  # the trained adapter stays the active one
        for n, p in model.named_parameters():
            if f".{REFERENCE_ADAPTER}." in n:
                p.requires_grad_(False)
        now = {n for n, p in model.named_parameters() if p.requires_grad}
        if now != trainable:
            raise RuntimeError(f"adding the reference adapter changed the trainable parameters: "
                               f"{sorted(now ^ trainable)[:3]}")

    @contextlib.contextmanager
    def active(self):
        """Inside: ``model`` computes the reference policy (no gradients). Do not enter it while an autograd
        graph through the trained adapter is pending: switching adapters toggles ``requires_grad``."""
        if self.kind == "base":
            with torch.no_grad(), self.model.disable_adapter():
                yield self.model
            return
        params = dict(self.model.named_parameters())
        trainable = [n for n, p in params.items() if p.requires_grad]
        self.model.base_model.set_adapter(REFERENCE_ADAPTER, inference_mode=True)
        try:
            with torch.no_grad():
                yield self.model
        finally:
            self.model.base_model.set_adapter(self.adapter)
            for n, p in params.items():
                p.requires_grad_(n in trainable)

    def logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """:func:`~agentrl.algos.objectives.logprobs.token_logprobs` under the reference policy, in eval mode."""
        was_training = self.model.training
        self.model.eval()
        try:
            with self.active() as model:
                return token_logprobs(model, input_ids, attention_mask, **kwargs)
        finally:
            self.model.train(was_training)
