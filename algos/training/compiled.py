"""``torch.compile`` for the update's passes (issue 62, part 2): the cache-free parts of every decoder layer.

The TrainConfig key ``compile`` (``off`` | ``on`` | ``auto``) turns it on. What is compiled: each decoder layer's MLP
(its LoRA layers included, as :func:`~agentrl.algos.training.fused_lora.fused_lora` runs them) and its norms
(``*norm`` / ``*layernorm`` children), plus the decoder's final norm: the modules whose forward and backward are
chains of small elementwise ops around matmuls (RMSNorm, SiLU x up-projection, the LoRA product's add), which
inductor fuses (on CPU into C++ loops, on CUDA into Triton kernels). The attention stays eager: it runs the KV
caches of the shared-prefix passes (:func:`~agentrl.algos.objectives.logprobs._replay_safe_cache`, a Python object
made per pass, which would make every micro-batch a new graph) and SDPA's fused kernel is already one op.

One compiled function per module class (``torch.compile(cls.forward, dynamic=True)``), kept for the process: the
modules are inputs of the graph, not constants, so the layers of a model share its graphs, and shapes are symbolic,
so micro-batches of other lengths or row counts reuse them (dynamo still specialises a size of 1: a micro-batch of
one row is its own graph). Graphs are compiled on first use and reused across steps; :func:`compiled_passes`
reports the seconds spent compiling in each update (``time/compile``), so a step's time is not blamed on it.

Fall-back: before the first compiled call a probe compiles one module's forward and backward on a few tokens (a
C++ compiler missing on CPU, an unsupported op or a backend error shows there); if that, or any later compiled
call, raises, one line is logged and every module runs eager from then on (the failing call is re-run eager).

Numerics: inductor reorders and fuses the elementwise ops, so the results are eager's up to rounding (fp32: ~1e-6
relative; bf16: a few bf16 ulps on some elements; tests/algos/training/test_compiled.py measures the per-token
logprobs and the gradients against eager).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils.checkpoint

logger = logging.getLogger(__name__)

COMPILE_MODES = ("off", "on", "auto")

#: module class -> its compiled forward (one per process: graphs are reused across steps and models)
_COMPILED: dict[type, Any] = {}
_STATE: dict[str, Any] = {"failed": None, "probed": set()}  # probed: (class, dtype, device) keys
_LOCK = threading.Lock()


def wants_compile(mode: str, model) -> bool:
    """Whether ``mode`` compiles the update's passes of ``model``: ``on`` always, ``off`` never, ``auto`` where the
    model is on a CUDA device (on a CPU eager until issue 62's before/after measurement says compiling pays)."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    if mode == "auto":
        return next(model.parameters()).device.type == "cuda"
    return mode == "on"


def compile_targets(model) -> list[torch.nn.Module]:
    """The modules :func:`compiled_passes` compiles: each decoder layer's ``mlp`` and norms, and the decoder's
    final norm (none for a model without ``get_decoder().layers``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        return []
    out: list[torch.nn.Module] = []
    for layer in layers:
        for name, child in layer.named_children():
            if name == "mlp" or name.endswith("norm"):
                out.append(child)
    norm = getattr(decoder, "norm", None)
    if isinstance(norm, torch.nn.Module):
        out.append(norm)
    return out


def _compiled_forward(cls: type):
    fn = _COMPILED.get(cls)
    if fn is None:
        fn = _COMPILED[cls] = torch.compile(cls.forward, dynamic=True)
    return fn


def _fail(err: BaseException) -> None:
    if _STATE["failed"] is None:
        _STATE["failed"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        logger.warning("torch.compile unavailable (%s); the update runs eager", _STATE["failed"])


def _probe(module: torch.nn.Module) -> None:
    """Compile ``module``'s forward and backward on 3 tokens (once per class, dtype and device in a process: a
    backward graph may compile lazily, in a backward pass, where a failure could not fall back); a failure
    disables compiling."""
    p = next(module.parameters(), None)
    key = (type(module), p.dtype if p is not None else None, p.device if p is not None else None)
    if key in _STATE["probed"]:
        return
    _STATE["probed"].add(key)
    width = getattr(module, "hidden_size", None) or (p.shape[-1] if p is not None else None)
    if p is None or width is None:
        return
    try:
        x = torch.randn(2, 3, width, device=p.device, dtype=p.dtype, requires_grad=True)
        with torch.enable_grad():
            _compiled_forward(type(module))(module, x).float().sum().backward()
    except Exception as err:  # noqa: BLE001 - any failure of the compiler means: run eager
        _fail(err)
    finally:
        for q in module.parameters():
            q.grad = None


def failure() -> str | None:
    """Why compiling was turned off in this process (None: it was not)."""
    return _STATE["failed"]


#: raised through a compiled call without turning compiling off
_PASS_THROUGH: tuple[type[BaseException], ...] = tuple(
    e for e in (getattr(torch.utils.checkpoint, "_StopRecomputationError", None), torch.OutOfMemoryError) if e)


def _forward(self, *args, **kwargs):
    if _STATE["failed"] is None:
        try:
            return _compiled_forward(type(self))(self, *args, **kwargs)
        except _PASS_THROUGH:  # control flow (a checkpoint replay stopping early) or the machine's limits, not ours
            raise
        except Exception as err:  # noqa: BLE001 - the compiler failed on this call: eager from now on
            _fail(err)
    return type(self).forward(self, *args, **kwargs)


class CompileClock:
    """Seconds spent compiling while it is installed: between dynamo's compile-start and compile-end callbacks
    (tracing, AOT autograd's joint graph, inductor's code generation; a backward graph that inductor compiles
    lazily, in the first backward pass, is not in them and counts where it runs)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0: float | None = None

    def start(self, *_args) -> None:
        self._t0 = time.perf_counter()

    def end(self, *_args) -> None:
        if self._t0 is not None:
            self.seconds += time.perf_counter() - self._t0
            self._t0 = None


@contextlib.contextmanager
def compiled_passes(model, mode: str = "off") -> Iterator[CompileClock | None]:
    """Inside: the :func:`compile_targets` of ``model`` run compiled when :func:`wants_compile` (see the module
    docstring); yields a :class:`CompileClock` (``None`` when nothing is compiled). Backward passes run inside
    the block use the compiled graphs' backward. On exit each module has its own forward again."""
    targets = compile_targets(model) if wants_compile(mode, model) else []
    if not targets:
        yield None
        return
    clock = CompileClock()
    handler = torch._dynamo.callback_handler
    handler.register_start_callback(clock.start)
    handler.register_end_callback(clock.end)
    try:
        with _LOCK:
            for m in {type(t): t for t in targets}.values():  # one module of each class
                if not _STATE["failed"]:
                    _probe(m)
        if _STATE["failed"]:
            yield clock
            return
        for m in targets:
            m.forward = types.MethodType(_forward, m)
        try:
            yield clock
        finally:
            for m in targets:
                m.__dict__.pop("forward", None)
    finally:
        handler.remove_start_callback(clock.start)
        handler.remove_end_callback(clock.end)
