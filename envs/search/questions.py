"""Question sets for ``AgentRL/Search-v0``: loaders and the bundled offline set.

Formats read by :func:`load_questions`:

* Search-R1: ``{"question", "golden_answers": [...], "data_source"}`` — JSONL, or parquet when pyarrow is
  installed (``golden_answers`` may be a string or a list);
* plain: ``{"question", "answers": [...]}`` (``"answer"`` also accepted), ``data_source`` optional.

Every row comes back as ``{"id", "question", "golden_answers": [str, ...], "data_source", ...}`` with the
row's other keys kept (the bundled rows carry ``query``: a search that finds the evidence, used for
demonstrations).

The bundled set (``envs/search/search_{train,dev}.jsonl``) is answerable from the default corpus; its two
sources (``wiki_description``, ``fanoutqa``) and how it is rebuilt are in
:mod:`agentrl.envs.search.build_questions` (``python -m agentrl.envs.search.build_questions build``).

The split is fixed: a question is in ``dev`` when the first 8 hex digits of SHA-1 of its id, as an integer,
are divisible by 5 (about 20 %).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentrl.envs.datasets import DatasetError, check_split, hash_split, located_rows

SPLITS = ("train", "dev")
DATA_SOURCES = ("wiki_description", "fanoutqa")


# ---------------------------------------------------------------------------------------------- loaders


def bundled_path(split: str) -> Path:
    """The path of a bundled split (``train`` or ``dev``)."""
    check_split(split, SPLITS)
    from importlib.resources import files

    return Path(str(files("agentrl.envs.search") / f"search_{split}.jsonl"))


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
        rows = located_rows(_read_parquet(Path(source)), ("question",), name=str(source))
    else:
        rows = located_rows(source, ("question",), name=name)
    out = []
    for i, (at, row) in enumerate(rows):
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


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    if importlib.util.find_spec("pyarrow") is None:
        raise ImportError(f"reading {path} needs pyarrow: `pip install pyarrow` (or convert it to JSONL)")
    import pyarrow.parquet as pq

    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    return pq.read_table(path).to_pylist()


def split_of(qid: str) -> str:
    """The fixed split of a question id (``dev`` for about 20 %)."""
    return hash_split(qid, "dev", algorithm="sha1")
