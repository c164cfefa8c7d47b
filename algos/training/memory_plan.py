"""Training memory: the activation-memory model that plans micro-batches, gradient checkpointing, glibc's heap.

:func:`memory_plan` resolves ``gradient_checkpointing`` / ``micro_batch_tokens='auto'`` against
``memory_budget_gb`` with :func:`activation_bytes_per_token` (``memory_budget_gb='auto'``: :func:`resolve_budget`, from
the memory this machine has free); :func:`set_gradient_checkpointing` and
:func:`checkpointed_layers` switch transformers' activation checkpointing; :func:`set_malloc_mmap_threshold` and
:func:`trim_heap` make glibc give freed memory back to the OS (``malloc_mmap_threshold_mb``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger(__name__)


# Peak-RSS growth of one GRPO step per token, in units of hidden_size x (bytes per parameter element), fitted
# (growth = FIXED_BYTES + tokens x per-token bytes) to benchmarks/memory.py-style steps of 4 x 512 and 16 x 512
# tokens on SmolLM2-135M bf16 (30 layers, hidden 576), LoRA r=16 all-linear, CPU: 1.45 MB/token without
# checkpointing (logprob_chunk 1024), 0.27 MB/token with it (logprob_chunk 256). The figures are RSS, so they
# include what the allocator keeps of freed transients, not only the tensors autograd saves (measured: 0.12 GiB
# saved at 2,048 checkpointed tokens against 1.6 GiB of RSS growth).
LAYER_UNITS = 42.0
"""One decoder layer per token, without checkpointing (1.45 MB / 30 layers / 1,152 bytes)."""
CHECKPOINT_UNITS = 6.5
"""One checkpointed layer per token: its kept input plus what the recomputation leaves in the allocator
((0.27 MB / 1,152 bytes - LAYER_UNITS) / 30 layers)."""
FIXED_BYTES = 2**30
"""The step's growth that does not scale with the micro-batch (LM-head chunks, gradients, optimizer state on
first use): 0.7-1.1 GiB in the fits above; the budget is taken net of it."""
DEFAULT_BUDGET_GB = 2.0
"""TrainConfig.memory_budget_gb's default, used when an update gets ``micro_batch_tokens='auto'`` and where
``memory_budget_gb='auto'`` cannot read the available memory."""
CPU_MICRO_BATCH_CAP = 2048
"""micro_batch_tokens='auto' on a CPU plans at most this many tokens, and gradient_checkpointing='auto' (with
'auto' tokens) is on only when the budget holds fewer than this without it. Measured on the main job's GRPO step
(2-core EPYC, bf16, ``python benchmarks/step_profile.py``, one run each): without checkpointing, 1,792-token
micro-batches updated in 40.0 s, 6,912-token ones in 50.7 s (the rows of a larger micro-batch are padded to its
longest: 24 % more tokens computed); with checkpointing at 1,792 tokens, 50.9 s. So a budget that holds this many
tokens without checkpointing spends the rest on nothing that buys speed. Not applied on a GPU, where larger
micro-batches fill the device (AUTO_CAP_GB bounds them)."""
GPU_CHECKPOINT_TOKENS = 4096
"""gradient_checkpointing='auto' with micro_batch_tokens='auto' on a GPU: on when the budget holds fewer tokens than
this without it (not measured on a GPU here: a larger budget then plans fewer, unrecomputed tokens, as the CPU rule
did before its cap)."""


def activation_bytes_per_token(model, checkpointing: bool) -> float:
    """Estimated bytes one token of a micro-batch adds to a training step's peak RSS: ``layers x LAYER_UNITS x
    hidden x element bytes`` without checkpointing; with it, every layer keeps ``CHECKPOINT_UNITS`` and one layer
    at a time is recomputed (``LAYER_UNITS``). Calibrated on one model and row length (see the constants above),
    not a bound: attention that saves ``T x T`` scores grows faster with long rows."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    hidden, layers = int(cfg.hidden_size), int(cfg.num_hidden_layers)
    elem = next(base.parameters()).element_size()
    unit = hidden * elem
    if checkpointing:
        return unit * (layers * CHECKPOINT_UNITS + LAYER_UNITS)
    return unit * layers * LAYER_UNITS


