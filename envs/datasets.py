"""Loading task rows from JSONL files and lists, with errors that name the file and line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    """A malformed dataset row; the message names the file (or list) and the line (or index)."""


def load_rows(source: str | Path | Iterable[dict[str, Any]], required: Sequence[str] = (),
              *, name: str = "dataset") -> list[dict[str, Any]]:
    """Rows from a JSONL path or an iterable of dicts, each checked to hold the ``required`` keys.

    Raises :class:`DatasetError` naming the file and 1-based line (or the list index) of the first bad row.
    Blank lines are skipped.
    """
    if isinstance(source, (str, Path)):
        return load_jsonl(source, required)
    rows = []
    for i, row in enumerate(source):
        _check_row(row, required, f"{name}[{i}]")
        rows.append(row)
    if not rows:
        raise DatasetError(f"{name} is empty")
    return rows


def load_jsonl(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Read a JSONL file; every non-blank line must be a JSON object with the ``required`` keys."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DatasetError(f"{path}:{lineno}: not valid JSON ({e})") from None
            _check_row(row, required, f"{path}:{lineno}")
            rows.append(row)
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return rows


def _check_row(row: Any, required: Sequence[str], where: str) -> None:
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
    missing = [k for k in required if k not in row]
    if missing:
        raise DatasetError(f"{where}: missing key(s) {missing}; a row needs {list(required)}")


def split_index(k: int, split: str) -> int:
    """The generator index of the ``k``-th task of a split: ``train`` uses even indices, ``test`` odd ones, so
    the tasks of a seeded generator (``make_task(index)``) never cross between training and evaluation."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    return 2 * k + (split == "test")


def default_cache_dir() -> Path:
    """Where agentrl keeps what it derives from installed data (search indexes, converted tokenizers):
    ``$AGENTRL_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``."""
    if os.environ.get("AGENTRL_CACHE_DIR"):
        return Path(os.environ["AGENTRL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentrl"
