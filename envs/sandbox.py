"""An isolated, fast Python sandbox for model-written code (bubblewrap + a warm, forking worker).

    from agentrl.envs.sandbox import Sandbox

    with Sandbox() as sb:
        r = sb.run("import numpy as np; print(np.arange(4).sum())", timeout=5)
        r.status, r.stdout          # ('ok', '6\\n')
        sb.stats()                  # calls, ok, errors, timeouts, latency percentiles, ...

Isolation (``isolation="bwrap"``, the default; see ``docs/sandbox-security.md``)
    Each :class:`Sandbox` keeps up to ``max_concurrency`` warm workers. A worker is one bubblewrap sandbox:
    new pid, network, ipc, uts (and cgroup) namespaces — so no network at all, not even loopback to the host;
    a read-only view of ``/usr``, ``/etc`` and the interpreter's prefix (the trainer's own Python, so numpy and
    sympy are there when installed); ``/root``, ``/home``, the project tree and the rest of the host file
    system absent; private size-capped tmpfs at ``/tmp`` and ``/dev/shm``; minimal ``/dev`` and ``/proc``; no
    ``/sys``; a new session; death with the parent; an empty environment (``PATH``, ``HOME=/tmp``, ``LANG``
    and thread caps of 1 for OpenMP/OpenBLAS/MKL only). As root, mounts are made as root, then ``setpriv``
    drops to an unprivileged uid with no capabilities and ``no_new_privs`` as the very last step (the user
    namespace is *not* unshared: with it, switching to the unprivileged uid fails). As an ordinary user,
    bubblewrap also unshares the user namespace and maps the user to the unprivileged uid inside it (this
    needs unprivileged user namespaces, on by default in current distributions); nested user namespaces are
    disabled.

Speed
    Interpreter start-up dominates a call, so the worker starts once, pre-imports ``preload`` modules (numpy,
    sympy when installed), and forks a fresh child per execution. Every execution still starts from a clean
    state — a new process with a fresh ``__main__``, its own rlimits, its own session — and afterwards every
    process it left behind is killed and everything it wrote to ``/tmp`` and ``/dev/shm`` is deleted.

Limits (per execution)
    wall-clock ``timeout`` (the process group is killed, then the rest of the sandbox's processes), CPU
    seconds, address space, file size, process count (``RLIMIT_NPROC`` counts per uid host-wide, so every
    worker slot runs under its own uid), open files; output goes to temp files and only the last
    ``max_output_bytes`` of each stream come back, so a program that prints forever cannot fill the trainer's
    memory. Output is sanitised (:func:`sanitize_output`) so chat-template special tokens cannot be smuggled
    into the conversation.

``isolation="none"`` runs the same worker as a plain subprocess (empty environment, rlimits, process-group
kill, private working directory) but with **no** file-system, network or user isolation; it must be asked for
explicitly and logs a warning. Without bubblewrap the default refuses with :class:`SandboxUnavailable`, whose
message says how to install it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import re
import select
import shutil
import site
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
_WORKER_SOURCE_PATH = Path(__file__).with_name("_sandbox_worker.py")

INSTALL_HINT = (
    "bubblewrap (bwrap) is needed to run code in isolation. Install it with "
    "`sudo apt-get install -y bubblewrap` (Debian/Ubuntu), `sudo dnf install bubblewrap` (Fedora/RHEL) or "
    "`sudo pacman -S bubblewrap` (Arch). To run model-written code WITHOUT isolation (it can then read your "
    "files and environment and reach the network), pass isolation='none' explicitly."
)

Status = Literal["ok", "error", "timeout", "sandbox_error"]


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be provided on this machine (the message says what to do)."""


class SandboxError(RuntimeError):
    """A worker could not be started or broke the protocol (an infrastructure fault, not the code's)."""


# ---------------------------------------------------------------------------------------------- config & results


