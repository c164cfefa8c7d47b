"""Task data: loading rows with errors that name the file and line, fixed splits, and seeded task generators.

Rows come from a JSONL path (errors name ``file:line``), a Parquet/CSV/TSV/Arrow path or a Hugging Face
``datasets.Dataset`` (read with the ``datasets`` library, imported only then; errors name the file or
``dataset`` and the 0-based row index), or any iterable of dicts. :class:`TaskRows` adds a column mapping
(``TaskRows("qa.parquet", columns={"query": "question"})``) and is accepted wherever an env takes ``dataset=``.
:func:`default_cache_dir` is where what is derived from installed data is cached.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

__all__ = ["DATASETS_SUFFIXES", "DatasetError", "TaskGenerator", "TaskRows", "check_split",
           "default_cache_dir", "draw_row", "hash_split", "load_jsonl", "load_rows", "located_rows", "seeded_draws",
           "seeded_subset", "split_index"]

logger = logging.getLogger(__name__)
_Row = TypeVar("_Row")


class DatasetError(ValueError):
    """A malformed dataset row; the message names the file (or list) and the line (or index)."""


DATASETS_SUFFIXES = {".parquet": "parquet", ".csv": "csv", ".tsv": "csv", ".arrow": "arrow"}
"""File suffixes read with the ``datasets`` library (its builder name); any other path is read as JSONL."""


def located_rows(source: str | Path | Iterable[dict[str, Any]], required: Sequence[str] = (),
                 *, name: str = "dataset") -> list[tuple[str, dict[str, Any]]]:
    """``[(where, row)]`` from a path, a ``datasets.Dataset``, a :class:`TaskRows` or an iterable of dicts,
    each row checked to hold ``required``.

    ``where`` is ``"file:line"`` for JSONL (1-based, blank lines skipped), ``"file: row i"`` for a file read
    with ``datasets`` (Parquet, CSV, TSV, Arrow; ``i`` 0-based as in ``ds[i]``) or ``"name[index]"``: use it in
    the :class:`DatasetError` of a later check of the row. Raises :class:`DatasetError` naming the first bad
    row.
    """
    if isinstance(source, TaskRows):
        rows = source.located(name=source.name or name)
        for where, row in rows:
            _check_row(row, required, where)
        return rows
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.suffix.lower() in DATASETS_SUFFIXES:
            return _checked(((f"{path}: row {i}", row) for i, row in enumerate(_read_with_datasets(path))),
                            required, str(path))
        return _located_jsonl(path, required)
    if _is_dataset_dict(source):
        raise DatasetError(f"{name}: a DatasetDict with splits {list(source)}; pass one split, "
                           f"e.g. dataset[{next(iter(source), 'train')!r}]")
    if _is_dataset(source):
        source = source.with_format(None)
    return _checked(((f"{name}[{i}]", row) for i, row in enumerate(source)), required, name)


def _checked(located: Iterable[tuple[str, Any]], required: Sequence[str], name: str) -> list[tuple[str, dict]]:
    rows = []
    for where, row in located:
        _check_row(row, required, where)
        rows.append((where, row))
    if not rows:
        raise DatasetError(f"{name} is empty")
    return rows


def _is_dataset(obj: Any) -> bool:
    """Whether ``obj`` is a ``datasets.Dataset`` (without importing ``datasets`` when nobody has)."""
    mod = sys.modules.get("datasets")
    return mod is not None and isinstance(obj, mod.Dataset)


def _is_dataset_dict(obj: Any) -> bool:
    mod = sys.modules.get("datasets")
    return mod is not None and isinstance(obj, (mod.DatasetDict, mod.IterableDatasetDict))


def _read_with_datasets(path: Path) -> list[dict[str, Any]]:
    """The rows of a Parquet/CSV/TSV/Arrow file, read with ``datasets`` (kept in memory)."""
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    try:
        import datasets
    except ModuleNotFoundError as e:
        if e.name != "datasets":
            raise
        raise ImportError(f"reading {path} needs the datasets library: `pip install datasets` "
                          "(or convert the file to JSONL)") from None
    builder = DATASETS_SUFFIXES[path.suffix.lower()]
    kwargs: dict[str, Any] = {}
    if builder == "csv":  # cells stay text as written ("007", "1e3"); empty cells become None
        sep = "\t" if path.suffix.lower() == ".tsv" else ","
        with path.open(encoding="utf-8", newline="") as f:
            header = next(csv.reader(f, delimiter=sep), [])
        kwargs = {"sep": sep, "features": datasets.Features({c: datasets.Value("string") for c in header})}
    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train", keep_in_memory=True, **kwargs)
    except Exception as e:  # the builders raise many types (ArrowInvalid, ParserError, DatasetGenerationError)
        raise DatasetError(f"{path}: could not be read as {builder} ({type(e).__name__}: {e})") from None
    return ds.with_format(None).to_list()


@dataclass
class TaskRows:
    """Task rows from a file or a ``datasets.Dataset``, with columns renamed to the keys an env reads.

    Pass it as any env's ``dataset=``::

        gym.make("AgentRL/ToolUse-v0", tools=[...],
                 dataset=TaskRows("qa.parquet", columns={"query": "question", "answer": "gold"}))

    ``source`` is a JSONL/Parquet/CSV/TSV/Arrow path, a ``datasets.Dataset`` (or ``IterableDataset``), or a
    ``DatasetDict`` with ``split`` naming the split to use; ``columns`` maps the key the env reads to the
    column that holds it (other columns are kept as they are). Errors name the file and line (JSONL) or row.
    """

    source: Any
    columns: Mapping[str, str] = field(default_factory=dict)
    split: str | None = None
    name: str | None = None
    """What an in-memory source is called in errors (``dataset[3]: ...``); default: the env's name for it."""

    def located(self, name: str = "dataset") -> list[tuple[str, dict[str, Any]]]:
        """``[(where, row)]`` with :attr:`columns` applied; :class:`DatasetError` naming a row that lacks a
        mapped column. ``name`` is used when :attr:`name` is None."""
        name = self.name or name
        source = self.source
        if self.split is not None:
            if not _is_dataset_dict(source):
                raise DatasetError(f"{name}: split={self.split!r} needs a DatasetDict source")
            if self.split not in source:
                raise DatasetError(f"{name}: no split {self.split!r}; the splits are {list(source)}")
            source = source[self.split]
        return [(where, self._mapped(row, where)) for where, row in located_rows(source, name=name)]

    def _mapped(self, row: dict[str, Any], where: str) -> dict[str, Any]:
        if not self.columns:
            return row
        missing = [col for col in self.columns.values() if col not in row]
        if missing:
            raise DatasetError(f"{where}: no column(s) {missing} named in columns={dict(self.columns)}; "
                               f"the row has {list(row)}")
        renamed = set(self.columns.values())
        out = {k: v for k, v in row.items() if k not in renamed}
        out.update({key: row[col] for key, col in self.columns.items()})
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter([row for _, row in self.located()])


