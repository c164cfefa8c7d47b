"""Data-parallel ranks sharing a server publish each adapter version there once (algos/policy/adapter_group.py):
two gloo ranks (torchrun, CPU) hot-swap a tiny LoRA model's adapter on fake runtime-LoRA servers of 127.0.0.1 that
count their loads and unloads. The real vLLM server's side is tests/algos/policy/test_vllm.py's two-rank tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import TESTS, free_port

from agentrl.algos.policy.adapter_group import ServerGroup, is_loopback, server_key


class LoraServer(ThreadingHTTPServer):
    """A fake vLLM: ``/v1/load_lora_adapter`` (400 for a name already loaded, like vLLM; ``fail_loads``: 500),
    ``/v1/unload_lora_adapter`` and ``GET /v1/models`` (the base "tiny", then each adapter with its parent)."""

    def __init__(self, preloaded: tuple[str, ...] = (), fail_loads: bool = False):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.loads: list[tuple[str, str]] = []
        self.unloads: list[str] = []
        self.loaded = set(preloaded)
        self.fail_loads = fail_loads
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: LoraServer

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with self.server.lock:
            adapters = sorted(self.server.loaded)
        self._send(200, {"data": [{"id": "tiny"}] + [{"id": n, "parent": "tiny"} for n in adapters]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name, srv = body["lora_name"], self.server
        with srv.lock:
            if self.path == "/v1/load_lora_adapter":
                if srv.fail_loads:
                    return self._send(500, {"message": "out of LoRA slots"})
                if name in srv.loaded:
                    return self._send(400, {"message": f"The lora adapter '{name}' has already been loaded."})
                if not (Path(body["lora_path"]) / "adapter_config.json").is_file():
                    return self._send(400, {"message": f"no adapter at {body['lora_path']}"})
                srv.loads.append((name, body["lora_path"]))
                srv.loaded.add(name)
            elif self.path == "/v1/unload_lora_adapter":
                if name not in srv.loaded:
                    return self._send(404, {"message": f"The lora adapter '{name}' cannot be found."})
                srv.unloads.append(name)
                srv.loaded.discard(name)
            else:
                return self._send(404, {"message": self.path})
        self._send(200, {})


@pytest.fixture
def servers():
    started: list[LoraServer] = []

    def start(**kw) -> LoraServer:
        srv = LoraServer(**kw)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()


#: One rank: joins the run's group of gloo ranks, samples through the URL of its rank (argv[1]: a comma-separated
#: list, rank r takes entry r modulo its length), publishes 3 adapter versions, closes; writes the names it
#: sampled with (or its error) to argv[2]/rank<r>.json.
RANK = r'''
import json, sys
from pathlib import Path
from agentrl.algos.models import load_tokenizer, tiny_model
from agentrl.algos.models.lora import LoRAConfig, apply_lora
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.algos.training import distributed

urls, out = sys.argv[1].split(","), Path(sys.argv[2])
ranks = distributed.setup("cpu")
policy = OpenAIPolicy(urls[ranks.rank % len(urls)], "tiny", None, record_dir=out / "run")
model = apply_lora(tiny_model(load_tokenizer(), hidden_size=32), LoRAConfig(r=4))
distributed.share_servers(policy, ranks)
names, error = [], None
try:
    for _ in range(3):
        policy.update_weights(model)
        names.append(policy.adapter_name)
except RuntimeError as e:
    error = str(e)
policy.close()
(out / f"rank{ranks.rank}.json").write_text(json.dumps({"names": names, "error": error}))
distributed.finish(ranks)
'''


def two_ranks(tmp_path: Path, *urls: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "--no-python", sys.executable, "-c", RANK, ",".join(urls),
           str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_two_ranks_on_one_server_load_each_version_once_under_one_name(servers, tmp_path):
    # a killed run's records: each rank unloads what its own file lists, once (rank 1 no longer loads anything)
    run = tmp_path / "run"
    run.mkdir()
    (run / "served-adapters-r0.txt").write_text("tiny-dead0000-r0-v4\n")
    (run / "served-adapters-r1.txt").write_text("tiny-dead0000-r1-v4\n")
    srv = servers(preloaded=("tiny-dead0000-r0-v4", "tiny-dead0000-r1-v4"))
    ranks = two_ranks(tmp_path, srv.url)
    assert ranks[0] == ranks[1] and ranks[0]["error"] is None  # both sampled with the same names
    names = ranks[0]["names"]
    assert [name for name, _ in srv.loads] == names and len(set(names)) == 3  # one load per version
    assert all("-r0-" not in n and "-r1-" not in n and n.endswith(f"-v{v}") for v, n in enumerate(names, 1))
    assert all(Path(path).parent == run / "served-adapters-r0" for _, path in srv.loads)  # saved by rank 0 only
    assert sorted(srv.unloads) == sorted(["tiny-dead0000-r0-v4", "tiny-dead0000-r1-v4", *names])  # each once
    assert srv.loaded == set()  # the server serves its base model only, as before the run
    assert not list(run.glob("served-adapters-r*"))


def test_two_ranks_on_two_servers_load_each_version_once_per_server(servers, tmp_path):
    a, b = servers(), servers()
    ranks = two_ranks(tmp_path, a.url, b.url)
    assert ranks[0]["error"] is None and ranks[1]["error"] is None
    assert [n for n, _ in a.loads] == ranks[0]["names"] and [n for n, _ in b.loads] == ranks[1]["names"]
    assert len(a.loads) == len(b.loads) == 3  # each server: one load per version, by the rank that samples there
    assert set(ranks[0]["names"]).isdisjoint(ranks[1]["names"])  # each publisher's own run id
    assert all(Path(p).parent.name == "served-adapters-r1" for _, p in b.loads)
    assert a.loaded == b.loaded == set()


def test_a_publisher_that_cannot_load_fails_every_rank_in_one_line(servers, tmp_path):
    srv = servers(fail_loads=True)
    ranks = two_ranks(tmp_path, srv.url)
    assert ranks[0] == ranks[1]  # the same error on both: rank 1 does not wait for a version that never comes
    assert ranks[0]["names"] == [] and ranks[0]["error"].startswith("rank 0 could not publish adapter tiny-")
    assert "answered HTTP 500" in ranks[0]["error"] and "\n" not in ranks[0]["error"]
    assert not list((tmp_path / "run").glob("served-adapters-r*"))


def test_groups_are_the_ranks_naming_one_server():
    everyone = [{"server": ("http://a:1", ""), "prefix": "m-aaaa"}, {"server": ("http://b:1", ""), "prefix": "m-bbbb"},
                {"server": ("http://a:1", ""), "prefix": "m-cccc"}]
    groups = [ServerGroup.build(everyone, r, lambda obj: [obj]) for r in range(3)]
    assert [(g.members, g.publisher, g.prefix, g.publishes) for g in groups] == [
        ((0, 2), 0, "m-aaaa", True), ((1,), 1, "m-bbbb", True), ((0, 2), 0, "m-aaaa", False)]


def test_a_loopback_url_is_another_server_on_another_host():
    assert is_loopback("http://127.0.0.1:8000/v1") and is_loopback("http://localhost:80")
    assert is_loopback("http://[::1]:8000") and not is_loopback("http://node3:8000")
    assert server_key("http://127.0.0.1:8000/v1/")[1] != "" and server_key("http://node3:8000")[1] == ""