@dataclass
class SandboxConfig:
    """How a :class:`Sandbox` isolates and limits executions. Every field has a safe default."""

    isolation: Literal["bwrap", "none"] = "bwrap"
    """``"bwrap"``: bubblewrap namespaces + unprivileged uid. ``"none"``: a plain subprocess (opt-out, unsafe)."""
    timeout_s: float = 10.0
    """Default wall-clock limit of one execution (``run(..., timeout=)`` overrides it)."""
    cpu_s: float | None = None
    """CPU-seconds limit (``RLIMIT_CPU``); default: the wall-clock timeout rounded up, plus one."""
    memory_mb: int = 2048
    """Address-space limit (``RLIMIT_AS``) of an execution, in MiB (the preloaded modules count towards it)."""
    file_size_mb: int = 16
    """Largest file an execution may write (``RLIMIT_FSIZE``), stdout/stderr included, in MiB."""
    max_processes: int = 64
    """Processes + threads an execution may have at once (``RLIMIT_NPROC``, per worker slot uid)."""
    max_open_files: int = 256
    """Open file descriptors per process (``RLIMIT_NOFILE``)."""
    tmp_size_mb: int = 64
    """Size of the private tmpfs at ``/tmp`` (and of the one at ``/dev/shm``), in MiB."""
    max_output_bytes: int = 65_536
    """Bytes of stdout and of stderr that come back, taken from the end of each stream."""
    max_concurrency: int = 4
    """Warm workers, i.e. executions that may run at once; further calls wait for a free worker."""
    preload: tuple[str, ...] = ("numpy", "numpy.random", "numpy.linalg", "sympy")
    """Modules the warm worker imports once (those not installed are skipped), so snippets import them free."""
    uid: int = 65534
    """Unprivileged uid/gid of the first worker slot; further slots use ``uid - 1``, ``uid - 2``, ... ."""
    python: str | None = None
    """Interpreter to run inside; default: the trainer's own (``sys.executable``), mounted read-only."""
    extra_ro_paths: tuple[str, ...] = ()
    """More host paths to mount read-only at the same place (e.g. a data directory the code may read)."""
    sanitize: bool = True
    """Neutralise chat-template special tokens in the output (:func:`sanitize_output`)."""
    start_timeout_s: float = 120.0
    """How long a worker may take to start and preload its modules."""

    def __post_init__(self):
        if self.isolation not in ("bwrap", "none"):
            raise ValueError(f"isolation must be 'bwrap' or 'none', got {self.isolation!r}")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be positive")


@dataclass
class ExecResult:
    """The outcome of one execution."""

    stdout: str
    stderr: str
    status: Status
    """``"ok"`` (exit status 0), ``"error"`` (exception, non-zero exit, killed by a limit), ``"timeout"``
    (wall-clock or CPU limit), ``"sandbox_error"`` (the worker failed or was killed by the code)."""
    returncode: int | None = None
    """Exit status; negative for a signal (as in :mod:`subprocess`); ``None`` when unknown."""
    latency_s: float = 0.0
    """Wall-clock time of the whole ``run`` call as the caller saw it (waiting for a free worker included)."""
    truncated: bool = False
    """Whether stdout or stderr was longer than ``max_output_bytes`` (only the tail came back)."""
    stdout_bytes: int = 0
    """Total bytes the code wrote to stdout (before capping)."""
    stderr_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Stats:
    calls: int = 0
    ok: int = 0
    errors: int = 0
    timeouts: int = 0
    sandbox_errors: int = 0
    worker_starts: int = 0
    latency_total_s: float = 0.0
    recent: deque = field(default_factory=lambda: deque(maxlen=10_000))


# ---------------------------------------------------------------------------------------------- sanitising

