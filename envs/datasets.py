"""Task data: loading rows with errors that name the file and line, fixed splits, and seeded task generators."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs._shared import default_cache_dir

__all__ = ["DatasetError", "TaskGenerator", "check_split", "default_cache_dir", "draw_row", "hash_split",
           "load_jsonl", "load_rows", "located_rows", "seeded_draws", "split_index"]


class DatasetError(ValueError):
    """A malformed dataset row; the message names the file (or list) and the line (or index)."""


def located_rows(source: str | Path | Iterable[dict[str, Any]], required: Sequence[str] = (),
                 *, name: str = "dataset") -> list[tuple[str, dict[str, Any]]]:
    """``[(where, row)]`` from a JSONL path or an iterable of dicts, each row checked to hold ``required``.

    ``where`` is ``"file:line"`` (1-based, blank lines skipped) or ``"name[index]"``: use it in the
    :class:`DatasetError` of a later check of the row. Raises :class:`DatasetError` naming the first bad row.
    """
    if isinstance(source, (str, Path)):
        return _located_jsonl(Path(source), required)
    rows = []
    for i, row in enumerate(source):
        where = f"{name}[{i}]"
        _check_row(row, required, where)
        rows.append((where, row))
    if not rows:
        raise DatasetError(f"{name} is empty")
    return rows


def load_rows(source: str | Path | Iterable[dict[str, Any]], required: Sequence[str] = (),
              *, name: str = "dataset") -> list[dict[str, Any]]:
    """Rows from a JSONL path or an iterable of dicts, each checked to hold the ``required`` keys.

    Raises :class:`DatasetError` naming the file and 1-based line (or the list index) of the first bad row.
    Blank lines are skipped.
    """
    return [row for _, row in located_rows(source, required, name=name)]


def load_jsonl(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Read a JSONL file; every non-blank line must be a JSON object with the ``required`` keys."""
    return [row for _, row in _located_jsonl(Path(path), required)]


def _located_jsonl(path: Path, required: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DatasetError(f"{where}: not valid JSON ({e})") from None
            _check_row(row, required, where)
            rows.append((where, row))
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return rows


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
