"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests. Torch-free: the verifiers episodes
(tests/envs/bridges/verifiers_episodes.py, run with .venv-verifiers' python) import it as well as the suite."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedChatServer:
    """``POST /v1/chat/completions`` answering turn k (counted by the assistant messages sent) with ``replies[k]``
    (a note once the script runs out) and ``finish_reasons[k]`` (default ``"stop"``; ``"length"``: a reply cut by
    its token budget); any other path is 404. Every request's body, path and headers are kept in ``requests``,
    ``paths`` and ``headers``; ``replies`` and ``finish_reasons`` may be replaced between episodes."""

    def __init__(self, replies=()):
        self.replies: list[str] = list(replies)
        self.finish_reasons: list[str] = []
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.paths.append(self.path)
                server.headers.append(dict(self.headers))
                if self.path != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                turn = sum(m["role"] == "assistant" for m in body["messages"])
                text = server.replies[turn] if turn < len(server.replies) else "(the script has no more replies)"
                finish = server.finish_reasons[turn] if turn < len(server.finish_reasons) else "stop"
                data = json.dumps({
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body["model"], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": finish}],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
