"""Search-R1 style search environment and its backends (``AgentRL/Search-v0``).

Importing this package is light: bm25s, the corpus and ``requests`` load on first use.
"""

from agentrl.envs.search.bm25 import LocalBackend
from agentrl.envs.search.env import SearchEnv, format_results
from agentrl.envs.search.http import HttpConfig
from agentrl.envs.search.questions import load_bundled, load_questions
from agentrl.envs.search.registry import BACKENDS, make_backend
from agentrl.envs.search.types import ERROR_KINDS, SearchBackend, SearchItem, SearchResult

__all__ = ["BACKENDS", "ERROR_KINDS", "HttpConfig", "LocalBackend", "SearchBackend", "SearchEnv", "SearchItem",
           "SearchResult", "format_results", "load_bundled", "load_questions", "make_backend"]