def _device_type(model) -> str:
    try:
        return next(model.parameters()).device.type
    except (AttributeError, StopIteration):
        return "cpu"


def memory_plan(model, *, gradient_checkpointing: bool | str, micro_batch_tokens: int | str,
                memory_budget_gb: float, min_tokens: int = 256) -> tuple[bool, int]:
    """``(checkpointing, micro_batch_tokens)`` for a run: the ``'auto'`` settings resolved against
    ``memory_budget_gb`` (GiB of activations per micro-batch, see :func:`activation_bytes_per_token`).

    ``gradient_checkpointing='auto'``: with a fixed ``micro_batch_tokens``, on when that many tokens would exceed
    the budget without it; with ``'auto'`` tokens, on when the budget holds fewer than the cap (on a CPU
    :data:`CPU_MICRO_BATCH_CAP`; on a GPU :data:`GPU_CHECKPOINT_TOKENS`) without it. ``micro_batch_tokens='auto'``:
    the tokens the budget holds (with or without checkpointing, as decided), at most the cap on a CPU (and on a GPU
    when 'auto' turned checkpointing on), rounded down to a multiple of 256, at least ``min_tokens``. With both
    'auto' the plan is monotone in the budget: a larger one never turns checkpointing on nor plans fewer tokens.
    """
    if gradient_checkpointing not in (True, False, "auto"):
        raise ValueError(f"gradient_checkpointing must be true, false or 'auto', got {gradient_checkpointing!r}")
    if micro_batch_tokens != "auto" and (isinstance(micro_batch_tokens, bool) or not isinstance(micro_batch_tokens, int)
                                         or micro_batch_tokens < 1):
        raise ValueError(f"micro_batch_tokens must be a positive int or 'auto', got {micro_batch_tokens!r}")
    if isinstance(memory_budget_gb, bool) or not isinstance(memory_budget_gb, (int, float)) or not memory_budget_gb > 0:
        raise ValueError(f"memory_budget_gb must be > 0 (GiB), got {memory_budget_gb!r}")
    budget = memory_budget_gb * 2**30 - FIXED_BYTES

    def fits(ckpt: bool) -> int:
        return max(0, int(budget // activation_bytes_per_token(model, ckpt)))

    on_cpu = _device_type(model) != "cuda"
    threshold = CPU_MICRO_BATCH_CAP if on_cpu else GPU_CHECKPOINT_TOKENS
    cap = threshold if on_cpu else None
    ckpt = gradient_checkpointing
    if ckpt == "auto":
        if micro_batch_tokens == "auto":
            ckpt = fits(False) < threshold
            if ckpt:  # checkpointed: no more tokens than the threshold (so a larger budget never plans fewer)
                cap = threshold
        else:
            ckpt = fits(False) < micro_batch_tokens
    if micro_batch_tokens == "auto":
        tokens = (fits(ckpt) if cap is None else min(fits(ckpt), cap)) // 256 * 256
        if tokens < min_tokens:
            logger.warning("memory_budget_gb=%s holds about %d tokens of %s; using micro_batch_tokens=%d",
                           memory_budget_gb, tokens, type(model).__name__, min_tokens)
        return bool(ckpt), max(tokens, min_tokens)
    return bool(ckpt), int(micro_batch_tokens)


AUTO_FRACTION = 0.5
"""memory_budget_gb='auto' plans with this share of the memory left once what the run still needs is set aside: the
activation model is a target, not a bound (one update grew the RSS by 1.70 GiB at a 2 GiB target with the mmap
threshold, 4.60 GiB without it), other processes may take memory later, and a planned budget that is short costs a
recomputation while one that is too large costs the run (swap or the OOM killer)."""
AUTO_CAP_GB = 16.0
"""memory_budget_gb='auto' plans at most this many GiB: ~11,000 tokens of SmolLM2-135M without checkpointing, more
than the decoder tokens of a main-job update (~7,800), and within 3x of the micro-batches the activation model was
fitted on; a larger machine keeps the rest."""
AUTO_FLOOR_GB = FIXED_BYTES / 2**30
"""memory_budget_gb='auto' plans at least the part that does not scale with the micro-batch (memory_plan then warns
and uses its smallest micro-batch, checkpointed)."""


def available_memory(device: Any = None) -> tuple[int, str]:
    """Bytes this process may still take now and where the figure comes from: on a CUDA ``device`` its free memory
    (``torch.cuda.mem_get_info``); otherwise the host's available memory (Linux ``MemAvailable``: free memory plus
    the page cache the kernel can drop), by psutil where it is installed, else ``/proc/meminfo``, else
    ``os.sysconf`` free pages. Raises (OSError, ValueError, ...) where none can be read."""
    kind = getattr(device, "type", str(device or "cpu").split(":")[0])
    if kind == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0]), f"free on {device}, torch.cuda.mem_get_info"
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available), "available, psutil"
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable, /proc/meminfo"
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free pages, os.sysconf"


