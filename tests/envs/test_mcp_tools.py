"""MCP tools against a real MCP server (tests/mcp_server.py, written with the SDK) over stdio and streamable HTTP
on 127.0.0.1: schemas, calls through ToolUse-v0, failures as observations, session reuse, close, copy and pickle."""

from __future__ import annotations

import copy
import json
import pickle
import socket
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from helpers import ROOT, TESTS, free_port

pytest.importorskip("mcp", reason="MCP tools need the `mcp` SDK (the [mcp] extra)")

import agentrl.envs  # noqa: E402,F401  (registers the env ids)
from agentrl.envs.mcp_tools import MCPToolSet, mcp_tools  # noqa: E402

SERVER = str(TESTS / "mcp_server.py")
ROWS = [{"query": "What is the secret code of the word heron?", "answer": "5516"}]


def call(name: str, arguments: dict) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def stdio_tools(**kwargs) -> MCPToolSet:
    return mcp_tools("stdio", command=[sys.executable, SERVER, "stdio"], **kwargs)


@pytest.fixture
def tools():
    ts = stdio_tools(timeout_s=20)
    yield ts
    ts.close()


@pytest.fixture
def http_server():
    """A streamable-HTTP MCP server on 127.0.0.1 (a free port), its process, and its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the MCP HTTP test server did not start")
    yield proc, f"http://127.0.0.1:{port}/mcp"
    proc.kill()
    proc.wait()


def test_server_tools_become_function_schemas(tools):
    assert tools.names == ["codebook", "add", "broken", "slow", "crash"]
    fn = tools.schemas()[0]
    assert fn["type"] == "function" and fn["function"]["name"] == "codebook"
    assert fn["function"]["description"].startswith("Look up the secret code of a word.")
    assert fn["function"]["parameters"]["required"] == ["word"]
    assert fn["function"]["parameters"]["properties"]["word"]["type"] == "string"


def test_tool_use_answers_with_the_mcp_tool_and_reuses_one_session(tools):
    env = gym.make("AgentRL/ToolUse-v0", tools=tools, dataset=ROWS)
    _, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == tools.names
    session = tools._session
    obs, reward, terminated, _, info = env.step(call("codebook", {"word": "heron"}))
    assert obs == "5516" and reward == 0.0 and not terminated
    _, reward, terminated, _, info = env.step("Answer: 5516")
    assert terminated and reward == 1.0 and info["correct"]
    assert info["metrics"]["mcp_calls"] == 1 and info["metrics"]["tool_errors"] == 0
    env.reset(seed=1)  # a second episode: the same session, no new server
    assert env.step(call("add", {"a": 2, "b": 40}))[0] == "42"
    assert tools._session is session and tools.connected
    env.close()
    assert not tools.connected and session.loop.is_closed()


def test_failures_are_observations_with_counted_kinds():
    ts = stdio_tools(timeout_s=1.0)
    try:
        env = gym.make("AgentRL/ToolUse-v0", tools=ts, dataset=ROWS, max_tool_calls=10, max_turns=10)
        env.reset(seed=0)
        obs, _, terminated, _, info = env.step(call("broken", {"reason": "test"}))
        assert obs.startswith("Error: broken() failed") and not terminated
        assert info["metrics"]["mcp_error_tool_error"] == 1 and info["metrics"]["tool_errors"] == 1
        obs, _, _, _, info = env.step(call("add", {"a": "x", "b": 1}))  # caught by the schema, never sent
        assert "'a'" in obs and "integer" in obs and info["metrics"]["invalid_calls"] == 1
        obs, _, _, _, info = env.step(call("codebook", {"word": "nope"}))  # the server's own error result
        assert obs.startswith("Error: codebook() failed") and info["metrics"]["mcp_error_tool_error"] == 2
        obs, _, terminated, _, info = env.step(call("slow", {"seconds": 30}))
        assert "within 1s" in obs and not terminated and info["metrics"]["mcp_error_timeout"] == 1
        assert env.step(call("codebook", {"word": "heron"}))[0] == "5516"  # the session survives a timeout
        assert info["metrics"]["tool_errors"] == 4
        env.close()
    finally:
        ts.close()


def test_a_server_that_dies_mid_run_is_an_observation_then_restarts(tools):
    env = gym.make("AgentRL/ToolUse-v0", tools=tools, dataset=ROWS)
    env.reset(seed=0)
    first = tools._session
    obs, _, terminated, truncated, info = env.step(call("crash", {}))
    assert obs.startswith("Error: crash() failed: the MCP server went away")
    assert not terminated and not truncated and info["metrics"]["mcp_error_disconnected"] == 1
    obs, _, _, _, info = env.step(call("codebook", {"word": "heron"}))  # a new stdio server
    assert obs == "5516" and tools._session is not first
    _, reward, _, _, info = env.step("Answer: 5516")
    assert reward == 1.0 and info["termination"] == "answered"
    env.close()


def test_streamable_http_and_a_server_that_goes_down(http_server):
    proc, url = http_server
    ts = mcp_tools("http", url=url, timeout_s=10)
    try:
        env = gym.make("AgentRL/ToolUse-v0", tools=ts, dataset=ROWS)
        env.reset(seed=0)
        assert env.step(call("codebook", {"word": "heron"}))[0] == "5516"
        assert env.step("Answer: 5516")[1] == 1.0
        proc.kill()
        proc.wait()
        env.reset(seed=0)
        for _ in range(2):  # the first call loses the session, the second cannot reconnect
            obs, _, terminated, _, info = env.step(call("codebook", {"word": "heron"}))
            assert obs.startswith("Error: codebook() failed:") and not terminated
        assert info["metrics"]["mcp_errors"] == 2 and info["metrics"]["tool_errors"] == 2
        env.close()
    finally:
        ts.close()


def test_copies_share_the_session_and_pickles_reconnect(tools):
    assert copy.deepcopy(tools) is tools and copy.copy(tools) is tools
    clone = pickle.loads(pickle.dumps(tools))
    try:
        assert clone is not tools and clone.names == tools.names and clone.schemas() == tools.schemas()
        assert not clone.connected
        assert clone.call("add", {"a": 1, "b": 2}).content == "3" and clone.connected
    finally:
        clone.close()


def test_bad_configuration_errors_name_the_problem():
    with pytest.raises(ValueError, match="command"):
        mcp_tools("stdio", command=[])
    with pytest.raises(ValueError, match="transport"):
        mcp_tools("websocket", url="ws://127.0.0.1:1")
    with pytest.raises(ValueError, match="url"):
        mcp_tools("http", url="127.0.0.1:1/mcp")
    with pytest.raises(ValueError, match="no tool"):
        stdio_tools(include=["codebook", "missing"])
    with pytest.raises(ConnectionError, match="cannot connect"):
        mcp_tools("http", url=f"http://127.0.0.1:{free_port()}/mcp", connect_timeout_s=10)


def test_include_offers_only_the_named_tools():
    ts = stdio_tools(include=["codebook"])
    try:
        assert ts.names == ["codebook"]
        assert ts.call("add", {"a": 1, "b": 2}).error_kind == "unknown_tool"
    finally:
        ts.close()


def test_importing_agentrl_envs_does_not_import_mcp():
    code = ("import sys, agentrl.envs, agentrl.envs.mcp_tools; "
            "assert not any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules), 'mcp imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_docs_example_runs(tmp_path):
    import re

    page = (ROOT / "docs" / "mcp.md").read_text()
    server, script = re.findall(r"```python\n(.*?)```", page, re.S)[:2]
    (tmp_path / "codebook_server.py").write_text(server)
    (tmp_path / "run.py").write_text(script)
    out = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["['codebook']", "5516", "1.0 1"]


def test_calls_from_many_threads_share_the_session(tools):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: tools.call("add", {"a": i, "b": 1}).content, range(32)))
    assert results == [str(i + 1) for i in range(32)]
