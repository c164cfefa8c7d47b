"""Tools served by a Model Context Protocol server, as a :class:`~agentrl.envs.tools.ToolSet`.

>>> tools = mcp_tools("stdio", command=["python", "my_server.py"])            # doctest: +SKIP
>>> env = gymnasium.make("AgentRL/ToolUse-v0", tools=tools, dataset="tasks.jsonl")  # doctest: +SKIP

:func:`mcp_tools` connects to the server (a subprocess over stdio, or a streamable-HTTP URL), lists its tools and
returns an :class:`MCPToolSet`: each tool's ``inputSchema`` becomes an OpenAI function schema in
``info["tools"]`` and a call goes to the server (``tools/call``). It needs the ``mcp`` SDK (the ``[mcp]`` extra),
imported here only when a tool set is made, never by ``import agentrl.envs``.

The contract
------------
* **A call never raises.** Arguments that break the tool's JSON schema (checked with ``jsonschema`` before
  anything is sent) are ``invalid_arguments``; a result the server flags ``isError`` (the tool raised, the server
  rejected the arguments) is ``mcp_tool_error``; no answer within ``timeout_s`` is ``mcp_timeout``; a server that
  is down or dies mid-call is ``mcp_disconnected``; any other protocol error is ``mcp_protocol``. Each comes back
  as an ``Error: ...`` observation with that ``error_kind``; the env counts it as a tool error, and every call adds
  ``mcp_calls`` (and ``mcp_errors``, ``mcp_error_<kind>``) to the episode's metrics.
* **One session, reused.** The SDK is asyncio-based: the session lives on a private event loop in a background
  thread, made at :func:`mcp_tools` and used synchronously by every step of every episode. After the session
  is lost (server died, :meth:`MCPToolSet.close`), the next call opens a new one (restarting a stdio server).
* **Closed with the env.** ``env.close()`` closes the session (and stops a stdio server).
* **Copies share, pickles reconnect.** ``copy``/``deepcopy`` (``gymnasium.make`` deep-copies its kwargs) return
  the same tool set, so a vector env's copies share one session. A pickle carries the server's address and the
  listed tools, not the session: the unpickled tool set (in a worker process) connects at its first call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.envs._resources import SharedHandle
from agentrl.envs.tools import Tool, ToolResult, ToolSet

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]
_CONNECTION_CLOSED = -32000  # the JSON-RPC code the SDK gives requests cut off by a closed connection


@dataclass(frozen=True)
class MCPServer:
    """Where an MCP server is: ``transport="stdio"`` with ``command`` (argv of the server process, started and
    stopped by the session; ``env`` adds variables, ``cwd`` sets its folder), or ``transport="http"`` with
    ``url`` (streamable HTTP, e.g. ``http://127.0.0.1:8000/mcp``; ``headers`` are sent with every request)."""

    transport: Transport
    command: tuple[str, ...] = ()
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.transport == "stdio":
            if not self.command or not all(isinstance(c, str) for c in self.command):
                raise ValueError("mcp_tools('stdio', command=[...]): command must be a non-empty list of strings, "
                                 f"got {self.command!r}")
        elif self.transport == "http":
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"mcp_tools('http', url=...): url must start with http:// or https://, "
                                 f"got {self.url!r}")
        else:
            raise ValueError(f"mcp_tools: transport must be 'stdio' or 'http', got {self.transport!r}")

    def describe(self) -> str:
        return " ".join(self.command) if self.transport == "stdio" else self.url

    def open(self) -> contextlib.AbstractAsyncContextManager:
        """The SDK's transport context manager (yields the read and write streams first)."""
        if self.transport == "stdio":
            from mcp import StdioServerParameters, stdio_client

            params = StdioServerParameters(command=self.command[0], args=list(self.command[1:]),
                                           env=dict(self.env) or None, cwd=self.cwd)
            return stdio_client(params)
        from mcp.client.streamable_http import streamable_http_client

        if not self.headers:
            return streamable_http_client(self.url)
        return _http_with_headers(self.url, dict(self.headers))


@contextlib.asynccontextmanager
async def _http_with_headers(url: str, headers: dict[str, str]):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers) as client:
        async with streamable_http_client(url, http_client=client) as streams:
            yield streams


