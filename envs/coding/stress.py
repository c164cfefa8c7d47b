"""Stress tests of the bundled coding tasks: large inputs made from a seed, with their expected outputs.

A task row of ``envs/coding/tasks.jsonl`` may carry ``"stress": [{"generator": NAME, "seed": S, "n": N,
"time_limit_s": T}, ...]``. :func:`stress_test` turns one such spec into a hidden test ``{"input", "output",
"kind": "stress", "time_limit_s"}``: the input comes from ``numpy.random.default_rng(seed)``, the expected
output from an efficient solver here, so the data file stays small and the big inputs are the same on every
machine. The size ``n`` is chosen so that the efficient algorithm the task implies finishes far inside the
time limit and a quadratic one cannot (as the time-limited tests of CodeContests and LiveCodeBench do).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from typing import Any

import numpy as np


def _ints(values: Any) -> str:
    return " ".join(map(str, values))


def _count_inversions(rng: np.random.Generator, n: int) -> tuple[str, str]:
    a = rng.integers(-10**9, 10**9, size=n).tolist()
    ranks = {v: i + 1 for i, v in enumerate(sorted(set(a)))}
    tree = [0] * (len(ranks) + 1)
    inversions = 0
    for seen, x in enumerate(a):  # Fenwick tree: how many of the earlier values exceed x
        r, le = ranks[x], 0
        i = r
        while i > 0:
            le += tree[i]
            i -= i & -i
        inversions += seen - le
        i = r
        while i < len(tree):
            tree[i] += 1
            i += i & -i
    return f"{n}\n{_ints(a)}\n", f"{inversions}\n"


def _max_subarray(rng: np.random.Generator, n: int) -> tuple[str, str]:
    a = rng.integers(-1000, 1000, size=n).tolist()
    best = cur = a[0]
    for x in a[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return f"{n}\n{_ints(a)}\n", f"{best}\n"


def _longest_increasing_subsequence(rng: np.random.Generator, n: int) -> tuple[str, str]:
    a = rng.integers(0, 10**9, size=n).tolist()
    tails: list[int] = []
    for x in a:
        i = bisect.bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return f"{n}\n{_ints(a)}\n", f"{len(tails)}\n"


def _binary_search_count(rng: np.random.Generator, n: int) -> tuple[str, str]:
    q = max(1, n // 20)  # n / 20 answers keep the output inside the sandbox's 64 KiB; a scan is still O(n q)
    a = rng.integers(0, 10**6, size=n).tolist()
    bounds = np.sort(rng.integers(0, 10**6, size=(q, 2)), axis=1).tolist()
    s = sorted(a)
    out = [bisect.bisect_right(s, r) - bisect.bisect_left(s, lo) for lo, r in bounds]
    queries = "\n".join(f"{lo} {r}" for lo, r in bounds)
    return f"{n} {q}\n{_ints(a)}\n{queries}\n", "\n".join(map(str, out)) + "\n"


def _two_sum(rng: np.random.Generator, n: int) -> tuple[str, str]:
    a = (rng.integers(0, 10**9, size=n) * 2).tolist()  # even values never sum to the odd target ...
    t = 2 * 10**9 + 1
    i, j = sorted(rng.choice(np.arange(n // 2, n), size=2, replace=False).tolist())
    a[i], a[j] = 10**9, t - 10**9  # ... so the first pair is late in the list
    seen: dict[int, int] = {}
    for k, x in enumerate(a):
        if t - x in seen:
            return f"{n} {t}\n{_ints(a)}\n", f"{seen[t - x] + 1} {k + 1}\n"
        seen.setdefault(x, k)
    raise AssertionError("unreachable: the planted pair sums to the target")


#: Generator name -> ``f(rng, n) -> (input, expected output)``; the name is the bundled task's id.
GENERATORS: dict[str, Callable[[np.random.Generator, int], tuple[str, str]]] = {
    "count-inversions": _count_inversions,
    "max-subarray": _max_subarray,
    "longest-increasing-subsequence": _longest_increasing_subsequence,
    "binary-search-count": _binary_search_count,
    "two-sum": _two_sum,
}


@functools.lru_cache(maxsize=64)
def _generate(name: str, seed: int, n: int) -> tuple[str, str]:
    return GENERATORS[name](np.random.default_rng(seed), n)


def stress_test(spec: Any) -> dict[str, Any]:
    """The hidden test a stress spec ``{"generator", "seed", "n", "time_limit_s"}`` stands for.

    Raises:
        ValueError: naming the bad key (unknown generator, non-integer seed or size, non-positive limit).
    """
    if not isinstance(spec, dict):
        raise ValueError('a stress spec must be {"generator": str, "seed": int, "n": int, "time_limit_s": float}')
    name = spec.get("generator")
    if name not in GENERATORS:
        raise ValueError(f"unknown stress generator {name!r}; the generators are {sorted(GENERATORS)}")
    seed, n, limit = spec.get("seed"), spec.get("n"), spec.get("time_limit_s")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError('stress "seed" must be a non-negative integer')
    if not isinstance(n, int) or isinstance(n, bool) or not 2 <= n <= 1_000_000:
        raise ValueError('stress "n" must be an integer from 2 to 1000000')
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or not limit > 0:
        raise ValueError('stress "time_limit_s" must be a positive number')
    test_input, output = _generate(name, seed, n)
    return {"input": test_input, "output": output, "kind": "stress", "time_limit_s": float(limit)}
