""":class:`RemoteSandbox`: run code on a SandboxFusion service (``POST /run_code``) instead of locally.

    from agentrl.envs.sandbox.remote import RemoteSandbox

    sb = RemoteSandbox("http://sandbox-host:8080")
    gym.make("AgentRL/PythonMath-v0", sandbox=sb)

The request is SandboxFusion's ``RunCodeRequest`` (``code``, ``language``, ``run_timeout``, ``stdin``,
``memory_limit_MB``); the response's ``status`` (``Success`` / ``Failed`` / ``SandboxError``) and
``run_result`` (``status`` ``Finished`` / ``TimeLimitExceeded`` / ``Error``, ``stdout``, ``stderr``,
``return_code``) become an :class:`~agentrl.envs.sandbox.ExecResult` with the local sandbox's rules: streams
tail-capped to ``max_output_bytes`` and sanitised. A failure of the service (HTTP 5xx after retries, a
``SandboxError``, no answer before the call's deadline, connection refused, a malformed body) comes back as
``status="sandbox_error"`` with the reason in ``stderr``; ``run`` never raises for it. Isolation is the
service's, not this process's (``docs/sandbox-security.md``).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs.sandbox.config import ExecResult, Status
from agentrl.envs.sandbox.protocol import ExecStats
from agentrl.envs.sandbox.sanitize import sanitize_output

logger = logging.getLogger(__name__)

_RETRY_HTTP = (429, 502, 503, 504, 500)


@dataclass
class RemoteSandboxConfig:
    """How a :class:`RemoteSandbox` calls the service."""

    url: str
    """Base URL of the SandboxFusion service (``http://host:8080``); ``/run_code`` is appended."""
    timeout_s: float = 10.0
    """Default run limit of one execution, sent as ``run_timeout`` (``run(..., timeout=)`` overrides it)."""
    overhead_s: float = 20.0
    """Time the service may add to the run limit (queueing, container start). One ``run`` call, every retry
    included, ends within ``timeout + overhead_s``; a service that has not answered by then gives
    ``sandbox_error``."""
    max_concurrency: int = 8
    """Requests in flight at once from this object (further calls wait)."""
    max_retries: int = 2
    """Extra attempts after a connection error, a request timeout or HTTP 429/5xx, while time is left."""
    backoff_s: float = 0.5
    """First wait before a retry; doubles each retry (with ±25 % jitter)."""
    memory_mb: int | None = None
    """Sent as ``memory_limit_MB``; ``None``: the service's default."""
    max_output_bytes: int = 65_536
    """Bytes of stdout and of stderr kept, taken from the end of each stream (as the local sandbox does)."""
    sanitize: bool = True
    """Neutralise chat-template special tokens in the output (:func:`sanitize_output`)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra HTTP headers (e.g. ``Authorization`` for a gateway in front of the service)."""
    language: str = "python"
    """SandboxFusion's language of the code."""

    def __post_init__(self):
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        if self.timeout_s <= 0 or self.overhead_s <= 0:
            raise ValueError("timeout_s and overhead_s must be positive")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")


class _ServiceFault(Exception):
    """The service failed to give a result; ``retryable`` when another attempt may succeed."""

    def __init__(self, detail: str, retryable: bool):
        super().__init__(detail)
        self.retryable = retryable


class RemoteSandbox:
    """A :class:`~agentrl.envs.sandbox.protocol.CodeSandbox` backed by a SandboxFusion ``/run_code`` service.

    Args:
        url: the service's base URL, or a :class:`RemoteSandboxConfig`.
        **overrides: fields of :class:`RemoteSandboxConfig` (``RemoteSandbox(url, timeout_s=5)``).

    Thread-safe (a ``requests`` session per thread); nothing is contacted until the first :meth:`run`.
    """

    def __init__(self, url: str | RemoteSandboxConfig, **overrides: Any):
        if isinstance(url, RemoteSandboxConfig):
            cfg = RemoteSandboxConfig(**{**url.__dict__, **overrides})
        else:
            cfg = RemoteSandboxConfig(url=url, **overrides)
        self.config = cfg
        self.endpoint = cfg.url.rstrip("/") + "/run_code"
        self._sem = threading.BoundedSemaphore(cfg.max_concurrency)
        self._local = threading.local()
        self._sessions: list[Any] = []
        self._sessions_lock = threading.Lock()
        self._stats = ExecStats(retries=0)
        self._closed = False

    # ------------------------------------------------------------------ CodeSandbox
    def run(self, code: str, timeout: float | None = None, *, stdin: str | None = None) -> ExecResult:
        """Run ``code`` on the service; never raises for the code or for a service failure (see the module
        docstring). ``timeout`` defaults to ``config.timeout_s``."""
        if self._closed:
            raise RuntimeError("this RemoteSandbox is closed")
        timeout = float(self.config.timeout_s if timeout is None else timeout)
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        t0 = time.monotonic()
        body: dict[str, Any] = {"code": str(code), "language": self.config.language, "run_timeout": timeout,
                                "stdin": stdin or ""}
        if self.config.memory_mb is not None:
            body["memory_limit_MB"] = int(self.config.memory_mb)
        try:
            reply = self._post(body, end=t0 + timeout + self.config.overhead_s)
            result = self._result(reply, time.monotonic() - t0)
        except _ServiceFault as e:
            logger.warning("remote sandbox %s: %s", self.config.url, e)
            result = self._finish("sandbox_error", "", f"The remote sandbox failed: {e}\n", None,
                                  time.monotonic() - t0)
        self._stats.record(result)
        return result

    def stats(self) -> dict[str, float]:
        """calls, ok, errors, timeouts, sandbox_errors, retries and latency figures since creation."""
        return self._stats.snapshot()

    def close(self) -> None:
        """Close the HTTP sessions (idempotent); later :meth:`run` calls raise ``RuntimeError``."""
        self._closed = True
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
        for s in sessions:
            s.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> RemoteSandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteSandbox({self.config.url!r}, max_concurrency={self.config.max_concurrency})"

    # ------------------------------------------------------------------ HTTP
    def _session(self) -> Any:
        import requests

        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = requests.Session()
            s.headers.update(self.config.headers)
            with self._sessions_lock:
                self._sessions.append(s)
        return s

    def _post(self, body: dict[str, Any], end: float) -> dict[str, Any]:
        """The JSON reply of ``POST /run_code``, with retries while time is left before ``end``."""
        import requests

        last: _ServiceFault | None = None
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                delay = self.config.backoff_s * 2 ** (attempt - 1) * random.uniform(0.75, 1.25)
                if time.monotonic() + delay >= end:
                    break
                self._stats.add("retries")
                time.sleep(delay)
            left = end - time.monotonic()
            if left <= 0 or not self._sem.acquire(timeout=left):
                last = _ServiceFault(f"no free request slot before the deadline; {last or ''}".rstrip("; "), False)
                break
            try:
                left = max(0.001, end - time.monotonic())
                resp = self._session().post(self.endpoint, json=body, timeout=(left, left))
                if resp.status_code != 200:
                    raise _ServiceFault(f"HTTP {resp.status_code} from {self.endpoint}",
                                        resp.status_code in _RETRY_HTTP)
                try:
                    reply = resp.json()
                except ValueError:
                    raise _ServiceFault("the reply is not JSON", False) from None
                if not isinstance(reply, dict):
                    raise _ServiceFault("the reply is not a JSON object", False)
                return reply
            except _ServiceFault as e:
                last = e
            except requests.Timeout:
                last = _ServiceFault(f"no reply within the call's deadline "
                                     f"(run limit + overhead_s = {body['run_timeout'] + self.config.overhead_s:g} s)",
                                     True)
            except requests.RequestException as e:
                last = _ServiceFault(f"cannot reach {self.endpoint} ({type(e).__name__})", True)
            finally:
                self._sem.release()
            if not last.retryable:
                break
        assert last is not None
        raise last

    # ------------------------------------------------------------------ results
    def _result(self, reply: dict[str, Any], latency: float) -> ExecResult:
        status, message = reply.get("status"), str(reply.get("message") or "")
        if status == "SandboxError":
            raise _ServiceFault(f"SandboxError: {message or 'no message'}", False)
        run = reply.get("run_result")
        if status not in ("Success", "Failed"):
            raise _ServiceFault(f"unexpected status {status!r} in the reply", False)
        if not isinstance(run, dict):
            compile_ = reply.get("compile_result")
            stderr = compile_.get("stderr", "") if isinstance(compile_, dict) else ""
            if status == "Success":
                raise _ServiceFault("the reply has no run_result", False)
            return self._finish("error", "", str(stderr or message or "the code was not run"), None, latency)
        stdout, stderr = str(run.get("stdout") or ""), str(run.get("stderr") or "")
        rc = run.get("return_code")
        rc = rc if isinstance(rc, int) and not isinstance(rc, bool) else None
        kind: Status
        if run.get("status") == "TimeLimitExceeded":
            kind = "timeout"
        elif run.get("status") == "Finished":
            kind = "ok" if rc == 0 and status == "Success" else "error"
        elif run.get("status") == "Error":
            kind = "error"
        else:
            raise _ServiceFault(f"unexpected run_result status {run.get('status')!r}", False)
        return self._finish(kind, stdout, stderr, rc, latency)

    def _finish(self, status: Status, stdout: str, stderr: str, rc: int | None, latency: float) -> ExecResult:
        out_b, err_b = stdout.encode("utf-8", "replace"), stderr.encode("utf-8", "replace")
        cap = self.config.max_output_bytes
        stdout, stderr = _tail(out_b, cap), _tail(err_b, cap)
        if self.config.sanitize:
            stdout, stderr = sanitize_output(stdout), sanitize_output(stderr)
        return ExecResult(stdout=stdout, stderr=stderr, status=status, returncode=rc, latency_s=latency,
                          truncated=len(out_b) > cap or len(err_b) > cap, stdout_bytes=len(out_b),
                          stderr_bytes=len(err_b))


def _tail(data: bytes, cap: int) -> str:
    """The last ``cap`` bytes of ``data`` as text (a character cut at the start is dropped)."""
    return data[-cap:].decode("utf-8", "ignore") if len(data) > cap else data.decode("utf-8", "replace")