#: Chat-template control strings (ChatML, Hermes/Qwen tool calls, Llama 3, Mistral) that model-written code
#: must not be able to print into the conversation. ``<|...|>`` tokens are matched generically as well.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<answer>", "</answer>", "<code>", "</code>", "<interpreter>", "</interpreter>", "<s>", "</s>",
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
)
_PIPE_TOKEN = re.compile(r"<\|[A-Za-z0-9_\-.: ]{1,64}\|>|<｜[^｜<>\n]{1,64}｜>")
_GUILLEMET = "\u2039"  # ‹ replaces the opening bracket, so the text stays readable but is no longer a token
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def sanitize_output(text: str, extra_tokens: tuple[str, ...] = ()) -> str:
    """Neutralise special tokens in program output: ``<|im_start|>`` becomes ``‹|im_start|>``, etc.

    Each token's first character is *replaced* (never deleted), so no new token can form from the pieces
    around a removed one. NUL and other C0 control characters (except tab, newline, carriage return) go too.
    """
    text = _CONTROL.sub("", text)
    text = _PIPE_TOKEN.sub(lambda m: _GUILLEMET + m.group(0)[1:], text)
    for tok in SPECIAL_TOKENS + tuple(extra_tokens):
        if tok in text:
            text = text.replace(tok, _GUILLEMET + tok[1:])
    return text


# ---------------------------------------------------------------------------------------------- uid slots

_UID_LOCK = threading.Lock()
_UIDS_IN_USE: set[int] = set()


def _take_uid(base: int) -> int:
    """A uid no other slot of this process uses (base, base-1, ...), so RLIMIT_NPROC budgets stay apart."""
    with _UID_LOCK:
        uid = base
        while uid in _UIDS_IN_USE:
            uid -= 1
        if uid < 1000:
            raise SandboxError("ran out of sandbox uids; close unused Sandbox objects")
        _UIDS_IN_USE.add(uid)
        return uid


def _release_uid(uid: int) -> None:
    with _UID_LOCK:
        _UIDS_IN_USE.discard(uid)


# ---------------------------------------------------------------------------------------------- command line


def bwrap_available() -> bool:
    """Whether the ``bwrap`` executable is on ``PATH``."""
    return shutil.which("bwrap") is not None


def _interpreter_paths(python: str) -> list[str]:
    """Host directories the interpreter needs: its prefixes and site-packages (deduplicated, existing)."""
    real = os.path.realpath(python)
    cands = [os.path.dirname(os.path.dirname(real)), sys.prefix, sys.base_prefix, sys.exec_prefix,
             sys.base_exec_prefix]
    if os.path.realpath(sys.executable) == real:
        cands += [sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        try:
            cands += site.getsitepackages()
        except AttributeError:
            pass
        user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
        if user_site:
            cands.append(user_site)
    out: list[str] = []
    for p in cands:
        if not p or not os.path.isdir(p):
            continue
        p = os.path.realpath(p)
        if any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            continue
        out = [q for q in out if not q.startswith(p.rstrip("/") + "/")] + [p]
    return out


_SYSTEM_DIRS = ("/usr", "/etc")
_MERGED_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def build_bwrap_command(cfg: SandboxConfig, uid: int, python: str, worker_args: list[str]) -> tuple[list[str], dict]:
    """The bubblewrap command line of one worker, and the worker's file-system facts (workdir, wipe list)."""
    args = ["bwrap"]
    for d in _SYSTEM_DIRS:
        if os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for link in _MERGED_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    tmp_bytes = str(cfg.tmp_size_mb * 1024 * 1024)
    args += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
    args += ["--dev", "/dev", "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm", "--proc", "/proc"]
    binds = _interpreter_paths(python) + [os.path.realpath(p) for p in cfg.extra_ro_paths]
    made: set[str] = {"/", "/tmp", "/dev", "/proc", *_SYSTEM_DIRS}
    keep_in_tmp: set[str] = set()
    for p in binds:
        if any(p == d or p.startswith(d + "/") for d in _SYSTEM_DIRS):
            continue  # already visible read-only
        for anc in _ancestors(p):
            if anc in made or any(anc.startswith(d + "/") for d in _SYSTEM_DIRS):
                continue
            # Directories bwrap creates on the way are 0700 by default, which the unprivileged uid cannot
            # traverse (the interpreter under /root/.pyenv would not start): make them 0755, empty.
            args += ["--perms", "0755", "--dir", anc]
            made.add(anc)
        args += ["--ro-bind", p, p]
        made.add(p)
        if p.startswith("/tmp/"):
            keep_in_tmp.add(Path(p).parts[2])
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
             "--hostname", "sandbox", "--new-session", "--die-with-parent", "--clearenv"]
    for k, v in _sandbox_env(python).items():
        args += ["--setenv", k, v]
    if os.geteuid() != 0:
        # Unprivileged: a user namespace maps us to `uid` inside; no nested namespaces for the code.
        args += ["--unshare-user", "--uid", str(uid), "--gid", str(uid), "--disable-userns"]
    args += ["--chdir", "/tmp", "--"]
    if os.geteuid() == 0:
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs"]
    args += [python, "-I", *worker_args]
    facts = {"workdir": "/tmp", "wipe": ["/tmp", "/dev/shm"], "keep": {"/tmp": sorted(keep_in_tmp)},
             "own_pid_namespace": True}
    return args, facts


