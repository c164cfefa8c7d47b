"""The network backends: a Search-R1 retrieval server, Wikipedia, Zhihu and DeepSeek web search.

Each one builds its request and parses its response; retries, backoff, ``Retry-After``, concurrency, rate
limits, statistics and key redaction are :class:`~agentrl.envs.search.http.HttpBackend`'s. API shapes:
``docs/envs/search.md``. Keys are read from arguments or the environment (or a ``.env`` file for Zhihu) and
never appear in results, logs or errors.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from agentrl.envs.search.http import HttpBackend, HttpConfig, retry_after_seconds
from agentrl.envs.search.types import SearchError, SearchItem, SearchResult, split_contents

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- retriever


class RetrieverBackend(HttpBackend):
    """Client of a Search-R1 retrieval server: ``POST /retrieve {queries, topk, return_scores}``.

    :meth:`search_batch` sends up to ``batch_size`` queries in one request. Serve our own BM25 index this way
    with ``agentrl-env serve-retriever``.
    """

    name = "retriever"

    def __init__(self, url: str | None = None, *, topk: int = 3, batch_size: int = 64, batch_wait_s: float = 0.005,
                 config: HttpConfig | None = None, **request_options: Any):
        """
        Args:
            url: the ``/retrieve`` endpoint (default ``$AGENTRL_RETRIEVER_URL`` or
                ``http://127.0.0.1:8000/retrieve``).
            topk: documents per query.
            batch_size: queries per request in :meth:`search_batch`.
            batch_wait_s: how long the first of several concurrent :meth:`search` calls (envs stepped in
                threads by a collector) waits for the others, so they go in one request; 0 turns this off.
            config, request_options: the request options: an :class:`HttpConfig`, and/or any of its fields as keywords
                (``concurrency``, ``timeout_s``, ``max_retries``, ...). Default: 8 in flight, 20 s a call, 3 retries.
        """
        cfg = (config or HttpConfig(concurrency=8, timeout_s=20.0)).with_options(request_options)
        super().__init__(cfg, topk=topk)
        self.url = url or os.environ.get("AGENTRL_RETRIEVER_URL", "http://127.0.0.1:8000/retrieve")
        self.batch_size = max(1, batch_size)
        self.batch_wait_s = batch_wait_s
        self._pending: list[tuple[str, Future]] = []
        self._pending_lock = threading.Lock()

    def search(self, query: str) -> SearchResult:
        """One query; concurrent calls from several threads are coalesced into one request."""
        if self.batch_wait_s <= 0:
            return self.search_batch([query])[0]
        fut: Future = Future()
        with self._pending_lock:
            self._pending.append((query, fut))
            leader = len(self._pending) == 1
        if leader:  # the first caller waits briefly, then sends everything that arrived meanwhile
            time.sleep(self.batch_wait_s)
            with self._pending_lock:
                batch, self._pending = self._pending, []
            try:
                results = self.search_batch([q for q, _ in batch])
            except Exception as e:  # never leave the other callers waiting
                logger.error("retriever: batched search failed unexpectedly: %s", self.redact(str(e)))
                results = [SearchResult.failure("bad_response", type(e).__name__) for _ in batch]
            for (_, f), r in zip(batch, results, strict=True):
                f.set_result(r)
        return fut.result()

    def _post(self, queries: list[str]) -> list[list[SearchItem]]:
        body = {"queries": queries, "topk": self.topk, "return_scores": True}

        def parse(resp):
            data = self.json_of(resp)
            result = data.get("result") if isinstance(data, dict) else None
            if not isinstance(result, list) or len(result) != len(queries):
                raise SearchError("bad_response", "expected {'result': [[...] per query]}")
            return [[self._item(d) for d in (per or [])] for per in result]

        return self.request(lambda _: {"method": "POST", "url": self.url, "json": body}, parse)

    def _item(self, entry: Any) -> SearchItem:
        if not isinstance(entry, dict):
            raise SearchError("bad_response", "a result entry is not an object")
        doc = entry.get("document", entry)
        if not isinstance(doc, dict):
            raise SearchError("bad_response", "a result's document is not an object")
        if "contents" in doc:
            title, text = split_contents(str(doc["contents"]))
        else:
            title, text = str(doc.get("title", "")), str(doc.get("text", ""))
        return SearchItem(title=str(doc.get("title", title)), text=text, url=str(doc.get("url", "")))

    def _search(self, query: str) -> list[SearchItem]:
        return self._post([query])[0]

    def search_batch(self, queries: Sequence[str]) -> list[SearchResult]:
        """Queries in chunks of ``batch_size``, one request per chunk; a failed request fails its chunk."""
        queries = [" ".join(str(q).split()) for q in queries]
        out: list[SearchResult] = [SearchResult.failure("bad_query") for _ in queries]
        todo = [i for i, q in enumerate(queries) if q]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start:start + self.batch_size]
            t0 = time.perf_counter()
            try:
                per = self._post([queries[i] for i in chunk])
                results = [SearchResult(items=items) for items in per]
            except SearchError as e:
                results = [SearchResult.failure(e.kind, self.redact(e.detail)) for _ in chunk]
                logger.warning("retriever search failed: %s", results[0].message)
            dt = (time.perf_counter() - t0) / len(chunk)
            for i, r in zip(chunk, results, strict=True):
                r.latency_s = dt
                out[i] = r
        for r in out:
            self.stats.record(r)
        return out


# ---------------------------------------------------------------------------------------------- wikipedia


class WikipediaBackend(HttpBackend):
    """The Wikipedia Action API: full-text search and the top pages' plain-text intros in one request."""

    name = "wikipedia"

    def __init__(self, base_url: str = "https://en.wikipedia.org/w/api.php", *, topk: int = 3,
                 config: HttpConfig | None = None, **request_options: Any):
        """
        Args:
            base_url: the ``api.php`` endpoint (another language edition, or a mirror).
            topk: pages per query (at most 20).
            config, request_options: the request options (an :class:`HttpConfig` and/or its fields as keywords).
                Default: 3 in flight, 15 s, ~200 requests/min, a descriptive User-Agent.
        """
        defaults = HttpConfig(concurrency=3, timeout_s=15.0, requests_per_minute=200.0)
        cfg = (config or defaults).with_options(request_options)
        super().__init__(cfg, topk=min(topk, 20))
        self.base_url = base_url

    def _search(self, query: str) -> list[SearchItem]:
        params = {
            "action": "query", "format": "json", "formatversion": "2", "generator": "search",
            "gsrsearch": query, "gsrlimit": str(self.topk), "gsrnamespace": "0", "prop": "extracts|info",
            "inprop": "url", "exintro": "1", "explaintext": "1", "exlimit": str(self.topk), "maxlag": "5",
        }
        return self.request(lambda _: {"method": "GET", "url": self.base_url, "params": params}, self._parse)

    def _parse(self, resp) -> list[SearchItem]:
        data = self.json_of(resp)
        if not isinstance(data, dict):
            raise SearchError("bad_response", "expected a JSON object")
        err = data.get("error")
        if isinstance(err, dict):
            code, info = str(err.get("code", "")), str(err.get("info", ""))[:160]
            ra = retry_after_seconds(resp.headers)
            if code == "maxlag":
                raise SearchError("server_error", f"replication lag (maxlag): {info}", retry_after=ra or 5.0,
                                  retryable=True)
            if code in ("ratelimited", "too-many-requests"):
                raise SearchError("rate_limited", f"{code}: {info}", retry_after=ra, retryable=True)
            if code.startswith("internal_api_error") or code == "readonly":
                raise SearchError("server_error", f"{code}: {info}", retry_after=ra, retryable=True)
            raise SearchError("bad_request", f"{code}: {info}")
        pages = (data.get("query") or {}).get("pages")
        if pages is None:
            return []  # no match: the API leaves out "query"
        if isinstance(pages, dict):  # formatversion=1
            pages = list(pages.values())
        if not isinstance(pages, list):
            raise SearchError("bad_response", "query.pages is neither a list nor an object")
        pages = [p for p in pages if isinstance(p, dict) and not p.get("missing")]
        pages.sort(key=lambda p: p.get("index", 1 << 30))
        return [SearchItem(title=str(p.get("title", "")), text=str(p.get("extract", "")).strip(),
                           url=str(p.get("fullurl", ""))) for p in pages[: self.topk]]


# ---------------------------------------------------------------------------------------------- zhihu


def _read_dotenv(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.removeprefix("export ").split("=", 1)
        out[k.strip()] = v.strip().strip('"').strip("'")
    return out


def _split_keys(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = re.split(r"[\s,;]+", value)
    return [k.strip() for k in value if k and k.strip()]


class _KeyRing:
    """Round-robin over API keys, skipping keys whose quota is spent (until the next UTC day) or refused."""

    def __init__(self, keys: list[str]):
        self.keys = keys
        self._lock = threading.Lock()
        self._next = 0
        self._spent: dict[str, str] = {}  # key -> UTC date it ran out, or "refused"

    def pick(self) -> str | None:
        today = time.strftime("%Y-%m-%d", time.gmtime())
        with self._lock:
            for _ in range(len(self.keys)):
                k = self.keys[self._next % len(self.keys)]
                self._next += 1
                mark = self._spent.get(k)
                if mark is None or (mark != "refused" and mark != today):
                    return k
            return None

    def spend(self, key: str, refused: bool = False) -> None:
        with self._lock:
            self._spent[key] = "refused" if refused else time.strftime("%Y-%m-%d", time.gmtime())

    def usable(self) -> int:
        today = time.strftime("%Y-%m-%d", time.gmtime())
        with self._lock:
            return sum(1 for k in self.keys if self._spent.get(k) not in ("refused", today))


_ZHIHU_CODES = {
    10001: ("bad_request", False),
    20001: ("auth", False),
    30001: ("rate_limited", True),
    30002: ("quota", False),
    90001: ("server_error", True),
}


class ZhihuBackend(HttpBackend):
    """The Zhihu open-platform search API, rotating across several keys.

    Keys: ``keys=`` (a list or a comma-separated string), else ``$ZHIHU_SEARCH_KEYS``, else
    ``ZHIHU_SEARCH_KEYS=`` in a ``.env`` file (``env_file``, default ``./.env``). A key whose daily quota is
    spent (code 30002) rests until the next UTC day; a refused key (code 20001, HTTP 401/403) is dropped;
    the query moves on to the next key. Rate-limit answers (code 30001, HTTP 429) are retried with backoff.
    """

    name = "zhihu"

    def __init__(self, keys: str | Sequence[str] | None = None, *, topk: int = 3,
                 base_url: str = "https://developer.zhihu.com", endpoint: str = "global_search",
                 search_db: str = "all", env_file: str | Path = ".env", config: HttpConfig | None = None,
                 **request_options: Any):
        """
        Args:
            keys: API access secrets (see the class docstring for where else they are read from).
            topk: items per query (``zhihu_search`` allows 10, ``global_search`` 20).
            base_url: the API host.
            endpoint: ``"global_search"`` (web search) or ``"zhihu_search"`` (Zhihu content only).
            search_db: ``global_search``'s ``SearchDB``: ``all``, ``realtime`` or ``static``.
            env_file: a ``.env`` file to read ``ZHIHU_SEARCH_KEYS`` from when neither argument nor environment
                variable gives keys.
            config, request_options: the request options (an :class:`HttpConfig` and/or its fields as keywords).
                Default: 1 in flight, 15 s.
        """
        if endpoint not in ("global_search", "zhihu_search"):
            raise ValueError(f"endpoint must be 'global_search' or 'zhihu_search', got {endpoint!r}")
        found = _split_keys(keys) or _split_keys(os.environ.get("ZHIHU_SEARCH_KEYS")) or _split_keys(
            _read_dotenv(Path(env_file)).get("ZHIHU_SEARCH_KEYS"))
        if not found:
            raise ValueError("the zhihu backend needs API keys: set ZHIHU_SEARCH_KEYS (comma-separated) in the "
                             "environment or a .env file, or pass keys=[...]")
        cfg = (config or HttpConfig(concurrency=1, timeout_s=15.0)).with_options(request_options)
        super().__init__(cfg, topk=min(topk, 10 if endpoint == "zhihu_search" else 20), secrets=found)
        self.keys = _KeyRing(found)
        self.url = f"{base_url.rstrip('/')}/api/v1/content/{endpoint}"
        self.endpoint, self.search_db = endpoint, search_db

    def _search(self, query: str) -> list[SearchItem]:
        query = query[:100]
        if len(query) < 2:
            raise SearchError("bad_query", "Zhihu needs a query of 2 to 100 characters")
        params = {"Query": query, "Count": str(self.topk)}
        if self.endpoint == "global_search":
            params["SearchDB"] = self.search_db
        last: SearchError | None = None
        for _ in range(len(self.keys.keys)):
            key = self.keys.pick()
            if key is None:
                break
            try:
                return self.request(lambda _, key=key: {"method": "GET", "url": self.url, "params": params,
                                                        "headers": self._headers(key)}, self._parse)
            except SearchError as e:
                if e.kind not in ("quota", "auth"):
                    raise
                self.keys.spend(key, refused=e.kind == "auth")
                logger.warning("zhihu: key #%d %s; %d usable key(s) left", self.keys.keys.index(key) + 1,
                               "refused" if e.kind == "auth" else "spent its quota", self.keys.usable())
                last = e
        if last is not None and last.kind == "auth" and self.keys.usable() == 0:
            raise SearchError("auth", f"every key ({len(self.keys.keys)}) was refused or is spent; last: {last.detail}")
        raise SearchError("quota", f"every key ({len(self.keys.keys)}) has spent its daily quota")

    @staticmethod
    def _headers(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}", "X-Request-Timestamp": str(int(time.time()))}

    def _parse(self, resp) -> list[SearchItem]:
        data = self.json_of(resp)
        if not isinstance(data, dict) or "Code" not in data:
            raise SearchError("bad_response", "expected {'Code', 'Message', 'Data'}")
        code = data.get("Code")
        if code != 0:
            kind, retryable = _ZHIHU_CODES.get(code, ("bad_response", False))
            msg = str(data.get("Message", ""))[:160]
            raise SearchError(kind, f"code {code}: {msg}", retry_after=retry_after_seconds(resp.headers),
                              retryable=retryable)
        items = ((data.get("Data") or {}).get("Items")) or []
        if not isinstance(items, list):
            raise SearchError("bad_response", "Data.Items is not a list")
        return [SearchItem(title=str(it.get("Title", "")), text=_strip_html(str(it.get("ContentText", ""))),
                           url=str(it.get("Url", ""))) for it in items[: self.topk] if isinstance(it, dict)]


_TAG = re.compile(r"<[^>]+>")


def _strip_html(text: str) -> str:
    return " ".join(_TAG.sub("", text).split())


# ---------------------------------------------------------------------------------------------- deepseek

EVIDENCE_PROMPT = (
    "You are a web-search tool, not an assistant. Search the web once for the user's query. Then reply with "
    "nothing but numbered evidence items, at most 8, each on two lines:\n"
    "[n] Source: <title of the page>\n"
    "Evidence: <one fact from that page, stated as on the page>\n"
    "Do not answer the query, summarise, or add anything else. If the results hold nothing relevant, reply "
    "exactly: Insufficient evidence from this search."
)

_EVIDENCE = re.compile(r"^\s*\[(\d+)\]\s*Source:\s*(.+?)\s*\n\s*Evidence:\s*(.+?)\s*(?=^\s*\[\d+\]|\Z)",
                       re.DOTALL | re.MULTILINE)

_DEEPSEEK_ERRORS = {
    "rate_limit_error": ("rate_limited", True),
    "overloaded_error": ("server_error", True),
    "api_error": ("server_error", True),
    "authentication_error": ("auth", False),
    "permission_error": ("auth", False),
    "billing_error": ("quota", False),
    "invalid_request_error": ("bad_request", False),
}


def parse_evidence(text: str, results: list[dict[str, Any]], limit: int = 8) -> list[SearchItem]:
    """Numbered ``[n] Source: …`` / ``Evidence: …`` items; each url is that of the search result whose title
    matches the source (exactly, else as a prefix), else empty. ``Insufficient evidence`` or no items -> ``[]``."""
    by_title = {str(r.get("title", "")).strip().lower(): str(r.get("url", "")) for r in results}
    items = []
    for m in _EVIDENCE.finditer(text):
        title, fact = m.group(2).strip(), " ".join(m.group(3).split())
        url = by_title.get(title.lower())
        if url is None:  # "Victoria Falls" for a result titled "Victoria Falls - Wikipedia"
            url = next((u for t, u in by_title.items() if t and (t.startswith(title.lower())
                                                                  or title.lower().startswith(t))), "")
        items.append(SearchItem(title=title, text=fact, url=url))
    return items[:limit]


class DeepSeekBackend(HttpBackend):
    """DeepSeek web search in evidence mode: the Anthropic-compatible messages endpoint, streamed.

    The model searches once and lists numbered evidence items; only those items are returned — never a
    summary or an answer of its own. Token usage is added to ``stats.usage``.
    """

    name = "deepseek"

    def __init__(self, api_key: str | None = None, *, topk: int = 3,
                 base_url: str = "https://api.deepseek.com/anthropic", model: str = "deepseek-v4-flash",
                 max_tokens: int = 2048, config: HttpConfig | None = None, **request_options: Any):
        """
        Args:
            api_key: the key (default ``$DEEPSEEK_API_KEY``).
            topk: evidence items kept per query (the prompt asks for at most 8).
            base_url: the Anthropic-compatible API root (``/v1/messages`` is appended).
            model: the model that runs the search.
            max_tokens: the reply limit.
            config, request_options: the request options (an :class:`HttpConfig` and/or its fields as keywords).
                Default: 16 in flight, 60 s a call (one long stream).
        """
        key = api_key or os.environ.get("DEEPSEEK_API_KEY")
        if not key:
            raise ValueError("the deepseek backend needs an API key: set DEEPSEEK_API_KEY or pass api_key=...")
        cfg = (config or HttpConfig(concurrency=16, timeout_s=60.0, deadline_s=60.0)).with_options(request_options)
        super().__init__(cfg, topk=topk, secrets=[key])
        self._key = key
        self.url = f"{base_url.rstrip('/')}/v1/messages"
        self.model, self.max_tokens = model, max_tokens

    def _search(self, query: str) -> list[SearchItem]:
        body = {
            "model": self.model, "max_tokens": self.max_tokens, "stream": True, "system": EVIDENCE_PROMPT,
            "messages": [{"role": "user", "content": query}],
            "tools": [{"type": "web_search_20260209", "name": "web_search", "max_uses": 1}],
            "tool_choice": {"type": "any"},
        }
        headers = {"x-api-key": self._key, "anthropic-version": "2023-06-01", "accept": "text/event-stream"}
        return self.request(lambda _: {"method": "POST", "url": self.url, "json": body, "headers": headers},
                            self._parse_stream, stream=True)

    def _parse_stream(self, resp) -> list[SearchItem]:
        deadline = getattr(resp, "deadline", None)
        text_parts: dict[int, list[str]] = {}
        results: list[dict[str, Any]] = []
        usage: dict[str, int] = {}
        stopped = False
        event = None
        for raw in resp.iter_lines(decode_unicode=True):
            if deadline is not None and time.monotonic() > deadline:
                raise SearchError("timeout", f"the stream did not finish within {self.config.timeout_s:g} s",
                                  retryable=True)
            if not raw:
                continue
            if raw.startswith("event:"):
                event = raw[6:].strip()
                continue
            if not raw.startswith("data:"):
                continue
            try:
                data = json.loads(raw[5:].strip())
            except ValueError:
                raise SearchError("bad_response", f"an event's data is not JSON (event {event})") from None
            if not isinstance(data, dict):
                raise SearchError("bad_response", "an event's data is not an object")
            kind = data.get("type", event)
            if kind == "error":
                err = data.get("error") or {}
                k, retryable = _DEEPSEEK_ERRORS.get(err.get("type"), ("server_error", True))
                raise SearchError(k, f"{err.get('type')}: {str(err.get('message', ''))[:160]}", retryable=retryable)
            if kind == "message_start":
                usage.update(_usage((data.get("message") or {}).get("usage")))
            elif kind == "message_delta":
                usage.update(_usage(data.get("usage")))
            elif kind == "message_stop":
                stopped = True
            elif kind == "content_block_start":
                block = data.get("content_block") or {}
                idx = int(data.get("index", 0))
                if block.get("type") == "text":
                    text_parts.setdefault(idx, []).append(str(block.get("text", "")))
                elif block.get("type") == "web_search_tool_result":
                    content = block.get("content")
                    if isinstance(content, dict) and content.get("type") == "web_search_tool_result_error":
                        code = str(content.get("error_code", ""))
                        if code == "too_many_requests":
                            raise SearchError("rate_limited", f"web search: {code}", retryable=True)
                        raise SearchError("server_error", f"web search: {code}", retryable=code == "unavailable")
                    if isinstance(content, list):
                        results.extend(c for c in content if isinstance(c, dict))
            elif kind == "content_block_delta":
                delta = data.get("delta") or {}
                if delta.get("type") == "text_delta":
                    text_parts.setdefault(int(data.get("index", 0)), []).append(str(delta.get("text", "")))
        if not stopped:
            raise SearchError("bad_response", "the event stream ended before message_stop", retryable=True)
        self.stats.add_usage(usage)
        text = "\n".join("".join(parts) for _, parts in sorted(text_parts.items()))
        return parse_evidence(text, results)[: self.topk]


def _usage(u: Any) -> dict[str, int]:
    if not isinstance(u, dict):
        return {}
    keys = ("input_tokens", "cache_read_input_tokens", "output_tokens")
    return {k: int(u[k]) for k in keys if isinstance(u.get(k), int)}
