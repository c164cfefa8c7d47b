"""All search backends in one namespace: ``from agentrl.envs.search import backends as B``.

The pieces live in :mod:`~agentrl.envs.search.types` (results, errors, statistics, the
:class:`SearchBackend` interface), :mod:`~agentrl.envs.search.http` (the shared HTTP layer),
:mod:`~agentrl.envs.search.bm25` (the offline BM25 backend), :mod:`~agentrl.envs.search.online` (the network
backends) and :mod:`~agentrl.envs.search.registry` (:func:`make_backend`).
"""

from agentrl.envs.search.bm25 import (
    _INDEX_CACHE,
    BM25Index,
    LocalBackend,
    _stopwords,
    default_corpus_path,
    get_index,
    load_corpus,
    tokenize,
    wikipedia_url,
)
from agentrl.envs.search.http import HttpBackend, HttpConfig, _retry_after
from agentrl.envs.search.registry import BACKENDS, make_backend
from agentrl.envs.search.types import (
    _ERROR_TEXT,
    ERROR_KINDS,
    BackendStats,
    SearchBackend,
    SearchError,
    SearchItem,
    SearchResult,
    split_contents,
)

__all__ = ["BACKENDS", "ERROR_KINDS", "BM25Index", "BackendStats", "HttpBackend", "HttpConfig", "LocalBackend",
           "SearchBackend", "SearchError", "SearchItem", "SearchResult", "_ERROR_TEXT", "_INDEX_CACHE",
           "_retry_after", "_stopwords", "default_corpus_path", "get_index", "load_corpus", "make_backend",
           "split_contents", "tokenize", "wikipedia_url"]
