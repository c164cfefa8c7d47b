"""A Search-R1-compatible retrieval server over the local BM25 index (``agentrl-env serve-retriever``).

Many training processes, or machines, can then share one index through the ``retriever`` backend::

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
      -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...], ...]}
    GET  /health    -> {"status": "ok", "documents": 10033}

Standard library only (``http.server.ThreadingHTTPServer``). Bad requests get HTTP 400 with
``{"error": "..."}``; the server never dies on a request.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentrl.envs.search.bm25 import LocalBackend

logger = logging.getLogger(__name__)

MAX_QUERIES = 1024
"""Queries accepted in one request."""
MAX_TOPK = 100
MAX_BODY_BYTES = 8 << 20


class _Handler(BaseHTTPRequestHandler):
    server: RetrieverHTTPServer
    protocol_version = "HTTP/1.1"

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok", "documents": self.server.backend.index.num_docs})
        else:
            self._send(404, {"error": f"no route {self.path}; use POST /retrieve or GET /health"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") != "/retrieve":
            self._send(404, {"error": f"no route {self.path}; use POST /retrieve"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            self._send(400, {"error": f"a JSON body of 1 to {MAX_BODY_BYTES} bytes is required"})
            return
        try:
            req = json.loads(self.rfile.read(length))
        except ValueError as e:
            self._send(400, {"error": f"the body is not valid JSON: {e}"})
            return
        error = _validate(req)
        if error:
            self._send(400, {"error": error})
            return
        try:
            payload = self.server.retrieve(req["queries"], int(req.get("topk", 3)),
                                           bool(req.get("return_scores", False)))
        except Exception as e:  # a bug must not kill the server thread silently
            logger.exception("retrieve failed")
            self._send(500, {"error": f"{type(e).__name__}: {e}"})
            return
        self._send(200, payload)

    def log_message(self, format: str, *args: Any) -> None:  # route access logs to logging, not stderr
        logger.debug("%s - %s", self.address_string(), format % args)


def _validate(req: Any) -> str | None:
    if not isinstance(req, dict):
        return "the body must be a JSON object {queries, topk, return_scores}"
    qs = req.get("queries")
    if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
        return "'queries' must be a list of strings"
    if len(qs) > MAX_QUERIES:
        return f"at most {MAX_QUERIES} queries per request"
    topk = req.get("topk", 3)
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        return f"'topk' must be an integer from 1 to {MAX_TOPK}"
    return None


class RetrieverHTTPServer(ThreadingHTTPServer):
    """The HTTP server; ``retrieve`` answers one request body."""

    daemon_threads = True

    def __init__(self, backend: LocalBackend, host: str = "127.0.0.1", port: int = 8000):
        self.backend = backend
        super().__init__((host, port), _Handler)

    def retrieve(self, queries: list[str], topk: int, return_scores: bool) -> dict[str, Any]:
        out = []
        for hits in self.backend.top_with_ids(queries, topk):
            entries = []
            for doc, score in hits:
                entry: dict[str, Any] = {"document": {"id": doc["id"], "contents": f'"{doc["title"]}"\n{doc["text"]}'}}
                if return_scores:
                    entry["score"] = score
                entries.append(entry)
            out.append(entries)
        return {"result": out}


class RetrieverServer:
    """Run :class:`RetrieverHTTPServer` in a background thread (tests, notebooks) or in the foreground (CLI).

    Use as::

        with RetrieverServer(LocalBackend(), port=0) as server:   # port 0: a free port
            make_backend("retriever", url=server.url).search("Victoria Falls")
    """

    def __init__(self, backend: LocalBackend | None = None, host: str = "127.0.0.1", port: int = 8000):
        self.backend = backend or LocalBackend()
        self.backend.prepare()  # build or load the index before accepting connections
        self.httpd = RetrieverHTTPServer(self.backend, host, port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def start(self) -> RetrieverServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="retriever-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> RetrieverServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