def _nbytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def still_needed(model, *, kv_tokens: int = 0, policy_copy: bool = False) -> dict[str, int]:
    """Bytes the run will still allocate after the plan is made (the model's weights are loaded by then, so they
    are no longer in the available memory): the optimizer's AdamW moments and the gradients (3 x the trainable
    parameters' bytes; memory_plan's fixed part counts them too, so this errs on the safe side), the in-process
    sampler's KV cache (``kv_tokens`` of context x layers x 2 x key/value heads x head size x element bytes) and
    the merged copy of the base weights it samples through (``policy_copy``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or int(cfg.hidden_size) // heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    params = list(model.parameters())
    elem = params[0].element_size()
    return {"optimizer": 3 * _nbytes(p for p in params if p.requires_grad),
            "KV cache": kv_tokens * 2 * int(cfg.num_hidden_layers) * kv_heads * head_dim * elem,
            "policy copy": _nbytes(p for p in params if not p.requires_grad) if policy_copy else 0}


def auto_budget(available: int, needed: dict[str, int], *, processes: int = 1) -> float:
    """memory_budget_gb='auto': ``AUTO_FRACTION x (available - needed) / processes`` GiB (``processes``: the ranks
    that share this memory), within ``[AUTO_FLOOR_GB, AUTO_CAP_GB]``."""
    free = (available - sum(needed.values())) / max(1, processes)
    return min(AUTO_CAP_GB, max(AUTO_FLOOR_GB, AUTO_FRACTION * free / 2**30))


def resolve_budget(config, model, policy=None, *, device: Any = None,
                   read: Callable[[Any], tuple[int, str]] | None = None) -> tuple[float, str]:
    """``(GiB, words for the log)``: ``config.memory_budget_gb`` (a TrainConfig), ``'auto'`` resolved by
    :func:`auto_budget` from ``read(device)`` (default :func:`available_memory`) less :func:`still_needed` (the
    sampler's needs only where the algorithm samples in this process: no ``policy`` yet or an ``HFPolicy``; its KV
    cache at the policy's ``max_batch_tokens``, at most every row of a step at ``collector.max_total_tokens``).
    Where the memory cannot be read: :data:`DEFAULT_BUDGET_GB`, with one warning. Ranks on one host
    (``LOCAL_WORLD_SIZE``) split its memory; ranks on their own GPUs do not."""
    budget = config.memory_budget_gb
    if budget != "auto":
        return budget, str(budget)
    try:
        available, source = (read or available_memory)(device)
    except Exception as err:  # noqa: BLE001 - any failure to read: the fixed default, said once
        logger.warning("memory_budget_gb=auto: the available memory could not be read (%s: %s); using the fixed "
                       "default memory_budget_gb=%s", type(err).__name__, err, DEFAULT_BUDGET_GB)
        return DEFAULT_BUDGET_GB, f"auto, memory unreadable: the default {DEFAULT_BUDGET_GB}"
    from agentrl.algos.objectives import algorithm_class

    in_process, copy, bound = algorithm_class(config.algo).needs_rollouts, False, config.policy_max_batch_tokens
    if in_process and policy is None:
        copy = not config.policy_shares_weights
    elif in_process:
        from agentrl.algos.policy.hf import HFPolicy

        in_process = isinstance(policy, HFPolicy)
        copy = in_process and not policy.share_weights and policy._copy is None
        bound = getattr(policy, "max_batch_tokens", bound)
    rows = config.tasks_per_step * config.group_size * config.collector.max_total_tokens
    kv_tokens = min(rows, bound or rows) if in_process else 0
    needed = still_needed(model, kv_tokens=kv_tokens, policy_copy=copy)
    on_gpu = getattr(device, "type", str(device or "cpu").split(":")[0]) == "cuda"
    processes = 1 if on_gpu else int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    budget = auto_budget(available, needed, processes=processes)
    gib = 2**30
    parts = ", ".join(f"{k} {v / gib:.2f}" for k, v in needed.items() if v)
    words = (f"auto: {budget:.2f} GiB = {AUTO_FRACTION:g} x ({available / gib:.2f} GiB available [{source}] - "
             f"{sum(needed.values()) / gib:.2f} GiB still needed [{parts or 'nothing'}])"
             + (f" / {processes} ranks" if processes > 1 else "") + f", within [{AUTO_FLOOR_GB:g}, {AUTO_CAP_GB:g}]")
    return budget, words


M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (malloc.h)."""


@functools.cache
def _glibc():
    """glibc as a ctypes library (loaded once: :func:`trim_heap` runs every step), or None where the C library is
    another (macOS, musl, Windows)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


def set_malloc_mmap_threshold(mib: int) -> bool:
    """Make glibc ``malloc`` serve blocks of at least ``mib`` MiB with ``mmap`` and unmap them when freed
    (``mallopt(M_MMAP_THRESHOLD)``), so an update's freed activations leave the process's RSS instead of staying
    in the heap for the next allocation. Process-wide and permanent for the process; it also switches off
    glibc's dynamic threshold, which otherwise rises to the largest block freed (up to 32 MiB) and keeps such
    blocks. Returns False where the C library is not glibc: nothing changes there."""
    if isinstance(mib, bool) or not isinstance(mib, int) or mib < 1:
        raise ValueError(f"malloc_mmap_threshold_mb must be a positive int (MiB) or null, got {mib!r}")
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, mib * 2**20))


def trim_heap() -> bool:
    """Give the free pages of glibc's heaps back to the OS (``malloc_trim(0)``): what many small freed tensors
    leave behind between steps. True when glibc released something; False otherwise or off glibc."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))


def set_gradient_checkpointing(model, enabled: bool) -> None:
    """Turn transformers' activation checkpointing of the decoder layers on or off (a PEFT model: on its base).

    Non-reentrant (``use_reentrant=False``): it needs no input that requires grad, so the hook transformers adds
    for the reentrant variant is removed again. A layer checkpoints only in a forward pass with grad enabled
    while the layer is in training mode, so sampling (``no_grad``, eval mode) and the no-grad logprob passes run
    as without it, KV cache included; :func:`checkpointed_layers` puts the layers in training mode for the
    update's forward passes, which otherwise run in eval mode.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not enabled:
        if checkpointing_layers(base):
            off = getattr(base, "activation_checkpointing_disable", None) or base.gradient_checkpointing_disable
            off()
        return
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(f"gradient_checkpointing: {type(base).__name__} does not support activation checkpointing; "
                         "set gradient_checkpointing=false")
    kwargs = {"use_reentrant": False}
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.x; the old name warns
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(base, "disable_input_require_grads"):
        base.disable_input_require_grads()


def checkpointing_layers(model) -> list:
    return [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)
            and hasattr(m, "_can_checkpoint_with_cache")]


@contextlib.contextmanager
def checkpointed_layers(model) -> Iterator[int]:
    """Inside: the checkpointing decoder layers themselves are in training mode (their sub-modules keep their
    mode, so dropout stays off in an eval-mode update); yields how many layers checkpoint (0: none)."""
    checkpointing = checkpointing_layers(model)
    layers = [m for m in checkpointing if not m.training]
    for m in layers:
        m.training = True
    try:
        yield len(checkpointing)
    finally:
        for m in layers:
            m.training = False
