"""The built-in problem generator of ``AgentRL/PythonMath-v0``: task families in three tiers of difficulty.

Every family draws its parameters from a ``numpy`` Generator and returns ``(question, answer, solution_code)``:
the exact answer (an integer, as a string) and a short program that prints it (the demonstration's code call).
Numbers are sized so the answer cannot be guessed and mental arithmetic fails; the code gets it exactly.

* **tier 1** — one line of Python copies the question: ``What is 48213 * 9127 - 3391?`` ->
  ``print(48213 * 9127 - 3391)``.
* **tier 2** — a short loop or comprehension: ``the sum of the squares of the odd numbers below 7301`` ->
  ``print(sum(k * k for k in range(1, 7301, 2)))``.
* **tier 3** — the competition-style families (counting with conditions, modular arithmetic, combinatorics,
  primes, recurrences), phrased in LaTeX as in a contest; the original families of the env.

Which family task ``index`` holds (a pure function of ``index`` and the selection; ``np.random.default_rng([index,
SALT])`` draws the family and then its parameters):

* ``families=[...]`` — one of these families, uniformly (the draw of :class:`TaskGenerator`, unchanged: the task
  of a family list is the same as before tiers existed);
* else ``tiers=[...]`` (default :data:`DEFAULT_TIERS`, all three) — first a tier, uniformly among the selected
  ones (no draw when only one is selected), then a family of that tier, uniformly. ``tiers=[3]`` therefore gives
  exactly the tasks the env's default produced before tiers existed (2026-12-01); the default mixture since then
  (all tiers, a third each) holds other tasks at each position.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentrl.envs.datasets import TaskGenerator, split_index

__all__ = ["DEFAULT_TIERS", "FAMILIES", "GENERATOR", "SALT", "TIERS", "check_tiers", "make_task", "make_tasks",
           "sample_task"]

Family = Callable[[np.random.Generator], tuple[str, str, str]]


def _tier(n: int) -> Callable[[Family], Family]:
    def mark(fn: Family) -> Family:
        fn.tier = n  # type: ignore[attr-defined]
        return fn
    return mark


# ---------------------------------------------------------------------------------------------- tier 1


@_tier(1)
def _fam_mul_sub(r):
    a, b, c = int(r.integers(10_000, 100_000)), int(r.integers(1_000, 10_000)), int(r.integers(1_000, 10_000))
    return f"What is {a} * {b} - {c}?", str(a * b - c), f"print({a} * {b} - {c})"


@_tier(1)
def _fam_pow_mod(r):
    a, e, m = int(r.integers(3, 100)), int(r.integers(11, 100)), int(r.integers(1_000, 100_000))
    return f"Compute {a}**{e} mod {m}.", str(pow(a, e, m)), f"print({a}**{e} % {m})"


@_tier(1)
def _fam_range_sum(r):
    a, b = int(r.integers(2, 1_000)), int(r.integers(1_000, 100_000))
    q = f"What is the sum of the integers from {a} to {b}?"
    return q, str((a + b) * (b - a + 1) // 2), f"print(sum(range({a}, {b} + 1)))"


@_tier(1)
def _fam_floor_div(r):
    a, b = int(r.integers(10**6, 10**9)), int(r.integers(101, 1_000))
    q = f"What is {a} divided by {b}, rounded down to a whole number?"
    return q, str(a // b), f"print({a} // {b})"


@_tier(1)
def _fam_square_sum(r):
    a, b = int(r.integers(1_000, 10_000)), int(r.integers(1_000, 10_000))
    return f"What is {a} squared plus {b} squared?", str(a * a + b * b), f"print({a}**2 + {b}**2)"


# ---------------------------------------------------------------------------------------------- tier 2


@_tier(2)
def _fam_odd_squares(r):
    n = int(r.integers(1_000, 20_000))
    q = f"What is the sum of the squares of the odd numbers below {n}?"
    return q, str(_odd_squares_below(n)), f"print(sum(k * k for k in range(1, {n}, 2)))"


def _odd_squares_below(n: int) -> int:
    """1² + 3² + … over the odd numbers below ``n``: m(2m - 1)(2m + 1) / 3 for their count m (exact; what the
    solution code's loop sums, without the loop: the train-split scans generate hundreds of thousands)."""
    m = n // 2
    return m * (2 * m - 1) * (2 * m + 1) // 3


@_tier(2)
def _fam_count_multiples(r):
    n = int(r.integers(1_000, 100_000))
    a, b = sorted(int(x) for x in r.choice([3, 7, 11, 13, 17, 19], size=2, replace=False))
    ans = n // a + n // b - n // (a * b)  # a, b distinct primes
    q = f"How many integers from 1 to {n} are multiples of {a} or {b}?"
    code = f"print(sum(1 for k in range(1, {n} + 1) if k % {a} == 0 or k % {b} == 0))"
    return q, str(ans), code


def _divisor_sum(n: int) -> int:
    total = 0
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            total += d + (n // d if d * d != n else 0)
    return total


@_tier(2)
def _fam_divisor_sum(r):
    n = int(r.integers(10_000, 1_000_000))
    q = f"What is the sum of all positive divisors of {n}?"
    return q, str(_divisor_sum(n)), f"print(sum(d for d in range(1, {n} + 1) if {n} % d == 0))"


def _digit_occurrences(d: int, n: int) -> int:
    """How often digit ``d`` (1-9) occurs in 1..n, by place value (no loop over n)."""
    count, p = 0, 1
    while p <= n:
        high, cur, low = n // (p * 10), (n // p) % 10, n % p
        count += high * p + (p if cur > d else low + 1 if cur == d else 0)
        p *= 10
    return count


@_tier(2)
def _fam_digit_occurrences(r):
    d, n = int(r.integers(1, 10)), int(r.integers(1_000, 100_000))
    q = f"How many times does the digit {d} appear when all the integers from 1 to {n} are written down?"
    return q, str(_digit_occurrences(d, n)), f"print(sum(str(k).count('{d}') for k in range(1, {n} + 1)))"


@_tier(2)
def _fam_collatz_steps(r):
    n = int(r.integers(1_000, 1_000_000))
    x, steps = n, 0
    while x != 1:
        x, steps = (x // 2 if x % 2 == 0 else 3 * x + 1), steps + 1
    q = (f"Start with {n}. If the number is even, divide it by 2; if it is odd, multiply it by 3 and add 1. "
         "How many steps does it take to reach 1?")
    code = (f"n, steps = {n}, 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
            "    steps += 1\nprint(steps)")
    return q, str(steps), code


# ---------------------------------------------------------------------------------------------- tier 3
# The env's original families: their draws must not change (task i of a family list is fixed).


def _divisible_by_a_or_b_not_c(n: int, a: int, b: int, c: int) -> int:
    """How many of 1..n are divisible by ``a`` or ``b`` but not by ``c``, by inclusion-exclusion over least
    common multiples (exact; what the solution code's loop counts, without the loop)."""
    def multiples(*ks: int) -> int:
        return n // math.lcm(*ks)

    a_or_b = multiples(a) + multiples(b) - multiples(a, b)
    a_or_b_and_c = multiples(a, c) + multiples(b, c) - multiples(a, b, c)
    return a_or_b - a_or_b_and_c


@_tier(3)
def _fam_count_divisible(r):
    n = int(r.integers(500, 20000))
    a, b = (int(x) for x in r.choice([3, 4, 5, 6, 7, 9, 11, 13], size=2, replace=False))
    c = int(r.choice([2, 8, 10, 12, 15]))
    ans = _divisible_by_a_or_b_not_c(n, a, b, c)
    q = f"How many integers from 1 to {n} inclusive are divisible by {a} or by {b}, but not by {c}?"
    code = f"print(sum(1 for k in range(1, {n} + 1) if (k % {a} == 0 or k % {b} == 0) and k % {c} != 0))"
    return q, str(ans), code


@_tier(3)
def _fam_modpow(r):
    a, e = int(r.integers(2, 50)), int(r.integers(100, 10**6))
    m = int(r.choice([7, 11, 13, 97, 101, 1000, 1009, 10**4]))
    q = f"What is the remainder when ${a}^{{{e}}}$ is divided by {m}?"
    return q, str(pow(a, e, m)), f"print(pow({a}, {e}, {m}))"


@_tier(3)
def _fam_sum_powers(r):
    n, p = int(r.integers(20, 400)), int(r.integers(2, 5))
    q = f"Compute $\\sum_{{k=1}}^{{{n}}} k^{{{p}}}$."
    return q, str(sum(k**p for k in range(1, n + 1))), f"print(sum(k**{p} for k in range(1, {n} + 1)))"


@_tier(3)
def _fam_digit_sum(r):
    b, e = int(r.integers(2, 10)), int(r.integers(50, 400))
    q = f"What is the sum of the digits of ${b}^{{{e}}}$?"
    return q, str(sum(map(int, str(b**e)))), f"print(sum(int(d) for d in str({b}**{e})))"


@_tier(3)
def _fam_no_consecutive_subsets(r):
    n, k = int(r.integers(10, 20)), int(r.integers(3, 6))
    q = (f"How many {k}-element subsets of $\\{{1, 2, \\ldots, {n}\\}}$ contain no two consecutive "
         f"integers?")
    ans = math.comb(n - k + 1, k)
    code = ("from itertools import combinations\n"
            f"print(sum(1 for s in combinations(range(1, {n} + 1), {k}) "
            "if all(b - a > 1 for a, b in zip(s, s[1:]))))")
    return q, str(ans), code


@functools.cache
def _digit_sum_count(digits: int, total: int) -> int:
    """How many ``digits``-digit integers have digits that sum to ``total``, counted one by one as the solution
    code counts them; cached: the family draws from 60 ``(digits, total)`` pairs, and each count scans up to
    90,000 integers (it was most of the time a scan of the train split took)."""
    return sum(1 for x in range(10 ** (digits - 1), 10**digits) if sum(map(int, str(x))) == total)


@_tier(3)
def _fam_digit_count(r):
    digits, s = int(r.integers(3, 6)), int(r.integers(5, 25))
    lo, hi = 10 ** (digits - 1), 10**digits
    ans = _digit_sum_count(digits, s)
    q = f"How many {digits}-digit positive integers have digits that sum to {s}?"
    code = f"print(sum(1 for x in range({lo}, {hi}) if sum(map(int, str(x))) == {s}))"
    return q, str(ans), code


@_tier(3)
def _fam_primes(r):
    n = int(r.integers(1000, 100000))
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, math.isqrt(n) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(range(i * i, n + 1, i)))
    q = f"How many prime numbers are less than or equal to {n}?"
    code = ("import sympy\n"
            f"print(sympy.primepi({n}))")
    return q, str(sum(sieve)), code


@_tier(3)
def _fam_fibonacci_mod(r):
    n, m = int(r.integers(50, 5000)), int(r.choice([7, 10, 97, 100, 1000, 10007]))
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % m
    q = f"Let $F_0 = 0$, $F_1 = 1$ and $F_{{n+1}} = F_n + F_{{n-1}}$. What is $F_{{{n}}} \\bmod {m}$?"
    code = f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a % {m})"
    return q, str(a), code


@_tier(3)
def _fam_linear_congruence(r):
    m = int(r.choice([97, 101, 211, 997, 1009]))
    a, c = int(r.integers(2, m)), int(r.integers(1, m))
    x = (c * pow(a, -1, m)) % m or m
    q = f"Find the smallest positive integer $x$ such that ${a}x \\equiv {c} \\pmod{{{m}}}$."
    code = f"print(next(x for x in range(1, {m} + 1) if ({a} * x - {c}) % {m} == 0))"
    return q, str(x), code


@_tier(3)
def _fam_lattice_paths(r):
    w, h = int(r.integers(4, 10)), int(r.integers(4, 10))
    bx, by = int(r.integers(1, w)), int(r.integers(1, h))
    total = math.comb(w + h, w)
    through = math.comb(bx + by, bx) * math.comb(w - bx + h - by, w - bx)
    q = (f"A path goes from $(0,0)$ to $({w},{h})$ using unit steps right or up. How many such paths avoid "
         f"the point $({bx},{by})$?")
    code = (f"from functools import lru_cache\n@lru_cache(None)\ndef f(x, y):\n"
            f"    if (x, y) == ({bx}, {by}) or x > {w} or y > {h}:\n        return 0\n"
            f"    if (x, y) == ({w}, {h}):\n        return 1\n    return f(x + 1, y) + f(x, y + 1)\nprint(f(0, 0))")
    return q, str(total - through), code


# ---------------------------------------------------------------------------------------------- registry

#: Family name -> ``family(rng) -> (question, answer, solution_code)``; each has a ``tier`` attribute. The
#: tier-3 names keep their order (the family draw of a tier-3 selection indexes this order).
FAMILIES: dict[str, Family] = {
    "mul_sub": _fam_mul_sub,
    "pow_mod": _fam_pow_mod,
    "range_sum": _fam_range_sum,
    "floor_div": _fam_floor_div,
    "square_sum": _fam_square_sum,
    "odd_squares": _fam_odd_squares,
    "count_multiples": _fam_count_multiples,
    "divisor_sum": _fam_divisor_sum,
    "digit_occurrences": _fam_digit_occurrences,
    "collatz_steps": _fam_collatz_steps,
    "count_divisible": _fam_count_divisible,
    "modpow": _fam_modpow,
    "sum_powers": _fam_sum_powers,
    "digit_sum": _fam_digit_sum,
    "no_consecutive_subsets": _fam_no_consecutive_subsets,
    "digit_count": _fam_digit_count,
    "primes": _fam_primes,
    "fibonacci_mod": _fam_fibonacci_mod,
    "linear_congruence": _fam_linear_congruence,
    "lattice_paths": _fam_lattice_paths,
}

#: Family name -> tier (1: one line copies the question, 2: a short loop, 3: competition style).
TIERS: dict[str, int] = {name: fn.tier for name, fn in FAMILIES.items()}  # type: ignore[attr-defined]

#: The tiers of the default mixture: all of them, a third of the tasks each.
DEFAULT_TIERS: tuple[int, ...] = (1, 2, 3)

SALT = 0x9A7
GENERATOR = TaskGenerator(FAMILIES, salt=SALT, noun="problem")


def check_tiers(tiers: Sequence[int] | None, families: Sequence[str] | None = None) -> tuple[int, ...]:
    """The sorted distinct tiers of ``tiers`` (``DEFAULT_TIERS`` when None); ``ValueError`` naming the key
    ``tiers`` for a bad value, or naming ``families`` when a given family is not in the given tiers."""
    if tiers is None:
        return DEFAULT_TIERS
    known = sorted(set(TIERS.values()))
    if isinstance(tiers, (str, bytes)) or not isinstance(tiers, Sequence) or not tiers or not all(
            isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t in known for t in tiers):
        raise ValueError(f"tiers must be a non-empty list of tiers from {known}, got {tiers!r}")
    out = tuple(sorted({int(t) for t in tiers}))
    outside = [f for f in (families or ()) if f in TIERS and TIERS[f] not in out]
    if outside:
        raise ValueError(f"families {outside} are not in tiers {list(out)} (their tiers: "
                         f"{ {f: TIERS[f] for f in outside} })")
    return out


def _draw(index: int, families: Sequence[str] | None, tiers: Sequence[int] | None) -> tuple[str, Any]:
    if families:
        return GENERATOR.draw(index, families)
    chosen = check_tiers(tiers)
    r = np.random.default_rng([index, SALT])
    tier = chosen[int(r.integers(len(chosen)))] if len(chosen) > 1 else chosen[0]
    names = [name for name, t in TIERS.items() if t == tier]
    family = names[int(r.integers(len(names)))]
    return family, FAMILIES[family](r)


def make_task(index: int, families: Sequence[str] | None = None, tiers: Sequence[int] | None = None
              ) -> dict[str, Any]:
    """Built-in problem number ``index`` (a pure function of ``index``, ``families`` and ``tiers``; see the module
    docstring for the draw).

    Returns ``{"id", "family", "tier", "question", "answer", "solution_code", "data_source"}``; ``answer`` is
    exact (an integer as a string) and ``solution_code`` prints it.
    """
    family, (question, answer, code) = _draw(index, families, tiers)
    return {"id": f"{family}-{index}", "family": family, "tier": TIERS[family], "question": question,
            "answer": answer, "solution_code": code, "data_source": "agentrl_generator"}


def make_tasks(n: int, split: str = "test", families: Sequence[str] | None = None, start: int = 0, *,
               tiers: Sequence[int] | None = None) -> list[dict]:
    """``n`` built-in problems of a split (``train``: even indices, ``test``: odd), from position ``start``; the
    default mixture is :data:`DEFAULT_TIERS`."""
    return [make_task(split_index(i, split), families, tiers) for i in range(start, start + n)]


def sample_task(rng: np.random.Generator, split: str, families: Sequence[str] | None = None,
                tiers: Sequence[int] | None = None) -> dict[str, Any]:
    """A problem of ``split`` drawn with ``rng`` (the env's ``sample_task``)."""
    k = int(rng.integers(0, 2**31 - 1))
    return make_task(split_index(k, split), families, tiers)
