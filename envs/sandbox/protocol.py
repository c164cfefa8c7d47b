"""What an env needs from a sandbox (:class:`CodeSandbox`) and the execution statistics every sandbox keeps."""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import Protocol, runtime_checkable

from agentrl.envs.sandbox.config import ExecResult


class SandboxLimits(Protocol):
    """The part of a sandbox's configuration the envs read."""

    timeout_s: float
    """Default wall-clock limit of one execution."""
    max_concurrency: int
    """Executions that may run at once (Coding-v0 runs a program's tests this many at a time)."""


@runtime_checkable
class CodeSandbox(Protocol):
    """A place to run model-written Python: what ``CodeToolEnv`` (PythonMath-v0, Coding-v0) uses.

    Implementations: :class:`~agentrl.envs.sandbox.Sandbox` (local bubblewrap) and
    :class:`~agentrl.envs.sandbox.remote.RemoteSandbox` (a SandboxFusion service). ``run`` never raises for
    what the code does or for a failure of the service behind it: those come back as an :class:`ExecResult`
    with ``status`` ``"error"``, ``"timeout"`` or ``"sandbox_error"``; stdout and stderr are tail-capped and
    sanitised (:func:`~agentrl.envs.sandbox.sanitize_output`) as the sandbox's config says.
    """

    config: SandboxLimits

    def run(self, code: str, timeout: float | None = None, *, stdin: str | None = None) -> ExecResult:
        """Run ``code`` as ``python -c`` would, with ``stdin`` as standard input, within ``timeout`` seconds."""
        ...

    def stats(self) -> dict[str, float]:
        """Counters since creation; at least those of :class:`ExecStats`."""
        ...

    def close(self) -> None:
        """Release what the sandbox holds (idempotent)."""
        ...


class ExecStats:
    """Thread-safe counters of a sandbox's executions and their latencies (percentiles over the last 10,000)."""

    def __init__(self, **extra: float):
        self._lock = threading.Lock()
        self.calls = self.ok = self.errors = self.timeouts = self.sandbox_errors = 0
        self.latency_total_s = 0.0
        self._recent: deque[float] = deque(maxlen=10_000)
        self.extra: dict[str, float] = dict(extra)
        """Sandbox-specific counters (``worker_starts``, ``retries``), reported by :meth:`snapshot` too."""

    def record(self, r: ExecResult) -> None:
        """Count one finished execution."""
        with self._lock:
            self.calls += 1
            self.latency_total_s += r.latency_s
            self._recent.append(r.latency_s)
            if r.status == "ok":
                self.ok += 1
            elif r.status == "timeout":
                self.timeouts += 1
            elif r.status == "sandbox_error":
                self.sandbox_errors += 1
            else:
                self.errors += 1

    def add(self, key: str, n: float = 1) -> None:
        """Add ``n`` to the extra counter ``key``."""
        with self._lock:
            self.extra[key] = self.extra.get(key, 0) + n

    def snapshot(self) -> dict[str, float]:
        """calls, ok, errors, timeouts, sandbox_errors, the extra counters, latency_total_s, latency_mean_s,
        latency_p50_s, latency_p95_s."""
        with self._lock:
            out = {"calls": self.calls, "ok": self.ok, "errors": self.errors, "timeouts": self.timeouts,
                   "sandbox_errors": self.sandbox_errors, **self.extra, "latency_total_s": self.latency_total_s,
                   "latency_mean_s": self.latency_total_s / self.calls if self.calls else 0.0}
            lat = sorted(self._recent)
        out["latency_p50_s"] = _percentile(lat, 50)
        out["latency_p95_s"] = _percentile(lat, 95)
        return out


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)