def load_rows(source: str | Path | Iterable[dict[str, Any]], required: Sequence[str] = (),
              *, name: str = "dataset") -> list[dict[str, Any]]:
    """Rows from any source :func:`located_rows` reads, each checked to hold the ``required`` keys.

    Raises :class:`DatasetError` naming the file and line (JSONL; blank lines skipped), the file and row
    (Parquet/CSV) or the index of the first bad row.
    """
    return [row for _, row in located_rows(source, required, name=name)]


def load_jsonl(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Read a JSONL file; every non-blank line must be a JSON object with the ``required`` keys."""
    return [row for _, row in _located_jsonl(Path(path), required)]


def _located_jsonl(path: Path, required: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    located = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                located.append((where, json.loads(line)))
            except ValueError as e:
                raise DatasetError(f"{where}: not valid JSON ({e})") from None
    if not located:
        raise DatasetError(f"{path}: no rows")
    return _checked(located, required, str(path))


def _check_row(row: Any, required: Sequence[str], where: str) -> None:
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
    missing = [k for k in required if k not in row]
    if missing:
        raise DatasetError(f"{where}: missing key(s) {missing}; a row needs {list(required)}")


# ---------------------------------------------------------------------------------------------- splits


def check_split(split: str, allowed: Sequence[str]) -> str:
    """``split`` if it is one of ``allowed``, else a ``ValueError`` that lists them."""
    if split not in allowed:
        *head, last = (repr(s) for s in allowed)
        names = f"{', '.join(head)} or {last}" if head else last
        raise ValueError(f"split must be {names}, got {split!r}")
    return split


def split_index(k: int, split: str) -> int:
    """The generator index of the ``k``-th task of a split: ``train`` uses even indices, ``test`` odd ones, so
    the tasks of a seeded generator (``make_task(index)``) never cross between training and evaluation."""
    check_split(split, ("train", "test"))
    return 2 * k + (split == "test")


def hash_split(task_id: str, held_out: str, *, algorithm: str = "sha256") -> str:
    """The fixed split of a task id: ``held_out`` when the first 8 hex digits of the id's hash, as an integer,
    are divisible by 5 (about 20 %), else ``"train"``. A dataset keeps its ``algorithm`` forever (changing it
    would move tasks between splits)."""
    h = int(hashlib.new(algorithm, task_id.encode()).hexdigest()[:8], 16)
    return held_out if h % 5 == 0 else "train"


def draw_row(rows: Sequence[dict[str, Any]], rng: np.random.Generator) -> dict[str, Any]:
    """One row drawn uniformly with ``rng`` (an env's ``sample_task`` over a dataset)."""
    return rows[int(rng.integers(len(rows)))]


def seeded_draws(rows: Sequence[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows, row ``k`` drawn with ``np.random.default_rng([seed, k])``: a pure function of ``(seed, k)``."""
    return [draw_row(rows, np.random.default_rng([seed, k])) for k in range(n)]


def seeded_subset(rows: Sequence[_Row], n: int, seed: int, *, name: str = "the set") -> list[_Row]:
    """``n`` distinct rows in the order of ``np.random.default_rng(seed).permutation(len(rows))``: the test tasks of
    a benchmark env (a fixed set with no training split); all of them, each once, when ``n`` is larger (logged)."""
    if n > len(rows):
        logger.warning("%s has %d tasks; returning all of them (asked for %d)", name, len(rows), n)
    return [rows[int(i)] for i in np.random.default_rng(seed).permutation(len(rows))[:n]]


# ---------------------------------------------------------------------------------------------- generators


class TaskGenerator:
    """A seeded task generator: task ``index`` is a pure function of ``(index, families)``.

    ``families`` maps a family name to ``family(rng) -> ...``; :meth:`draw` picks a family with
    ``np.random.default_rng([index, salt])`` and lets it draw its parameters from the same generator. The
    module that owns the generator turns the draw into a task dict (``make_task``).
    """

    def __init__(self, families: dict[str, Callable[[np.random.Generator], Any]], salt: int, *,
                 noun: str = "task"):
        self.families = families
        self.salt = salt
        self.noun = noun
        """What a task is called in error messages (``"unknown problem families ..."``)."""

    def check(self, families: Sequence[str] | None) -> list[str]:
        """The family names to draw from (all when ``families`` is empty); ``ValueError`` naming unknown ones."""
        names = list(families) if families else list(self.families)
        unknown = set(names) - set(self.families)
        if unknown:
            raise ValueError(f"unknown {self.noun} families {sorted(unknown)}; known: {list(self.families)}")
        return names

    def draw(self, index: int, families: Sequence[str] | None = None) -> tuple[str, Any]:
        """``(family name, what the family returned)`` of task ``index``."""
        names = self.check(families)
        r = np.random.default_rng([index, self.salt])
        family = names[int(r.integers(len(names)))]
        return family, self.families[family](r)

    def many(self, make_task: Callable[[int, Sequence[str] | None], dict], n: int, split: str = "test",
             families: Sequence[str] | None = None, start: int = 0) -> list[dict]:
        """``n`` tasks ``make_task(index, families)`` of a split (``train``: even indices, ``test``: odd), from
        position ``start``."""
        return [make_task(split_index(i, split), families) for i in range(start, start + n)]

    def sample(self, make_task: Callable[[int, Sequence[str] | None], dict], rng: np.random.Generator,
               split: str, families: Sequence[str] | None = None) -> dict:
        """A task of ``split`` drawn with ``rng`` (an env's ``sample_task``)."""
        k = int(rng.integers(0, 2**31 - 1))
        return make_task(split_index(k, split), families)


def default_cache_dir() -> Path:
    """Where agentrl keeps what it derives from installed data (search indexes, converted tokenizers):
    ``$AGENTRL_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``."""
    if os.environ.get("AGENTRL_CACHE_DIR"):
        return Path(os.environ["AGENTRL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentrl"
