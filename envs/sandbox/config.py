"""What a sandbox is asked to do and what it returns: :class:`SandboxConfig`, :class:`ExecResult`, errors."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

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