def _sandbox_env(python: str) -> dict[str, str]:
    env = {
        "PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
    }
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS"):
        env[k] = "1"
    return env


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
        self._errlog = None
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
            facts = {"workdir": self._plain_dir, "wipe": [self._plain_dir], "keep": {},
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
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)  # bwrap and, through --die-with-parent, its whole pid namespace
                except (ProcessLookupError, PermissionError):
                    proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
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


class Sandbox:
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
        self._stats = _Stats()
        self._lock = threading.Lock()
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
                with self._lock:
                    self._stats.worker_starts += 1
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
        self._record(result)
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
                        with self._lock:
                            self._stats.worker_starts += 1
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
        with self._lock:
            s = self._stats
            lat = sorted(s.recent)
            out = {"calls": s.calls, "ok": s.ok, "errors": s.errors, "timeouts": s.timeouts,
                   "sandbox_errors": s.sandbox_errors, "worker_starts": s.worker_starts,
                   "latency_total_s": s.latency_total_s,
                   "latency_mean_s": s.latency_total_s / s.calls if s.calls else 0.0}
        out["latency_p50_s"] = _percentile(lat, 50)
        out["latency_p95_s"] = _percentile(lat, 95)
        return out

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __copy__(self) -> Sandbox:
        return self

    def __deepcopy__(self, memo: dict) -> Sandbox:
        # A handle on shared worker processes: copies (gymnasium.make deep-copies its kwargs) share them.
        return self

    def __repr__(self) -> str:
        return f"Sandbox(isolation={self.config.isolation!r}, max_concurrency={self.config.max_concurrency})"

    # ------------------------------------------------------------------ internals
    def _result(self, reply: dict[str, Any], latency: float) -> ExecResult:
        status = reply.get("status")
        if status not in ("ok", "error", "timeout", "sandbox_error"):
            status = "sandbox_error"
        stdout, stderr = str(reply.get("stdout", "")), str(reply.get("stderr", ""))
        if self.config.sanitize:
            stdout, stderr = sanitize_output(stdout), sanitize_output(stderr)
        rc = reply.get("returncode")
        return ExecResult(
            stdout=stdout, stderr=stderr, status=status, returncode=rc if isinstance(rc, int) else None,
            latency_s=latency, truncated=bool(reply.get("truncated", False)),
            stdout_bytes=int(reply.get("stdout_bytes", 0) or 0), stderr_bytes=int(reply.get("stderr_bytes", 0) or 0),
        )

    def _record(self, r: ExecResult) -> None:
        with self._lock:
            s = self._stats
            s.calls += 1
            s.latency_total_s += r.latency_s
            s.recent.append(r.latency_s)
            if r.status == "ok":
                s.ok += 1
            elif r.status == "timeout":
                s.timeouts += 1
            elif r.status == "sandbox_error":
                s.sandbox_errors += 1
            else:
                s.errors += 1


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


# ---------------------------------------------------------------------------------------------- shared default

_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide shared :class:`Sandbox` (default config), created on first use.

    Environments use it unless given their own, so many env instances share one set of warm workers.
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed:
            _DEFAULT = Sandbox()
        return _DEFAULT
