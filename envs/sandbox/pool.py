"""Warm worker processes and the :class:`Sandbox` that hands executions to them; the shared default."""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from agentrl.envs._resources import ProcessDefault, WorkerPool, stop_process
from agentrl.envs.sandbox.bwrap import (
    _release_uid,
    _sandbox_env,
    _take_uid,
    build_bwrap_command,
    bwrap_available,
)
from agentrl.envs.sandbox.config import (
    INSTALL_HINT,
    ExecResult,
    SandboxConfig,
    SandboxError,
    SandboxUnavailable,
    Status,
)
from agentrl.envs.sandbox.protocol import ExecStats
from agentrl.envs.sandbox.sanitize import sanitize_output

logger = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
#: The in-sandbox worker program (stdlib only), passed to the interpreter with ``-c``.
_WORKER_SOURCE_PATH = Path(__file__).with_name("_worker.py")


# ---------------------------------------------------------------------------------------------- spawning

_SPAWN_QUEUE: queue.SimpleQueue = queue.SimpleQueue()
_SPAWNER: threading.Thread | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawner_loop() -> None:
    while True:
        argv, kwargs, box, done = _SPAWN_QUEUE.get()
        try:
            box.append(subprocess.Popen(argv, **kwargs))
        except BaseException as e:  # handed back to the caller
            box.append(e)
        done.set()


def _spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """``Popen`` from one long-lived thread.

    ``bwrap --die-with-parent`` uses ``PR_SET_PDEATHSIG``, which fires when the *thread* that forked bwrap
    exits — so a worker started from a short-lived thread (a thread pool's, a collector's) would be killed
    under our feet. Every worker is therefore forked by this daemon thread, which lives as long as the process.
    """
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None or not _SPAWNER.is_alive():
            _SPAWNER = threading.Thread(target=_spawner_loop, name="agentrl-sandbox-spawner", daemon=True)
            _SPAWNER.start()
    box: list[Any] = []
    done = threading.Event()
    _SPAWN_QUEUE.put((argv, kwargs, box, done))
    done.wait()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


# ---------------------------------------------------------------------------------------------- one worker


