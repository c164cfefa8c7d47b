"""Search-R1 style search environment and its backends (``AgentRL/Search-v0``).

Importing this package is light: bm25s, the corpus and ``requests`` load on first use.
"""

from agentrl.envs.search.backends import (
    BACKENDS,
    ERROR_KINDS,
    HttpConfig,
    LocalBackend,
    SearchBackend,
    SearchItem,
    SearchResult,
    make_backend,
)
from agentrl.envs.search.env import SearchEnv, format_results
from agentrl.envs.search.questions import load_bundled, load_questions

__all__ = ["BACKENDS", "ERROR_KINDS", "HttpConfig", "LocalBackend", "SearchBackend", "SearchEnv", "SearchItem",
           "SearchResult", "format_results", "load_bundled", "load_questions", "make_backend"]
