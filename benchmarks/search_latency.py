"""Latency of the offline search backend (``local``: bm25s over the 10,033 Wikipedia summaries).

Measures, in one run:

* index build time from the corpus (in memory), and the load time of the cached on-disk index (mmap);
* p50 / p95 latency and queries per second of ``LocalBackend.search`` (one query at a time) and of
  ``LocalBackend.search_batch`` (one sparse product per batch);
* the same-run baseline: a plain-Python BM25 that scores every document for every query term (the algorithm
  of ``rank_bm25.BM25Okapi``; the real ``rank_bm25`` is used when installed), and the speed-up ratio.

The queries are the bundled questions (train and dev). Goal: p50 <= 1 ms per query. Prints a table; never
asserts a time.

    python benchmarks/search_latency.py [--queries 2000] [--batch-size 64] [--baseline-queries 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import tempfile
import time
from collections import Counter

import numpy as np

from agentrl.envs.search import bm25 as B
from agentrl.envs.search.questions import load_bundled


class NaiveBM25:
    """BM25 Okapi written plainly: per query term, one pass over every document (rank_bm25's algorithm)."""

    def __init__(self, corpus_tokens: list[list[str]], k1: float = 0.9, b: float = 0.4):
        self.k1, self.b = k1, b
        self.doc_freqs = [Counter(doc) for doc in corpus_tokens]
        self.doc_len = [len(doc) for doc in corpus_tokens]
        self.avgdl = sum(self.doc_len) / len(self.doc_len)
        df = Counter(t for doc in self.doc_freqs for t in doc)
        n = len(corpus_tokens)
        self.idf = {t: math.log((n - f + 0.5) / (f + 0.5) + 1) for t, f in df.items()}

    def get_scores(self, query: list[str]) -> list[float]:
        scores = [0.0] * len(self.doc_freqs)
        for q in query:
            idf = self.idf.get(q)
            if idf is None:
                continue
            for i, (freqs, dl) in enumerate(zip(self.doc_freqs, self.doc_len, strict=True)):
                tf = freqs.get(q, 0)
                if tf:
                    scores[i] += idf * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * dl / self.avgdl))
        return scores

    def top(self, query: list[str], k: int) -> list[int]:
        s = self.get_scores(query)
        return sorted(range(len(s)), key=s.__getitem__, reverse=True)[:k]


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    a = np.asarray(samples_s) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--queries", type=int, default=2000, help="queries for the single and batched runs")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--baseline-queries", type=int, default=100, help="queries for the (slow) plain baseline")
    args = p.parse_args()

    questions = [r["question"] for r in load_bundled("train") + load_bundled("dev")]
    queries = (questions * (args.queries // len(questions) + 1))[: args.queries]

    docs = B.load_corpus(None)
    t0 = time.perf_counter()
    B.BM25Index.build(docs)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        B._INDEX_CACHE.clear()
        B.get_index(None, cache_dir=tmp)  # build + save
        B._INDEX_CACHE.clear()
        t0 = time.perf_counter()
        index = B.get_index(None, cache_dir=tmp)  # what every later process does: load with mmap
        load_s = time.perf_counter() - t0
        backend = B.LocalBackend(cache_dir=tmp)
        backend._index = index

        for q in queries[:50]:  # warm up
            backend.search(q)
        single = []
        for q in queries:
            t0 = time.perf_counter()
            backend.search(q)
            single.append(time.perf_counter() - t0)
        batch_times, per_query = [], []
        t_all = time.perf_counter()
        for i in range(0, len(queries), args.batch_size):
            chunk = queries[i:i + args.batch_size]
            t0 = time.perf_counter()
            backend.search_batch(chunk)
            dt = time.perf_counter() - t0
            batch_times.append(dt)
            per_query.append(dt / len(chunk))
        batch_total = time.perf_counter() - t_all

    sw = B._stopwords()
    corpus_tokens = [B.tokenize(f"{d['title']}\n{d['text']}", sw) for d in docs]
    if importlib.util.find_spec("rank_bm25") is not None:
        from rank_bm25 import BM25Okapi

        base_name = "rank_bm25.BM25Okapi"
        t0 = time.perf_counter()
        base = BM25Okapi(corpus_tokens, k1=0.9, b=0.4)
        base_build = time.perf_counter() - t0

        def base_query(q):
            return np.argsort(-base.get_scores(B.tokenize(q, sw)))[:3]
    else:
        base_name = "plain-Python BM25 (rank_bm25 algorithm)"
        t0 = time.perf_counter()
        base = NaiveBM25(corpus_tokens)
        base_build = time.perf_counter() - t0

        def base_query(q):
            return base.top(B.tokenize(q, sw), 3)
    base_times = []
    for q in queries[: args.baseline_queries]:
        t0 = time.perf_counter()
        base_query(q)
        base_times.append(time.perf_counter() - t0)

    s50, s95 = percentiles(single)
    b50, b95 = percentiles(per_query)
    r50, r95 = percentiles(base_times)
    single_qps = len(single) / sum(single)
    batch_qps = len(queries) / batch_total
    base_qps = len(base_times) / sum(base_times)
    print(f"local search backend, {len(docs):,} documents, {len(queries):,} queries (bundled questions)\n")
    print(f"{'measure':<52}{'p50 ms':>10}{'p95 ms':>10}{'queries/s':>12}")
    print(f"{'LocalBackend.search (one query at a time)':<52}{s50:>10.3f}{s95:>10.3f}{single_qps:>12,.0f}")
    print(f"{f'LocalBackend.search_batch (batches of {args.batch_size}), per query':<52}{b50:>10.3f}{b95:>10.3f}"
          f"{batch_qps:>12,.0f}")
    print(f"{'baseline: ' + base_name:<52}{r50:>10.3f}{r95:>10.3f}{base_qps:>12,.0f}")
    print(f"\nspeed-up over the baseline (p50): single {r50 / s50:,.0f}x, batched {r50 / b50:,.0f}x")
    print(f"index build {build_s:.2f} s (baseline build {base_build:.2f} s); cached index load (mmap) {load_s:.3f} s")
    print(f"goal p50 <= 1 ms: single {'met' if s50 <= 1 else 'NOT met'}, batched {'met' if b50 <= 1 else 'NOT met'}")


if __name__ == "__main__":
    main()
