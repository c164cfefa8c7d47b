"""One managed engine per node in a data-parallel run: local rank 0 starts it, the node's other ranks use it.

Under ``torchrun`` (or ``accelerate launch``) with more than one process per node (``LOCAL_WORLD_SIZE``),
:func:`~agentrl.algos.policy.engine.start_engine_policy` starts the server on local rank 0 only and writes its
address to a folder of this node's temporary directory, named after the launcher's process (the parent every local
rank shares) and the node (``GROUP_RANK``); the other local ranks wait for that file and sample through the same
server. When its run ends, local rank 0 waits (up to :data:`DONE_TIMEOUT_S`) until the other local ranks have closed
their clients, then stops the server.

Where it runs and how much it takes is :class:`EngineConfig` (``engine.*`` keys of a training run), resolved for
this node by :func:`engine_placement`: the devices (``CUDA_VISIBLE_DEVICES`` of the engine process only), vLLM's
memory share and its tensor/data parallel sizes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.algos._io import atomic_write_text

#: How long local rank 0 waits for the other local ranks to close their clients before it stops the server.
DONE_TIMEOUT_S = 120.0
SERVER_FILE = "server.json"


@dataclass(frozen=True)
class NodeShare:
    """This rank's part in sharing one engine per node."""

    local_rank: int
    local_world: int
    folder: Path
    """Where local rank 0 publishes the server and the other local ranks say they are done."""

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> NodeShare | None:
        """The share the launcher's variables describe; None with one process on this node."""
        env = os.environ if env is None else env
        local_world = int(env.get("LOCAL_WORLD_SIZE", "1") or 1)
        if local_world <= 1:
            return None
        name = f"launcher-{os.getppid()}-node{env.get('GROUP_RANK', '0')}"
        return cls(int(env.get("LOCAL_RANK", "0") or 0), local_world,
                   Path(tempfile.gettempdir()) / "agentrl-engines" / name)

    @property
    def starts(self) -> bool:
        """Local rank 0 starts (and stops) the node's server."""
        return self.local_rank == 0

    def publish(self, url: str, model: str) -> None:
        """Local rank 0: the server runs at ``url`` serving ``model``."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        atomic_write_text(self.folder / SERVER_FILE, json.dumps({"url": url, "model": model, "pid": os.getpid()}))

    def wait_for_server(self, timeout_s: float) -> dict[str, Any]:
        """Another local rank: the ``{"url", "model"}`` local rank 0 published, once its server lists the model.

        Raises:
            RuntimeError: nothing published and healthy within ``timeout_s`` (local rank 0's log says why).
        """
        import requests

        deadline = time.monotonic() + timeout_s
        path = self.folder / SERVER_FILE
        while time.monotonic() < deadline:
            try:
                info = json.loads(path.read_text())
                models = requests.get(f"{info['url']}/v1/models", timeout=5).json()["data"]
                if any(m.get("id") == info["model"] for m in models):
                    return info
            except (OSError, ValueError, KeyError, TypeError, AttributeError, requests.RequestException):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"local rank {self.local_rank}: local rank 0 published no running engine in {path} within "
                           f"{timeout_s:.0f} s (its engine log says why)")

    def done(self) -> None:
        """Another local rank: its client is closed; local rank 0 may stop the server."""
        try:
            (self.folder / f"done-{self.local_rank}").touch()
        except OSError:
            pass

    def wait_for_others(self, timeout_s: float = DONE_TIMEOUT_S) -> None:
        """Local rank 0: wait until every other local rank is :meth:`done` (at most ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while (len(list(self.folder.glob("done-*"))) < self.local_world - 1 and time.monotonic() < deadline):
            time.sleep(0.2)

    def remove(self) -> None:
        """Local rank 0, after the server stopped: the folder goes."""
        shutil.rmtree(self.folder, ignore_errors=True)


#: Up to this many usable CPUs the CPU build's OpenMP threads are bound to all of them (:func:`cpu_thread_binding`).
SMALL_MACHINE_CPUS = 4


def cpu_thread_binding(env: Mapping[str, str]) -> dict[str, str]:
    """The CPU build's thread binding on a small machine: all usable CPUs, none reserved.

    vLLM's ``VLLM_CPU_OMP_THREADS_BIND=auto`` reserves one core for its scheduler; on a 2-core machine that halves the
    cores that sample, while the scheduler mostly waits (``benchmarks/vllm_cpu_binding.py`` measures both bindings).
    Machines with more than :data:`SMALL_MACHINE_CPUS` usable CPUs keep vLLM's default, and
    a ``VLLM_CPU_OMP_THREADS_BIND`` of the caller's is never replaced. GPU builds ignore both variables."""
    if "VLLM_CPU_OMP_THREADS_BIND" in env:
        return {}
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cpus) > SMALL_MACHINE_CPUS:
        return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus)), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


