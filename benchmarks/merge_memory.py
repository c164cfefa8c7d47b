"""Peak extra memory of one merged-copy refresh (LoRA merged into the copy HFPolicy samples with): whole-dict vs
layer by layer; and the decode-speed cost of sampling through the trainer's own weights instead of a merged copy.

* ``whole dict`` — what :class:`~agentrl.algos.policy.HFPolicy` did before: :func:`merged_state_dict` (every adapted
  weight merged in fp32 at once), then copied into the sampler;
* ``layer by layer`` — :meth:`HFPolicy.update_weights` now: :func:`iter_merged_weights` streamed into the sampler,
  one layer's fp32 weight alive at a time.

Memory is the CPU allocator's bytes as torch's profiler records them (``profile_memory=True``: each op's own
allocations and every free, in order); the figure is the high-water mark of their running sum, i.e. the transient on
top of what existed before the call. Both variants refresh the same sampler from the same bf16 model (a many-layer
tiny Llama: ``--layers`` x ``--hidden``, LoRA r=16 on every linear layer). The speed part times greedy decoding of
``--rows`` x ``--tokens`` on a tiny fp32 model with a merged sampler copy vs ``share_weights=True``.

    python benchmarks/merge_memory.py              # 24 layers x 512 hidden, bf16
    python benchmarks/merge_memory.py --quick      # 8 layers x 256

Prints a table; never asserts.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.algos.models.lora import LoRAConfig, apply_lora, merged_state_dict
from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.hf import HFPolicy


class _NoTokenizer:
    """HFPolicy reads only ``pad_token_id`` from its tokenizer when sampling token ids."""

    pad_token_id = 0


def _model(layers: int, hidden: int, dtype) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
                         num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(dtype).eval()


def _trained(base):
    peft = apply_lora(copy.deepcopy(base), LoRAConfig(r=16, alpha=32))
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.01)
    return peft


def peak_extra_bytes(fn) -> int:
    """High-water mark of the CPU bytes allocated (minus freed) while ``fn`` runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # An op's own allocations (net of what it freed inside) are its self_cpu_memory_usage; frees outside any op
    # are "[memory]" events. In start order their running sum is the allocated-bytes timeline.
    now = most = 0
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        now += e.self_cpu_memory_usage
        most = max(most, now)
    return most


def whole_dict_refresh(policy: HFPolicy, peft) -> None:
    """The merged-copy refresh as it was: every merged weight in one dict, then copied."""
    merged = merged_state_dict(peft)
    with torch.no_grad():
        for name, p in policy.model.state_dict().items():
            if name in merged:
                p.copy_(merged[name])
    del merged


def decode_tok_s(policy: HFPolicy, rows: int, tokens: int) -> float:
    reqs = [GenerationRequest(list(range(5 + i, 37 + i)), tokens, seed=i) for i in range(rows)]
    sp = SamplingParams(temperature=0.0)
    policy.generate(reqs[:1], sp)  # warm-up
    t0 = time.perf_counter()
    out = policy.generate(reqs, sp)
    return sum(len(r.token_ids) for r in out) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="8 layers x 256 hidden")
    args = ap.parse_args()
    if args.quick:
        args.layers, args.hidden = 8, 256
    torch.set_num_threads(max(1, torch.get_num_threads()))

    peft = _trained(_model(args.layers, args.hidden, torch.bfloat16))
    policy = HFPolicy(peft, _NoTokenizer())  # the sampler copy exists from here on
    base_mib = sum(p.numel() * p.element_size() for p in policy.model.parameters()) / 2**20
    largest = max(m.get_base_layer().weight.numel() for _, m in peft.get_base_model().named_modules()
                  if hasattr(m, "lora_A")) * 4 / 2**20
    old = peak_extra_bytes(lambda: whole_dict_refresh(policy, peft)) / 2**20
    new = peak_extra_bytes(lambda: policy.update_weights(peft)) / 2**20
    print(f"Sampler refresh, {args.layers} layers x {args.hidden} hidden, bf16 ({base_mib:.1f} MiB of weights; "
          f"largest adapted layer {largest:.2f} MiB in fp32)\n")
    print("| merge | peak extra memory (MiB) | vs whole dict |")
    print("|---|---:|---:|")
    print(f"| whole dict (before) | {old:.1f} | 1.00x |")
    print(f"| layer by layer (now) | {new:.1f} | {new / old:.3f}x |")

    small = _trained(_model(4, 128, torch.float32))
    merged = decode_tok_s(HFPolicy(small, _NoTokenizer()), args.rows, args.tokens)
    shared = decode_tok_s(HFPolicy(small, _NoTokenizer(), share_weights=True), args.rows, args.tokens)
    print(f"\nSampling through the trainer's weights (share_weights=True), 4 layers x 128 hidden fp32, "
          f"{args.rows} rows x {args.tokens} tokens greedy:\n")
    print("| sampler | decode tok/s | vs merged copy |")
    print("|---|---:|---:|")
    print(f"| merged copy | {merged:.0f} | 1.00x |")
    print(f"| shared weights, adapter unmerged | {shared:.0f} | {shared / merged:.2f}x |")


if __name__ == "__main__":
    main()
