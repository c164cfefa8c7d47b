"""Answer normalisation and matching: how a final answer is compared with the reference answers."""

from __future__ import annotations

import math
import re
import string
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """Search-R1 / SQuAD normalisation: lower-case, drop punctuation and English articles, collapse spaces."""
    s = s.lower().translate(_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, golds: str | list[str]) -> bool:
    """Normalised exact match against one or several reference answers."""
    golds = [golds] if isinstance(golds, str) else golds
    p = normalize_answer(prediction)
    return any(p == normalize_answer(g) for g in golds)


_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def parse_number(s: str) -> float | None:
    """A number written plainly (``1,776``, ``$12.50``, ``42.``, ``-3e2``), else ``None``."""
    t = s.strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if t.endswith("%"):
        t = t[:-1]
    if not _NUMBER.match(t):
        return None
    v = float(t)
    return v if math.isfinite(v) else None


def answers_match(prediction: str, gold: Any, rel_tol: float = 1e-4) -> bool:
    """Numeric equality when both sides are numbers, else normalised exact match (any of several golds)."""
    golds = gold if isinstance(gold, list) else [gold]
    p_num = parse_number(prediction)
    for g in golds:
        g_num = g if isinstance(g, (int, float)) and not isinstance(g, bool) else parse_number(str(g))
        if p_num is not None and g_num is not None:
            if math.isclose(p_num, g_num, rel_tol=rel_tol, abs_tol=1e-9):
                return True
        elif normalize_answer(prediction) == normalize_answer(str(g)):
            return True
    return False