class _Worker:
    """One warm worker process (a bwrap sandbox, or a plain subprocess with ``isolation="none"``)."""

    def __init__(self, cfg: SandboxConfig, uid: int):
        self.cfg = cfg
        self.uid = uid
        self.proc: subprocess.Popen | None = None
        self.preloaded: list[str] = []
        self._errlog: IO[bytes] | None = None
        self._plain_dir: str | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        cfg = self.cfg
        python = cfg.python or sys.executable
        src = _WORKER_SOURCE_PATH.read_text(encoding="utf-8")
        if cfg.isolation == "bwrap":
            argv, facts = build_bwrap_command(cfg, self.uid, python, ["-c", src, "{CFG}"])
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            self._plain_dir = tempfile.mkdtemp(prefix="agentrl-sandbox-")
            facts = {"workdir": self._plain_dir, "wipe": [self._plain_dir], "keep": [],
                     "own_pid_namespace": False}
            argv = [python, "-I", "-c", src, "{CFG}"]
            env = _sandbox_env(python) | {"HOME": self._plain_dir, "TMPDIR": self._plain_dir}
        wcfg = dict(facts, preload=list(cfg.preload), max_output_bytes=cfg.max_output_bytes)
        argv[argv.index("{CFG}")] = json.dumps(wcfg)
        self._errlog = tempfile.TemporaryFile()
        try:
            self.proc = _spawn(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog, env=env,
                cwd=self._plain_dir or "/", start_new_session=True, close_fds=True,
            )
        except OSError as e:
            self.close()
            raise SandboxError(f"cannot start the sandbox worker: {e}") from e
        try:
            hello = self._read_frame(time.monotonic() + cfg.start_timeout_s, limit=65_536)
        except SandboxError as e:
            err = self._stderr_text()
            self.close()
            raise SandboxError(f"the sandbox worker failed to start ({e}). Its stderr:\n{err}") from None
        self.preloaded = list(hello.get("preloaded", []))
        if cfg.isolation == "bwrap" and hello.get("uid") != self.uid:
            self.close()
            raise SandboxError(f"the sandbox worker runs as uid {hello.get('uid')}, expected {self.uid}")

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its answer; raises :class:`SandboxError` if the worker breaks."""
        assert self.proc is not None and self.proc.stdin is not None
        body = json.dumps(request).encode("utf-8")
        try:
            self.proc.stdin.write(_HEADER.pack(len(body)) + body)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise SandboxError(f"the sandbox worker is gone ({e})") from None
        # The worker enforces the timeout itself; this outer deadline only catches a worker that hangs
        # (e.g. stopped by the code) and a slow clean-up.
        deadline = time.monotonic() + float(request["timeout"]) + 10.0
        # JSON may escape every output byte as \\uXXXX: bound the frame accordingly.
        limit = 2 * 6 * self.cfg.max_output_bytes + 65_536
        return self._read_frame(deadline, limit=limit)

    def _read_frame(self, deadline: float, limit: int) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        head = self._read_exact(fd, _HEADER.size, deadline)
        (n,) = _HEADER.unpack(head)
        if n > limit:
            raise SandboxError(f"the sandbox worker sent an oversized frame ({n} bytes)")
        try:
            obj = json.loads(self._read_exact(fd, n, deadline).decode("utf-8"))
        except ValueError as e:
            raise SandboxError(f"the sandbox worker sent a malformed frame ({e})") from None
        if not isinstance(obj, dict):
            raise SandboxError("the sandbox worker sent a malformed frame")
        return obj

    @staticmethod
    def _read_exact(fd: int, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError("the sandbox worker did not answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise SandboxError("the sandbox worker exited")
            buf += chunk
        return bytes(buf)

    def _stderr_text(self) -> str:
        if self._errlog is None:
            return ""
        try:
            self._errlog.seek(0, os.SEEK_END)
            size = self._errlog.tell()
            self._errlog.seek(max(0, size - 4000))
            return self._errlog.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        proc, self.proc = self.proc, None
        # the group is bwrap and, through --die-with-parent, its whole pid namespace
        if proc is not None and not stop_process(proc, wait_s=10):
            logger.warning("sandbox worker %d did not exit after SIGKILL", proc.pid)
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None
        if self._plain_dir is not None:
            shutil.rmtree(self._plain_dir, ignore_errors=True)
            self._plain_dir = None


# ---------------------------------------------------------------------------------------------- the sandbox


def _close_workers(workers: list[_Worker], uids: list[int]) -> None:
    for w in workers:
        try:
            w.close()
        except Exception:  # clean-up at exit must not raise
            pass
    for uid in uids:
        _release_uid(uid)


class Sandbox(WorkerPool):
    """Runs Python code in isolated, resource-limited, fresh processes; thread-safe.

    Args:
        config: a :class:`SandboxConfig`; keyword arguments override its fields
            (``Sandbox(isolation="none", timeout_s=5)``).

    Raises:
        SandboxUnavailable: bubblewrap is missing (and ``isolation="none"`` was not asked for).

    Workers start lazily on first use (call :meth:`warm_up` to start them all now), are restarted when they
    die, and are stopped by :meth:`close`, by leaving a ``with`` block, when the object is garbage-collected,
    or at interpreter exit.
    """

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any):
        cfg = config or SandboxConfig()
        if overrides:
            cfg = SandboxConfig(**{**asdict(cfg), **overrides})
        self.config = cfg
        if cfg.isolation == "bwrap":
            if not bwrap_available():
                raise SandboxUnavailable(INSTALL_HINT)
            if os.geteuid() == 0 and shutil.which("setpriv") is None:
                raise SandboxUnavailable("setpriv (package util-linux) is needed to drop privileges inside the "
                                         "sandbox; install it with `apt-get install -y util-linux`.")
        else:
            logger.warning("Sandbox(isolation='none'): model-written code runs WITHOUT isolation — it can read "
                           "your files, reach the network and see other processes. Use only for trusted code.")
        uids = [_take_uid(cfg.uid) for _ in range(cfg.max_concurrency)]
        self._workers = [_Worker(cfg, uid) for uid in uids]
        self._free: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for w in self._workers:
            self._free.put(w)
        self._stats = ExecStats(worker_starts=0)
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_workers, self._workers, uids)

    # ------------------------------------------------------------------ public API
    def run(self, code: str, timeout: float | None = None, *, stdin: str | None = None) -> ExecResult:
        """Execute ``code`` as ``python -c`` would, in a fresh isolated process; never raises for bad code.

        Args:
            code: Python source.
            timeout: wall-clock limit in seconds (default ``config.timeout_s``).
            stdin: text the program reads on standard input (default: empty).

        Raises:
            SandboxError: only if a worker cannot be *started* (broken installation). Failures of a running
                worker come back as ``status="sandbox_error"``.
        """
        if self._closed:
            raise RuntimeError("this Sandbox is closed")
        t0 = time.perf_counter()
        timeout = float(self.config.timeout_s if timeout is None else timeout)
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        cpu = self.config.cpu_s if self.config.cpu_s is not None else math.ceil(timeout) + 1
        request = {
            "code": str(code),
            "stdin": stdin or "",
            "timeout": timeout,
            "limits": {
                "cpu_s": max(1, math.ceil(cpu)),
                "memory_bytes": self.config.memory_mb * 1024 * 1024,
                "file_size_bytes": self.config.file_size_mb * 1024 * 1024,
                "max_processes": self.config.max_processes,
                "max_open_files": self.config.max_open_files,
            },
        }
        worker = self._free.get()
        try:
            if not worker.alive:
                if worker.proc is not None:
                    worker.close()
                worker.start()
                self._stats.add("worker_starts")
            try:
                reply = worker.execute(request)
            except SandboxError as e:
                logger.warning("sandbox worker failed during an execution (%s); it will be restarted", e)
                worker.close()
                reply = {"status": "sandbox_error", "returncode": None, "stdout": "",
                         "stderr": "The sandbox worker stopped during this execution (the code may have killed "
                                   "it); nothing was returned.\n"}
        finally:
            self._free.put(worker)
        result = self._result(reply, time.perf_counter() - t0)
        self._stats.record(result)
        return result

    def warm_up(self) -> list[str]:
        """Start every worker now (in parallel) instead of on first use; returns the preloaded modules."""
        workers = [self._free.get() for _ in self._workers]
        try:
            errors: list[BaseException] = []

            def start(w: _Worker):
                try:
                    if not w.alive:
                        w.start()
                        self._stats.add("worker_starts")
                except BaseException as e:  # reported below
                    errors.append(e)

            threads = [threading.Thread(target=start, args=(w,)) for w in workers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            return list(workers[0].preloaded)
        finally:
            for w in workers:
                self._free.put(w)

    def stats(self) -> dict[str, float]:
        """Counters and latency figures since creation: calls, ok, errors, timeouts, sandbox_errors,
        worker_starts, latency_total_s, latency_mean_s, latency_p50_s, latency_p95_s (the percentiles over the
        last 10,000 calls)."""
        return self._stats.snapshot()

    def __repr__(self) -> str:
        return f"Sandbox(isolation={self.config.isolation!r}, max_concurrency={self.config.max_concurrency})"

    # ------------------------------------------------------------------ internals
    def _result(self, reply: dict[str, Any], latency: float) -> ExecResult:
        known = reply.get("status") in ("ok", "error", "timeout", "sandbox_error")
        status: Status = reply["status"] if known else "sandbox_error"
        stdout, stderr = str(reply.get("stdout", "")), str(reply.get("stderr", ""))
        if self.config.sanitize:
            stdout, stderr = sanitize_output(stdout), sanitize_output(stderr)
        rc = reply.get("returncode")
        return ExecResult(
            stdout=stdout, stderr=stderr, status=status, returncode=rc if isinstance(rc, int) else None,
            latency_s=latency, truncated=bool(reply.get("truncated", False)),
            stdout_bytes=int(reply.get("stdout_bytes", 0) or 0), stderr_bytes=int(reply.get("stderr_bytes", 0) or 0),
        )


# ---------------------------------------------------------------------------------------------- shared default

_DEFAULT: ProcessDefault[Sandbox] = ProcessDefault(Sandbox)


def default_sandbox() -> Sandbox:
    """The process-wide shared :class:`Sandbox` (default config), created on first use (again after a close).

    Environments use it unless given their own, so many env instances share one set of warm workers.
    """
    return _DEFAULT.get()
