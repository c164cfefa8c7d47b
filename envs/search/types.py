"""Search results, errors, statistics and the :class:`SearchBackend` interface every backend implements.

Every backend answers ``search(query) -> SearchResult`` and ``search_batch(queries) -> list[SearchResult]``
and **never raises** for a fault of the service: timeouts, HTTP errors, rate limits, exhausted quotas,
malformed responses and refused connections come back as ``SearchResult(items=[], error=<kind>,
message=<text>)``, and are counted in :attr:`SearchBackend.stats`. (A misconfiguration — a missing corpus,
a missing API key — raises when the backend is built or first prepared, because no query can fix it.)
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs._resources import SharedHandle

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------- results

#: The error kinds a search can end with (``SearchResult.error``); each becomes an env metric.
ERROR_KINDS: tuple[str, ...] = (
    "rate_limited",  # HTTP 429 or the service's rate-limit code, still failing after the retries
    "timeout",  # no complete answer within the timeout
    "server_error",  # HTTP 5xx or the service's internal-error code
    "bad_response",  # a response we cannot parse (malformed JSON, unexpected shape)
    "auth",  # the key was refused (HTTP 401/403 or the service's auth code)
    "quota",  # every key's quota is spent
    "connection",  # refused / reset / DNS failure
    "bad_request",  # the service rejected the query (HTTP 400 or its parameter-error code)
    "bad_query",  # an empty query; nothing was sent
)

_ERROR_TEXT = {
    "rate_limited": "rate limited (429)",
    "timeout": "timed out",
    "server_error": "server error",
    "bad_response": "malformed response from the search service",
    "auth": "authentication failed (the API key was refused)",
    "quota": "quota exhausted",
    "connection": "could not connect to the search service",
    "bad_request": "the search service rejected the request",
    "bad_query": "the query is empty",
}


@dataclass
class SearchItem:
    """One piece of evidence: a page title, its text (an extract or snippet) and where it came from."""

    title: str
    text: str
    url: str = ""


@dataclass
class SearchResult:
    """The outcome of one query: items (possibly none), or an error kind from :data:`ERROR_KINDS`."""

    items: list[SearchItem] = field(default_factory=list)
    error: str | None = None
    """``None`` on success (even with zero items); else one of :data:`ERROR_KINDS`."""
    message: str = ""
    """A human-readable account of the error (keys redacted); empty on success."""
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(cls, kind: str, detail: str = "", latency_s: float = 0.0) -> SearchResult:
        text = _ERROR_TEXT.get(kind, kind)
        return cls(items=[], error=kind, message=f"{text}{': ' + detail if detail else ''}", latency_s=latency_s)


class SearchError(Exception):
    """Raised inside a backend to end a query with an error kind (caught by the backend, never by you)."""

    def __init__(self, kind: str, detail: str = "", retry_after: float | None = None, retryable: bool = False):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail, self.retry_after, self.retryable = kind, detail, retry_after, retryable


# ---------------------------------------------------------------------------------------------- statistics


class BackendStats:
    """Thread-safe counters of one backend (all queries, all threads). ``as_dict()`` for logging."""

    def __init__(self):
        self._lock = threading.Lock()
        self.queries = 0
        self.requests = 0
        self.success = 0
        self.errors = 0
        self.rate_limited = 0
        """HTTP 429 (or the service's rate-limit code) responses, retried or not."""
        self.timeouts = 0
        self.retries = 0
        self.results = 0
        self.latency_s = 0.0
        self.errors_by_kind: dict[str, int] = {}
        self.usage: dict[str, int] = {}
        """Token usage reported by the service (``deepseek``): input, cached and output tokens."""

    def add(self, **counts: float) -> None:
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    def record(self, result: SearchResult) -> None:
        with self._lock:
            self.queries += 1
            self.latency_s += result.latency_s
            self.results += len(result.items)
            if result.error is None:
                self.success += 1
            else:
                self.errors += 1
                self.errors_by_kind[result.error] = self.errors_by_kind.get(result.error, 0) + 1

    def add_usage(self, usage: dict[str, int]) -> None:
        with self._lock:
            for k, v in usage.items():
                if isinstance(v, int):
                    self.usage[k] = self.usage.get(k, 0) + v

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            q = max(self.queries, 1)
            return {
                "queries": self.queries, "requests": self.requests, "success": self.success,
                "errors": self.errors, "rate_limited": self.rate_limited, "timeouts": self.timeouts,
                "retries": self.retries, "mean_latency_s": self.latency_s / q,
                "results_per_query": self.results / q, "errors_by_kind": dict(self.errors_by_kind),
                "usage": dict(self.usage),
            }


# ---------------------------------------------------------------------------------------------- interface


class SearchBackend(SharedHandle):
    """``search(query) -> SearchResult``; subclasses implement :meth:`_search` (and may batch).

    A backend is a shared resource (index, connections, limits): copies are the same object, so
    ``gymnasium.make(..., backend=<instance>)`` shares it instead of splitting its concurrency limit and stats.
    """

    name = "base"

    def __init__(self, topk: int = 3):
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        self.topk = topk
        self.stats = BackendStats()

    def prepare(self) -> None:
        """Load what the backend needs (an index); called by the env at reset. Raises on misconfiguration."""

    def search(self, query: str) -> SearchResult:
        """Run one query. Never raises for a service fault; see the module docstring."""
        return self.search_batch([query])[0]

    def search_batch(self, queries: Sequence[str]) -> list[SearchResult]:
        """Run several queries; the default runs :meth:`search_one` on a thread pool (bounded by the backend)."""
        queries = list(queries)
        if len(queries) <= 1:
            return [self.search_one(q) for q in queries]
        with ThreadPoolExecutor(max_workers=min(len(queries), 32)) as pool:
            return list(pool.map(self.search_one, queries))

    def search_one(self, query: str) -> SearchResult:
        """One query through :meth:`_search`, with the empty-query check, timing, stats and error capture."""
        t0 = time.perf_counter()
        query = " ".join(str(query).split())
        if not query:
            result = SearchResult.failure("bad_query")
        else:
            try:
                result = SearchResult(items=self._search(query))
            except SearchError as e:
                result = SearchResult.failure(e.kind, self.redact(e.detail))
            except Exception as e:  # a bug in a parser must not escape into the env
                where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
                detail = self.redact(f"{type(e).__name__}: {e}")  # no raw traceback: it could hold a key
                logger.error("%s backend: unexpected %s at %s:%s", self.name, detail,
                             where.filename if where else "?", where.lineno if where else "?")
                result = SearchResult.failure("bad_response", detail)
        result.latency_s = time.perf_counter() - t0
        self.stats.record(result)
        if result.error:
            logger.warning("%s search failed: %s", self.name, result.message)
        return result

    def _search(self, query: str) -> list[SearchItem]:
        raise NotImplementedError

    def redact(self, text: str) -> str:
        """``text`` with every secret of this backend replaced by ``***``."""
        return text

    def close(self) -> None:
        """Release connections and files."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(topk={self.topk})"


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1's ``"Title"\\ntext`` document form -> ``(title, text)``."""
    head, _, text = contents.partition("\n")
    return head.strip().strip('"'), text.strip()
