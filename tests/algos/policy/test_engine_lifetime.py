"""The managed engine's server never outlives its parent and is the one that answers, checked with a fake vLLM (a
small HTTP server started as ``python -m vllm...``, which forks a worker into its process group like vLLM does):

- a SIGTERM or a SIGKILL of the process that started it leaves no server process;
- a second Ctrl-C while :meth:`VLLMEngine.stop` waits still ends the server;
- a 200 from another server on the port is not taken for ours, and a port picked and taken meanwhile is replaced.

The real vLLM engine is tests/algos/policy/test_vllm.py (``-m slow``)."""

from __future__ import annotations

import http.server
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers import free_port

from agentrl.algos.policy import engine as engine_module
from agentrl.algos.policy.engine import VLLMEngine

#: A stand-in for ``python -m vllm.entrypoints.openai.api_server``: serves /health and /v1/models as vLLM does,
#: forks a worker that sleeps, writes both pids to ``pids`` in its working directory (the log's folder). On SIGTERM it
#: ends its group, unless $FAKE_VLLM_IGNORE_TERM is set (a server still draining).
FAKE_VLLM = '''\
import http.server, json, os, signal, sys, time
args = sys.argv[sys.argv.index("-m") + 2:]
opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
worker = os.fork()
if worker == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the group's SIGKILL ends it
    while True:
        time.sleep(1)
if os.environ.get("FAKE_VLLM_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *a: (os.killpg(0, signal.SIGKILL)))
time.sleep(float(os.environ.get("FAKE_VLLM_BIND_AFTER_S", "0")))
models = {"object": "list", "data": [{"id": opt["--served-model-name"], "root": opt["--model"], "object": "model"}]}

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(models).encode() if self.path == "/v1/models" else b""
        self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

server = http.server.ThreadingHTTPServer((opt["--host"], int(opt["--port"])), Handler)
with open("pids", "w") as f:
    f.write(f"{os.getpid()} {worker}")
server.serve_forever()
'''


@pytest.fixture
def fake_python(tmp_path):
    path = tmp_path / "bin" / "python"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\n{FAKE_VLLM}")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    return path


def _gone(pid: int) -> bool:
    """``pid`` does not run (it does not exist, or is a zombie no one reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _wait_gone(pids, timeout_s: float = 5.0) -> list[int]:
    """The ``pids`` still running after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


def _server_pids(log_dir: Path, timeout_s: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = (log_dir / "pids").read_text() if (log_dir / "pids").is_file() else ""
        if len(text.split()) == 2:
            return [int(p) for p in text.split()]
        time.sleep(0.1)
    raise AssertionError(f"the fake server wrote no pids in {log_dir}")


def _kill_leftovers(pids) -> None:
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


#: A trainer-like parent: starts the engine, says it is ready, then works until it is signalled.
PARENT = textwrap.dedent('''\
    import sys, time
    from agentrl.algos.policy.engine import VLLMEngine
    engine = VLLMEngine(sys.argv[1], python=sys.argv[2], log_path=sys.argv[3], startup_timeout_s=60).start()
    print("ready", flush=True)
    while True:
        sum(range(10000))
        time.sleep(0.01)
''')


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signalled_parent_leaves_no_server_process(sig, fake_python, model_dir, tmp_path):
    log = tmp_path / "run" / "vllm.log"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(model_dir), str(fake_python), str(log)],
                              stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        assert parent.stdout.readline().strip() == "ready"
        pids = _server_pids(log.parent)
        assert not any(_gone(p) for p in pids)  # the server and its worker run
        parent.send_signal(sig)
        parent.wait(30)
        assert _wait_gone(pids) == [], f"{signal.Signals(sig).name} of the parent left the server running"
        if sig == signal.SIGTERM:  # exited through atexit: a clean exit status, not the signal's
            assert parent.returncode == 128 + signal.SIGTERM
    finally:
        parent.kill()
        parent.wait()
        _kill_leftovers(pids)


def test_a_second_ctrl_c_during_stop_still_ends_the_server(fake_python, model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_IGNORE_TERM", "1")  # stop()'s SIGTERM is ignored: it waits up to timeout_s
    engine = VLLMEngine(model_dir, python=str(fake_python), log_path=tmp_path / "vllm.log", startup_timeout_s=60)
    engine.start()
    pids = _server_pids(tmp_path)

    def interrupt(*a):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt):
            engine.stop(timeout_s=20)
        assert _wait_gone(pids) == [], "the interrupted stop left the server running"
        assert engine.proc is None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        engine.stop()
        _kill_leftovers(pids)


#: Starts and stops an engine in a process of its own, where SIGTERM starts at its default (a test runner may
#: have installed its own handler in the test's process), and prints the handler before, during and after.
HOLDS_SIGTERM = """\
import signal, sys
from agentrl.algos.policy.engine import VLLMEngine
signal.signal(signal.SIGTERM, signal.SIG_DFL)
python, model, log = sys.argv[1:4]
before = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
with VLLMEngine(model, python=python, log_path=log, startup_timeout_s=60):
    during = signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
print(before, during, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def test_the_engine_holds_sigterm_only_while_it_runs(fake_python, model_dir, tmp_path):
    # in a child process, so the test runs (and can fail) under a runner with its own SIGTERM handler (CI's)
    done = subprocess.run([sys.executable, "-c", HOLDS_SIGTERM, str(fake_python), str(model_dir),
                           str(tmp_path / "vllm.log")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"], done.stdout  # default, held, default again


class Foreign(http.server.BaseHTTPRequestHandler):
    """Another program's server: healthy, serving another model."""

    def do_GET(self):
        body = json.dumps({"data": [{"id": "other", "root": "/elsewhere"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def foreign_port():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_another_server_on_the_named_port_is_not_taken_for_ours(fake_python, model_dir, tmp_path, foreign_port):
    engine = VLLMEngine(model_dir, python=str(fake_python), log_path=tmp_path / "vllm.log", startup_timeout_s=30,
                        port=foreign_port)
    with pytest.raises(RuntimeError, match=rf"^port {foreign_port} of 127.0.0.1 is taken by another process; the "
                                           r"end of .*vllm.log:\n(?s:.*)Address already in use"):
        engine.start()
    assert engine.proc is None


def test_a_picked_port_taken_meanwhile_is_replaced(fake_python, model_dir, tmp_path, foreign_port, monkeypatch):
    ports = iter([foreign_port, free_port()])  # the first pick is taken before the server binds it
    monkeypatch.setattr(engine_module, "free_port", lambda host: next(ports))
    monkeypatch.setenv("FAKE_VLLM_BIND_AFTER_S", "1")  # the foreign 200 comes first
    with VLLMEngine(model_dir, python=str(fake_python), log_path=tmp_path / "vllm.log", startup_timeout_s=60) as engine:
        assert engine.port != foreign_port and engine.answers()
        assert "Address already in use" in engine.log_path.read_text()  # the first try's