class _Session:
    """One MCP client session on a private event loop in a daemon thread; synchronous methods with timeouts."""

    def __init__(self, server: MCPServer, connect_timeout_s: float):
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agentrl-mcp", daemon=True)
        self.thread.start()
        self.session: Any = None
        self._stop: asyncio.Event | None = None
        self._runner: concurrent.futures.Future | None = None
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._runner = asyncio.run_coroutine_threadsafe(self._run(ready), self.loop)
        try:
            ready.result(timeout=connect_timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def alive(self) -> bool:
        return self.session is not None and self._runner is not None and not self._runner.done()

    async def _run(self, ready: concurrent.futures.Future) -> None:
        from mcp import ClientSession

        self._stop = asyncio.Event()
        try:
            async with self.server.open() as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    self.session = session
                    ready.set_result(None)
                    await self._stop.wait()
        except BaseException as e:  # the server died or could not start: the session is over
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else ConnectionError(repr(e)))
            else:
                logger.debug("MCP session with %s ended: %r", self.server.describe(), e)
        finally:
            self.session = None

    def run(self, coro_fn, timeout_s: float):
        """Run ``await coro_fn(session)`` on the loop; raises TimeoutError after ``timeout_s``."""
        session = self.session
        if session is None:
            raise ConnectionError("the MCP session is closed")

        async def bounded():
            return await asyncio.wait_for(coro_fn(session), timeout_s)

        fut = asyncio.run_coroutine_threadsafe(bounded(), self.loop)
        try:
            return fut.result(timeout=timeout_s + 5.0)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError from None

    def close(self, wait_s: float = 10.0) -> None:
        """End the session (stopping a stdio server), then the loop and its thread. Idempotent."""
        if self.loop.is_closed():
            return
        if self._stop is not None and self._runner is not None and not self._runner.done():
            self.loop.call_soon_threadsafe(self._stop.set)
            with contextlib.suppress(BaseException):
                self._runner.result(timeout=wait_s)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=wait_s)
        if not self.thread.is_alive():
            self.loop.close()


class MCPTool(Tool):
    """A tool of an MCP server: its schema is the server's ``inputSchema``, checked with ``jsonschema``."""

    def validate(self, arguments: Any) -> tuple[dict[str, Any] | None, str | None]:
        import jsonschema

        if not isinstance(arguments, dict):
            return None, f"Error: {self.name}() arguments must be a JSON object, got {type(arguments).__name__}"
        try:
            jsonschema.validate(arguments, self.parameters)
        except jsonschema.ValidationError as e:
            where = "/".join(str(p) for p in e.absolute_path)
            return None, f"Error: {self.name}() invalid arguments{f' at {where!r}' if where else ''}: {e.message}"
        except jsonschema.SchemaError:  # the server's schema is broken: let the server judge the arguments
            pass
        return arguments, None


