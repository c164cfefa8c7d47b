"""LoRA layers in one autograd function for the update's passes: no full-size casts, no full-size temporaries.

PEFT's LoRA ``Linear`` computes ``base(x) + lora_B(lora_A(dropout(x.to(fp32)))) * scaling`` and casts the sum back:
with the adapter in float32 on a bf16 model (what :func:`~agentrl.algos.models.lora.apply_lora` makes), every
adapted layer copies its input to float32, allocates two float32 ``[tokens, out]`` tensors (the scaled product and
the sum), casts the sum back, and its backward pass does the same again. On a CPU those memory-bound copies and the
rank-16 float32 products cost several times the layer's own matmul (measured on SmolLM2-135M's MLP layer, 1,712
tokens: forward + backward 0.43 s with PEFT, 0.10 s for the frozen matmul alone).

:func:`fused_lora` replaces, for the duration of a ``with`` block, the ``forward`` of every PEFT LoRA ``Linear`` in
the model that is a plain low-rank adapter (one active adapter, no DoRA or other variant, no LoRA bias, dropout
off or in eval mode, not merged, not disabled) by :class:`_LoRALinear`: the adapter's two small matrices are cast
to the input's dtype (``r x in`` and ``out x r`` elements), ``z = x A^T`` is formed, and ``z (s B)^T`` is added
into the frozen matmul's output in place; the backward pass forms ``dx``, ``dA`` and ``dB`` from the same
tensors (``[tokens, r]`` temporaries only) and returns ``dA`` and ``dB`` in the adapter's dtype. In float32 the
result is PEFT's up to the order of additions; in bf16 the adapter's product is rounded to bf16 before it joins
the bf16 output (PEFT rounds the float32 sum once), and ``dA``/``dB`` come out of bf16 matmuls (float32
accumulation) rounded to bf16 before the float32 update: a relative difference of order 2^-9 per element, well
under the bf16 forward's own rounding (tests/algos/training/test_fused_lora.py measures both against float32).
Any other layer, or a call with PEFT's extra arguments (``adapter_names``), runs PEFT's own forward.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch


class _LoRALinear(torch.autograd.Function):
    """``y = x W^T (+ bias) + scaling * (x A^T) B^T`` with ``W`` (and ``bias``) frozen; gradients for ``x``, ``A``,
    ``B``."""

    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        a = lora_a.to(x.dtype)
        b = (lora_b * scaling).to(x.dtype)
        z = x2 @ a.t()  # [N, r]
        y = x2 @ weight.t() if bias is None else torch.addmm(bias, x2, weight.t())
        y.addmm_(z, b.t())
        ctx.save_for_backward(x2, weight, a, b, z)
        ctx.scaling, ctx.shape, ctx.param_dtypes = scaling, shape, (lora_a.dtype, lora_b.dtype)
        return y.view(*shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, grad_y):
        x2, weight, a, b, z = ctx.saved_tensors
        g = grad_y.reshape(-1, grad_y.shape[-1]).to(x2.dtype)
        need_x, _, _, need_a, need_b, _ = ctx.needs_input_grad
        gz = g @ b  # [N, r]: d loss / d z, the scaling included
        grad_x = grad_a = grad_b = None
        if need_x:
            grad_x = (g @ weight).addmm_(gz, a).view(ctx.shape)
        if need_a:
            grad_a = (gz.t() @ x2).to(ctx.param_dtypes[0])
        if need_b:
            grad_b = (g.t() @ z).to(ctx.param_dtypes[1]).mul_(ctx.scaling)
        return grad_x, None, None, grad_a, grad_b, None


def _plain_adapter(layer) -> str | None:
    """The name of the one active adapter of a PEFT LoRA ``Linear`` when it is a plain low-rank product this module
    can run, else None."""
    base = getattr(layer, "base_layer", None)
    if type(base) is not torch.nn.Linear or base.weight.requires_grad:
        return None
    if getattr(layer, "fan_in_fan_out", False) or getattr(layer, "merged_adapters", None):
        return None
    active = list(getattr(layer, "active_adapters", ()))
    if len(active) != 1 or active[0] not in layer.lora_A or active[0] in getattr(layer, "lora_variant", {}):
        return None
    name = active[0]
    if layer.lora_B[name].bias is not None or layer.lora_A[name].bias is not None:
        return None
    return name


def _fast_forward(self, x, *args, **kwargs):
    """The LoRA ``Linear``'s forward through :class:`_LoRALinear` when nothing in this call needs PEFT's own."""
    name = _plain_adapter(self)
    dropout = self.lora_dropout[name] if name is not None else None
    if (name is None or args or kwargs or self.disable_adapters or self.merged
            or not (isinstance(dropout, torch.nn.Identity) or not dropout.training)
            or x.dtype != self.base_layer.weight.dtype):
        return type(self).forward(self, x, *args, **kwargs)
    return _LoRALinear.apply(x, self.base_layer.weight, self.base_layer.bias, self.lora_A[name].weight,
                             self.lora_B[name].weight, float(self.scaling[name]))


def lora_layers(model) -> list:
    """The PEFT LoRA ``Linear`` layers of ``model`` that :func:`fused_lora` runs (plain adapters)."""
    try:
        from peft.tuners.lora.layer import Linear
    except ImportError:  # no PEFT: no LoRA layers
        return []
    return [m for m in model.modules() if isinstance(m, Linear) and _plain_adapter(m) is not None]


@contextlib.contextmanager
def fused_lora(model) -> Iterator[int]:
    """Inside: the model's plain LoRA layers run :class:`_LoRALinear` (see the module docstring); yields how many.
    Everything that runs the model inside, backward passes and checkpoint replays included, uses it; on exit each
    layer has PEFT's forward again."""
    layers = lora_layers(model)
    for m in layers:
        m.forward = types.MethodType(_fast_forward, m)
    try:
        yield len(layers)
    finally:
        for m in layers:
            m.__dict__.pop("forward", None)