#: vLLM's memory share when a trainer rank computes on one of its GPUs (:attr:`EngineConfig.gpu_memory_utilization`).
SHARED_GPU_MEMORY = 0.4


@dataclass
class EngineConfig:
    """Where the managed inference engine (``--engine vllm``) runs and how much it takes: one engine per node,
    started by the node's local rank 0 (docs/engines.md). On a CPU build these keys are checked and the flags
    passed, but place nothing."""

    devices: int | str | list[int | str] | None = None
    """The GPUs of the engine, as CUDA_VISIBLE_DEVICES of the engine process only (engine.devices=6,7 or [6, 7]:
    ids or UUIDs, as CUDA_VISIBLE_DEVICES takes them; the trainer ranks keep theirs); as many as
    tensor_parallel_size x data_parallel_size. null: the devices the trainer sees (vLLM takes the first
    tensor_parallel_size x data_parallel_size of them)."""
    gpu_memory_utilization: float | None = None
    """vLLM's --gpu-memory-utilization: the share of each of its GPUs' memory the engine takes (weights and KV
    cache). null: 0.4 when a trainer rank of this node computes on one of the engine's GPUs (the trainer keeps
    60% for its copy of the weights, adapter, optimizer and activations), else vLLM's own default."""
    tensor_parallel_size: int = 1
    """vLLM's --tensor-parallel-size: GPUs one copy of the model is split over."""
    data_parallel_size: int = 1
    """vLLM's --data-parallel-size: copies of the model the one server balances requests over (each LoRA version
    is still loaded once, through the server)."""

    @property
    def device_list(self) -> list[str]:
        """:attr:`devices` as a list (empty: unset)."""
        if self.devices is None:
            return []
        items = self.devices if isinstance(self.devices, list) else str(self.devices).split(",")
        return [str(d).strip() for d in items if str(d).strip()]

    def validate(self) -> None:
        """Raises ``ValueError`` naming the key and what it accepts."""
        for key in ("tensor_parallel_size", "data_parallel_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"engine.{key} must be an int >= 1, got {value!r}")
        share = self.gpu_memory_utilization
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float)) or
                                  not 0 < share <= 1):
            raise ValueError(f"engine.gpu_memory_utilization must be in (0, 1] or null, got {share!r}")
        devices, size = self.device_list, self.tensor_parallel_size * self.data_parallel_size
        if self.devices is not None and (not devices or len(set(devices)) != len(devices) or len(devices) != size):
            raise ValueError(f"engine.devices={self.devices!r} must name {size} different devices, comma-separated "
                             f"(engine.tensor_parallel_size x engine.data_parallel_size = {size}), e.g. "
                             f"{','.join(map(str, range(8 - size, 8)))!r}")


@dataclass(frozen=True)
class EnginePlacement:
    """:class:`EngineConfig` resolved for this node: what the engine process gets."""

    devices: str | None = None
    """``CUDA_VISIBLE_DEVICES`` of the engine process (None: the trainer's, inherited)."""
    args: tuple[str, ...] = field(default=())
    """Server flags (vLLM's)."""

    def __bool__(self) -> bool:
        return self.devices is not None or bool(self.args)


def trainer_devices(env: Mapping[str, str]) -> list[str]:
    """The GPUs this node's trainer ranks compute on (local rank ``k`` on CUDA device ``k`` of those visible), as
    ``CUDA_VISIBLE_DEVICES`` entries."""
    local_world = int(env.get("LOCAL_WORLD_SIZE", "1") or 1)
    visible = [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",")] if env.get("CUDA_VISIBLE_DEVICES") else None
    return [visible[k] if visible is not None and k < len(visible) else str(k) for k in range(local_world)]


def engine_placement(config: EngineConfig, env: Mapping[str, str] | None = None, *,
                     trainer_on_gpu: bool) -> EnginePlacement:
    """What the engine of this node gets for ``config`` (``env``: the launcher's variables, default this
    process's; ``trainer_on_gpu``: whether the trainer ranks compute on CUDA devices). The memory share left
    unset is :data:`SHARED_GPU_MEMORY` when the engine's devices include a trainer rank's, else vLLM's default."""
    env = os.environ if env is None else env
    config.validate()
    size = config.tensor_parallel_size * config.data_parallel_size
    engine = config.device_list
    if not engine:  # vLLM takes the first `size` devices it sees: the trainer's
        visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        engine = (visible or [str(k) for k in range(size)])[:size]
    share = config.gpu_memory_utilization
    if share is None and trainer_on_gpu and set(engine) & set(trainer_devices(env)):
        share = SHARED_GPU_MEMORY
    args: list[str] = []
    if share is not None:
        args += ["--gpu-memory-utilization", f"{share:g}"]
    if config.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.data_parallel_size > 1:
        args += ["--data-parallel-size", str(config.data_parallel_size)]
    return EnginePlacement(",".join(config.device_list) if config.devices is not None else None, tuple(args))
