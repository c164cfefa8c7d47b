"""The HTTP layer of the online backends: request options, rate limit, retries, and :class:`HttpBackend`.

The machinery — concurrency semaphore, timeout, retries with exponential backoff that honour ``Retry-After``,
a request-rate limit, statistics and API-key redaction — lives once, in :class:`HttpBackend`; each online
backend (:mod:`agentrl.envs.search.online`) only builds its request and parses its response.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from agentrl.envs.search.types import SearchBackend, SearchError

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------- HTTP layer


@dataclass
class HttpConfig:
    """The request options of an online backend."""

    concurrency: int = 4
    """Requests in flight at once, across every env and thread that shares the backend."""
    timeout_s: float = 15.0
    """Wall-clock limit of one attempt (connect + whole response, streamed bodies included)."""
    deadline_s: float | None = 20.0
    """Wall-clock limit of one search call across all its attempts: waiting for a free slot and for the rate
    limit, every attempt (each one's connect/read timeouts are cut to the time left, and its body is read
    against the deadline) and the backoffs between them. When it passes, the call fails with ``timeout`` and
    is not retried. ``None`` or 0: no total limit (up to ``(max_retries + 1) * timeout_s`` plus backoffs)."""
    max_retries: int = 3
    """Extra attempts after a retryable failure (429, 5xx, timeout, connection error)."""
    backoff_s: float = 1.0
    """First backoff; doubles each retry (with ±25 % jitter)."""
    backoff_max_s: float = 30.0
    """Cap on one backoff, and on the ``Retry-After`` we are willing to wait; a longer ask fails the query."""
    requests_per_minute: float | None = None
    """Limit on request starts per minute (``None`` or 0: no limit)."""
    user_agent: str = "agentrl-gym/0.1 (https://github.com/agentrl/agentrl-gym) python-requests"
    """Sent with every request (Wikimedia asks for a descriptive one)."""

    def with_options(self, options: dict[str, Any]) -> HttpConfig:
        """A copy with the keyword overrides in ``options`` applied (``None`` values keep the field)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown request-policy option(s) {unknown}; the options are {sorted(names)}")
        return replace(self, **{k: v for k, v in options.items() if v is not None})

    def __post_init__(self):
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.deadline_s is not None and self.deadline_s < 0:
            raise ValueError(f"deadline_s must be positive (or None/0 for no total limit), got {self.deadline_s}")


class _RateLimiter:
    """Spaces request starts at least ``60 / rpm`` seconds apart (thread-safe)."""

    def __init__(self, rpm: float | None):
        self.interval = 60.0 / rpm if rpm else 0.0
        self._lock = threading.Lock()
        self._next = 0.0

    def wait(self, end: float | None = None) -> None:
        """Wait for this request's start slot; raises :class:`_OutOfTime` (reserving nothing) when the slot
        would come after ``end``."""
        if not self.interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            if end is not None and start >= end:
                raise _OutOfTime
            self._next = start + self.interval
        if start > now:
            time.sleep(start - now)