class MCPToolSet(ToolSet, SharedHandle):
    """The tools of one MCP server, called through one reused session; see the module docstring.

    Make it with :func:`mcp_tools`. :meth:`close` ends the session (``env.close()`` calls it); a later call
    opens a new one.
    """

    def __init__(self, server: MCPServer, *, timeout_s: float = 30.0, connect_timeout_s: float = 30.0,
                 include: Sequence[str] | None = None, _listed: list[dict[str, Any]] | None = None):
        self.server = server
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.include = tuple(include) if include is not None else None
        self._lock = threading.Lock()
        self._session: _Session | None = None
        self._finalizer = weakref.finalize(self, _close_holder, [None])
        if _listed is None:
            _listed = self._list_tools()
        self._listed = _listed
        super().__init__([MCPTool(name=d["name"], description=d["description"], parameters=d["parameters"],
                                  fn=self._caller(d["name"])) for d in _listed])

    # ------------------------------------------------------------------ session
    def _connect(self) -> _Session:
        with self._lock:
            if self._session is None or not self._session.alive:
                if self._session is not None:
                    self._session.close()
                self._session = _Session(self.server, self.connect_timeout_s)
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _close_holder, [self._session])
            return self._session

    def _list_tools(self) -> list[dict[str, Any]]:
        try:
            session = self._connect()
        except BaseException as e:
            raise ConnectionError(f"cannot connect to the MCP server {self.server.describe()!r}: "
                                  f"{_describe_error(e)}") from e
        tools = []
        cursor = None
        while True:
            from mcp.types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            listed = session.run(lambda s, p=params: s.list_tools(params=p), self.connect_timeout_s)
            tools.extend(listed.tools)
            cursor = getattr(listed, "next_cursor", None) or getattr(listed, "nextCursor", None)
            if not cursor:
                break
        out = []
        for t in tools:
            if self.include is not None and t.name not in self.include:
                continue
            schema = getattr(t, "input_schema", None) or getattr(t, "inputSchema", None) or {"type": "object"}
            out.append({"name": t.name, "description": t.description or t.title or t.name,
                        "parameters": dict(schema)})
        missing = sorted(set(self.include or ()) - {d["name"] for d in out})
        if missing:
            raise ValueError(f"MCP server {self.server.describe()!r} has no tool {missing}; it has "
                             f"{sorted(t.name for t in tools)}")
        return out

    def close(self) -> None:
        """End the session (stopping a stdio server). Idempotent; a later call reconnects."""
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def _discard(self, session: _Session) -> None:
        """Close a session that failed, unless another thread already replaced it: the next call reconnects."""
        with self._lock:
            if self._session is session:
                self._session = None
        session.close(wait_s=5.0)

    @property
    def connected(self) -> bool:
        """Whether a live session is open now."""
        return self._session is not None and self._session.alive

    # ------------------------------------------------------------------ calls
    def _caller(self, name: str):
        def call(**arguments: Any) -> ToolResult:
            return self.call_remote(name, arguments)

        return call

    def call_remote(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Send one ``tools/call`` (arguments already validated); every failure is a :class:`ToolResult`."""
        try:
            session = self._connect()
        except BaseException as e:
            return _failure(name, "mcp_disconnected",
                            f"the MCP server is unreachable ({_describe_error(e)})")
        try:
            result = session.run(lambda s: s.call_tool(name, arguments), self.timeout_s)
        except TimeoutError:
            return _failure(name, "mcp_timeout", f"no answer from the MCP server within {self.timeout_s:g}s")
        except Exception as e:
            code = getattr(getattr(e, "error", None), "code", None)
            if code == _CONNECTION_CLOSED or not session.alive or isinstance(e, ConnectionError):
                self._discard(session)
                return _failure(name, "mcp_disconnected", f"the MCP server went away ({_describe_error(e)})")
            return _failure(name, "mcp_protocol", _describe_error(e))
        text = _result_text(result)
        if getattr(result, "is_error", None) or getattr(result, "isError", None):
            return _failure(name, "mcp_tool_error", text or "the tool failed")
        return ToolResult(text, metrics={"mcp_calls": 1})

    # ------------------------------------------------------------------ pickling: the address, not the session
    def __reduce__(self):
        return (_rebuild, (self.server, self.timeout_s, self.connect_timeout_s, self.include, self._listed))


def mcp_tools(transport: Transport, *, command: Sequence[str] | None = None, url: str | None = None,
              env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
              headers: dict[str, str] | None = None, include: Sequence[str] | None = None,
              timeout_s: float = 30.0, connect_timeout_s: float = 30.0) -> MCPToolSet:
    """Connect to an MCP server and return its tools as a :class:`MCPToolSet` (pass it as ``tools=``).

    Args:
        transport: ``"stdio"`` (start ``command`` and talk over its stdin/stdout) or ``"http"`` (streamable
            HTTP at ``url``).
        command: the server's argv (stdio).
        url: the server's endpoint, e.g. ``http://127.0.0.1:8000/mcp`` (http).
        env, cwd: extra environment variables and the working folder of a stdio server.
        headers: HTTP headers sent with every request (http), e.g. an ``Authorization`` header.
        include: offer only these tools (default: every tool the server lists).
        timeout_s: how long one call may take before it becomes an ``mcp_timeout`` observation.
        connect_timeout_s: how long connecting and listing the tools may take.

    Raises:
        ImportError: the ``mcp`` SDK is not installed.
        ValueError: a bad argument, or an ``include`` name the server does not have.
        ConnectionError: the server cannot be reached or started now.
    """
    try:
        import mcp  # noqa: F401
    except ImportError as e:
        raise ImportError("MCP tools need the `mcp` SDK: pip install 'mcp>=2.3,<3' (in an agentrl-gym "
                          "checkout: pip install -e '.[mcp]')") from e
    server = MCPServer(transport=transport, command=tuple(command or ()), url=url or "", env=dict(env or {}),
                       cwd=os.fspath(cwd) if cwd is not None else None, headers=dict(headers or {}))
    return MCPToolSet(server, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, include=include)


# ---------------------------------------------------------------------------------------------- helpers
def _rebuild(server, timeout_s, connect_timeout_s, include, listed) -> MCPToolSet:
    return MCPToolSet(server, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, include=include,
                      _listed=listed)


def _close_holder(holder: list) -> None:
    if holder and holder[0] is not None:
        holder[0].close(wait_s=2.0)


def _failure(name: str, kind: str, message: str) -> ToolResult:
    return ToolResult(f"Error: {name}() failed: {message}", error_kind=kind,
                      metrics={"mcp_calls": 1, "mcp_errors": 1, f"mcp_error_{kind.removeprefix('mcp_')}": 1})


def _describe_error(e: BaseException) -> str:
    group = getattr(e, "exceptions", None)  # an ExceptionGroup from the SDK's task groups
    if isinstance(group, (list, tuple)) and group:
        return "; ".join(_describe_error(x) for x in group)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _result_text(result: Any) -> str:
    """A ``CallToolResult`` as observation text: its text blocks, other blocks named, else structured content."""
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(getattr(block, "resource", None), "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind} content: {getattr(block, 'mime_type', None) or getattr(block, 'mimeType', '')}]")
    if not parts:
        structured = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
        if structured is not None:
            return json.dumps(structured, ensure_ascii=False, default=str)
    return "\n".join(parts)
