"""A small MCP server for the tests, written with the official SDK (``mcp.server.mcpserver.MCPServer``).

Run as ``python tests/mcp_server.py stdio`` or ``python tests/mcp_server.py http PORT`` (streamable HTTP on
``127.0.0.1:PORT/mcp``).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

#: The codebook behind ``codebook``: answers a model cannot know without calling the tool.
CODEBOOK = {"falcon": "7391", "otter": "2048", "heron": "5516"}

server = MCPServer("agentrl-test", log_level="CRITICAL")


@server.tool()
def codebook(word: str) -> str:
    """Look up the secret code of a word.

    Args:
        word: the word to look up.
    """
    if word not in CODEBOOK:
        raise KeyError(f"no code for {word!r}")
    return CODEBOOK[word]


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def broken(reason: str) -> str:
    """A tool that always raises."""
    raise RuntimeError(f"broken on purpose: {reason}")


@server.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"


@server.tool()
def crash() -> str:
    """End the server process at once (a server that dies mid-run)."""
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