def retry_after_seconds(headers: Any) -> float | None:
    """The seconds an HTTP ``Retry-After`` header asks to wait (``None``: no such header, or unreadable)."""
    value = headers.get("Retry-After") if headers is not None else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class HttpBackend(SearchBackend):
    """Base of the online backends: the shared request loop.

    Subclasses implement :meth:`_search` by calling :meth:`request` with a function that builds the request
    for an attempt and a function that parses the response. The parser may raise :class:`SearchError`
    (``retryable=True`` to try again, e.g. for a rate-limit code in a 200 body).
    """

    name = "http"

    def __init__(self, config: HttpConfig | None = None, *, topk: int = 3, secrets: Iterable[str] = ()):
        super().__init__(topk=topk)
        self.config = config or HttpConfig()
        self._sem = threading.BoundedSemaphore(max(1, self.config.concurrency))
        self._limiter = _RateLimiter(self.config.requests_per_minute)
        self._local = threading.local()
        self._secrets = [s for s in secrets if s]
        self._rng = np.random.default_rng()

    def redact(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        return text

    # -- session per thread (requests.Session is not guaranteed thread-safe)
    def _session(self):
        import requests

        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = requests.Session()
            s.headers["User-Agent"] = self.config.user_agent
            s.headers["Accept-Encoding"] = "gzip"
        return s

    def request(self, build: Callable[[int], dict[str, Any]], parse: Callable[[Any], Any],
                *, stream: bool = False) -> Any:
        """Send a request with retries; return ``parse(response)``.

        ``build(attempt)`` returns keyword arguments for :meth:`requests.Session.request` (``method``,
        ``url``, ``params``, ``json``, ``headers``). HTTP 429/5xx, timeouts and connection errors are retried
        up to ``max_retries`` times with exponential backoff, waiting at least ``Retry-After`` when given.
        The whole call, retries and waits included, ends within ``deadline_s`` (when set). Raises
        :class:`SearchError` when the attempts or the time are spent or the failure is not retryable.
        """
        import requests

        cfg = self.config
        end = time.monotonic() + cfg.deadline_s if cfg.deadline_s else None
        last: SearchError | None = None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                delay = min(cfg.backoff_s * 2 ** (attempt - 1), cfg.backoff_max_s)
                delay *= 0.75 + 0.5 * float(self._rng.random())
                if last is not None and last.retry_after is not None:
                    delay = max(delay, last.retry_after)
                if end is not None and time.monotonic() + delay >= end:
                    last = self._out_of_time(last)
                    break
                self.stats.add(retries=1)
                time.sleep(delay)
            kwargs = build(attempt)
            try:
                self._limiter.wait(end)
                timeout = self._attempt_timeout(end)
                if not self._sem.acquire(timeout=-1 if end is None else max(0.0, end - time.monotonic())):
                    raise _OutOfTime
                try:
                    timeout = self._attempt_timeout(end)
                    deadline = time.monotonic() + timeout
                    self.stats.add(requests=1)
                    resp = self._session().request(timeout=(timeout, timeout), stream=True, **kwargs)
                    try:
                        self._check_status(resp)
                        if stream:
                            resp.deadline = deadline  # parsers of streamed bodies enforce the total limit
                        else:
                            _read_body(resp, deadline, timeout)
                        return parse(resp)
                    finally:
                        resp.close()
                finally:
                    self._sem.release()
            except _OutOfTime:
                last = self._out_of_time(last)
                break
            except SearchError as e:
                last = e
            except requests.Timeout as e:
                last = SearchError("timeout", f"no answer within {timeout:g} s ({type(e).__name__})",
                                   retryable=True)
            except requests.ConnectionError as e:
                if "timed out" in str(e).lower() or "timeout" in type(e).__name__.lower():
                    last = SearchError("timeout", f"no answer within {timeout:g} s", retryable=True)
                else:
                    last = SearchError("connection", _connection_detail(e), retryable=True)
            except requests.RequestException as e:
                last = SearchError("connection", _short(self.redact(f"{type(e).__name__}: {e}")), retryable=True)
            if last.kind == "timeout":
                self.stats.add(timeouts=1)
            if last.kind == "rate_limited":
                self.stats.add(rate_limited=1)
            if last.retry_after is not None and last.retry_after > cfg.backoff_max_s:
                last = SearchError(last.kind, f"{last.detail}; the service asked to wait "
                                               f"{last.retry_after:g} s, more than {cfg.backoff_max_s:g} s")
                break
            if not last.retryable:
                break
            logger.info("%s: attempt %d failed (%s); retrying", self.name, attempt + 1, self.redact(last.detail))
        else:
            assert last is not None
            if last.retryable and cfg.max_retries:
                last.detail = f"{last.detail} (after {cfg.max_retries + 1} attempts)"
        assert last is not None
        raise last

    def _attempt_timeout(self, end: float | None) -> float:
        """This attempt's connect/read timeout: ``timeout_s``, cut to the time left before the deadline."""
        if end is None:
            return self.config.timeout_s
        left = end - time.monotonic()
        if left <= 0.001:
            raise _OutOfTime
        return min(self.config.timeout_s, left)

    def _out_of_time(self, last: SearchError | None) -> SearchError:
        if last is None or last.kind != "timeout":  # a timed-out attempt was counted already
            self.stats.add(timeouts=1)
        why = f"; the last attempt: {last.detail}" if last is not None else ""
        return SearchError("timeout", f"no result within the search deadline of {self.config.deadline_s:g} s{why}")

    @staticmethod
    def _check_status(resp) -> None:
        code = resp.status_code
        if code < 400:
            return
        ra = retry_after_seconds(resp.headers)
        if code == 429:
            raise SearchError("rate_limited", "HTTP 429" + (f", Retry-After {ra:g} s" if ra is not None else ""),
                              retry_after=ra, retryable=True)
        if code >= 500:
            raise SearchError("server_error", f"HTTP {code}", retry_after=ra, retryable=True)
        if code in (401, 403):
            raise SearchError("auth", f"HTTP {code}")
        if code == 402:
            raise SearchError("quota", f"HTTP {code}")
        raise SearchError("bad_request", f"HTTP {code}")

    @staticmethod
    def json_of(resp) -> Any:
        """The response body as JSON, or a ``bad_response`` error."""
        try:
            return resp.json()
        except ValueError as e:
            raise SearchError("bad_response", f"not valid JSON ({_short(str(e))})") from None

    def __repr__(self) -> str:
        c = self.config
        return (f"{type(self).__name__}(topk={self.topk}, concurrency={c.concurrency}, timeout_s={c.timeout_s}, "
                f"max_retries={c.max_retries})")


class _OutOfTime(Exception):
    """The search call's total deadline passed."""


def _read_body(resp: Any, deadline: float, timeout: float) -> None:
    """Read a response body into ``resp`` against a wall-clock deadline (a server trickling bytes, each read
    inside the read timeout, would otherwise hold the call for ever). Sets what ``resp.content`` returns."""
    raw = resp.raw
    read1 = getattr(raw, "read1", None)  # urllib3 >= 2: returns as soon as any bytes arrive
    chunks = []
    while True:
        if read1 is not None:
            chunk = read1(65_536, decode_content=True)
        else:
            chunk = raw.read(1024, decode_content=True)
        if time.monotonic() > deadline:
            raise SearchError("timeout", f"the response did not finish within {timeout:g} s", retryable=True)
        if not chunk:
            break
        chunks.append(chunk)
    resp._content = b"".join(chunks)  # where requests itself keeps a read body; .json() and .text use it
    resp._content_consumed = True


_CONN_REASONS = ("Connection refused", "Connection reset", "Name or service not known", "nodename nor servname",
                 "Network is unreachable", "No route to host", "Temporary failure in name resolution",
                 "Remote end closed connection", "Connection aborted")


def _connection_detail(e: Exception) -> str:
    """A short reason for a connection failure, without the URL (which could carry a key)."""
    text = str(e)
    for reason in _CONN_REASONS:
        if reason.lower() in text.lower():
            return reason.lower()
    return type(e).__name__


def _short(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
