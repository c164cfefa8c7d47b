"""Fixed held-out task sets for the learning experiments, written once, before any tuning, and committed.

Each set is ``benchmarks/heldout/<name>.jsonl`` (one task per line: the env's own task dicts, read by ``agentrl eval
--tasks-file`` and ``MainJobConfig.eval_tasks_file``) with a sidecar ``<name>.json`` saying how the set was made
(env, split, positions, generator command, date, "fixed before tuning"), what it overlaps, its declared
``primary_metric`` (what a goal on the set is stated in) and its content hash ``sha256``, by which the ledger
``benchmarks/heldout/ledger.jsonl`` (``agentrl.algos.evaluation.ledger``) recognises it: every evaluation on a set
appends a row there. :data:`BY_ENV` names the set each env's experiments evaluate on: the v2 sets.

**v2 (issue 28)** — ``tooluse_v2``, ``search_v2``, ``pythonmath_v2``: fresh positions, no question text shared
with the train split, fixed before any tuning (sidecar ``"fixed_before_tuning": true``, ``train_text_overlap_total:
0``, how the set was drawn in ``left_out_families``, ``skipped``, ``train_scan``).

* ``tooluse_v2``, ``pythonmath_v2`` — 128 test-split tasks (odd generator indices) from test position 2,000,000 on,
  in order: far beyond v1 (100,000-100,135) and every position an experiment is known to have evaluated. The
  train scan is the first 200,000 train-split tasks (PythonMath-v0: of the default mixture and of ``tiers=[1, 2]``,
  the learning preset's, plus the tier probe's train positions 1,000,000-1,000,031). Training draws train
  positions at random, so the scan is a sample of what every training run draws from, far larger than any run
  here draws. A family is left out when at least half of its questions at the first 2,000 positions from
  2,000,000 occur in the scan: its question space is so small that training covers it (ToolUse-v0: ``stock`` 99
  distinct questions, ``power`` 85, ``convert``, ``stock_value``, ``stock_total``; PythonMath-v0: ``digit_count``,
  ``no_consecutive_subsets``, ``lattice_paths``, ``sum_powers``, ``digit_sum``, ``odd_squares``), the sidecar says
  why for each. Of the other families every task is skipped whose question text occurs in the scan, at the first
  288 test positions (evaluated before; PythonMath-v0: of the default mixture, ``tiers=[3]`` and ``tiers=[1, 2]``),
  in the v1 set or earlier in the set.
* ``search_v2`` — every bundled dev question not evaluated before (the 32 held-out draws of seed 0 and the v1
  set, by id and text) whose text is not in the train split: 106, fewer than 128, all ``wiki_description`` (the 14
  ``fanoutqa`` dev questions were all used), so Macro-EM on it is wiki_description's EM.

**v3 (issue 30)** — ``tooluse_v3``: what ``tooluse_v2`` could not hold. Its cold start scored 98% on
``tooluse_v2`` (only ``add``, ``multiply``, ``add_multiply`` and ``days`` were left in it), so it cannot show what
RL adds, and the multi-call stock families were left out because 99 stock items make their question spaces small.
ToolUse-v0 with ``items=999`` (``env_kwargs``; the env's default stays 99) widens them: 128 test-split tasks from
position 3,000,000 on, drawn by the v2 rule with a train scan of the same ``items=999`` mixture (which also leaves
out ``stock``, ``power`` and ``convert``), skipping ``tooluse_v2``'s questions too. Experiments on it train with
``items=999`` (``benchmarks/learning.py``'s ToolUse-v0 preset).

**v4 (issue 30)** — ``tooluse_v4``: ``tooluse_v3``'s rule (``items=999``) from test position 4,000,000 on, skipping
``tooluse_v2``'s and ``tooluse_v3``'s questions too. A setting chosen by looking at ``tooluse_v3`` (the GRPO learning
rate of the algorithms comparison's diagnostic) is evaluated here, on questions no run had seen when it was chosen;
written before any evaluation on it.

**v5 and pythonmath_v3 (issue 30)** — ``tooluse_v5`` (``tooluse_v4``'s rule from test position 5,000,000 on,
skipping the questions of every earlier ToolUse set) and ``pythonmath_v3`` (``pythonmath_v2``'s rule from test
position 3,000,000 on, skipping ``pythonmath_v2``'s questions): for settings chosen by looking at ``tooluse_v4`` (a
48-step cold start, GRPO at lr 6e-5) and at ``pythonmath_v2``; written before any evaluation on them.
``pythonmath_v4`` (from 4,000,000, skipping ``pythonmath_v2``'s and ``pythonmath_v3``'s questions): for a cold start
chosen after ``pythonmath_v3``'s run (demonstrations of tier 1 only).

**v1 (issue 16), burnt** — ``tooluse``, ``search``, ``pythonmath`` (sidecar ``"burnt": "<why>"``): settings were
chosen by looking at them (main-job configurations on ``tooluse``, Search's ``rl_steps=32`` and
``balance_sources`` on ``search``, PythonMath's RL budget after its cold start's score on ``pythonmath``), and 78
of ``tooluse``'s 128 questions (24 of ``pythonmath``'s) occur in the train split. Kept, unchanged, because the
ledger and the old pages refer to them: select one by name (``benchmarks/learning.py --heldout tooluse``) only to
re-derive a figure measured on it. How they were drawn:

* ``tooluse`` — ToolUse-v0: 128 test-split tasks from test position 100,000 on, skipping a task whose question
  text equals one at the test positions evaluated before (0-31, the main job; 32-287, issue 16's two sets).
* ``search`` — Search-v0: 128 questions of the bundled dev split, skipping the questions earlier runs evaluated
  (``test_tasks(env, 32, seed=0)``) and any whose text occurs in the train split: the two sources (fanoutqa,
  wiki_description) in turn, each in SHA-1 order of its ids.
* ``pythonmath`` — PythonMath-v0: as ``tooluse``, with the problem generator of ``envs/python_math/tasks.py``.

Split membership is the env's own: generator index parity (ToolUse, PythonMath) and the id hash (Search). When an
env's task generator changes, ``check`` fails: rewrite the set (``write --only NAME``) *before* tuning on it.

    python benchmarks/heldout.py write                  # (re)write every set (keeps the date of an unchanged set)
    python benchmarks/heldout.py write --only tooluse_v2 tooluse_v3 tooluse_v4 tooluse_v5 search_v2   # seconds
    python benchmarks/heldout.py write --only pythonmath_v2 pythonmath_v3 pythonmath_v4   # ~3.5 min: their train scan
    python benchmarks/heldout.py check                  # exit 1 when a committed set differs from its generator
"""

from __future__ import annotations

import argparse
import collections
import copy
import datetime
import functools
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = HERE / "heldout"
SIZE = 128
#: Test-split positions experiments evaluated before these sets existed: 0-31 (the main job), 32-287 (issue 16).
EVALUATED_TEST_POSITIONS = 32 + 256
#: Where the generator sets start in the test split: far from every position evaluated so far.
START = 100_000
#: Train-split tasks the sidecar's text-overlap count compares with (v2: that the sets skip).
TRAIN_SCAN = 200_000
#: v2 (issue 28): where the generator sets start in the test split, far beyond v1's positions (100,000-100,135)
#: and every other position an experiment is known to have evaluated.
START_V2 = 2_000_000
#: v2: the test positions from START_V2 whose questions decide which families are memorisable.
FAMILY_PROBE = 2_000
#: v2: a family is left out when at least this share of its probe questions occur in the train scan.
MEMORISABLE_SHARE = 0.5
#: v2: PythonMath-v0's train mixtures the scan covers: the env's default (all tiers) and the learning preset's
#: (``tiers=[1, 2]``, what ``benchmarks/learning.py`` trains on).
PYTHONMATH_TRAIN_TIERS: tuple[tuple[int, ...] | None, ...] = (None, (1, 2))
#: v2: PythonMath-v0's mixtures whose first EVALUATED_TEST_POSITIONS test tasks count as evaluated: the default, the
#: default before 2026-12-01 (``tiers=[3]``) and the learning preset's (``tiers=[1, 2]``).
PYTHONMATH_EVALUATED_TIERS: tuple[tuple[int, ...] | None, ...] = (None, (3,), (1, 2))
#: v2: train positions an experiment looked at beyond the scan: docs/envs/python_math.md's tier probe
#: (positions 1,000,000-1,000,031 of ``tiers=[1, 2]``), as (env, start, n, tiers).
TRAIN_POSITIONS_USED = (("AgentRL/PythonMath-v0", 1_000_000, 32, (1, 2)),)


@dataclass(frozen=True)
class HeldoutSpec:
    """One fixed set: its env, split, how its positions were chosen, and the function that makes it."""

    name: str
    env: str
    split: str
    positions: str
    make: Callable[[], list[dict[str, Any]]]
    primary_metric: str = "average_at_n"
    """The metric the set's goals are stated on (``agentrl.algos.evaluation.intervals.METRICS``): Average@N
    (ToolUse-v0's success, PythonMath-v0's Average@4) or ``macro_em`` (Search-v0)."""
    burnt: str | None = None
    """Why the set no longer gives held-out figures (settings were chosen by looking at it); kept for re-deriving
    old figures only."""
    info: Callable[[], dict[str, Any]] | None = None
    """Extra sidecar fields: how the set was drawn (v2: families left out and why, tasks skipped, the scan)."""

    @property
    def path(self) -> Path:
        return FOLDER / f"{self.name}.jsonl"

    @property
    def meta_path(self) -> Path:
        return FOLDER / f"{self.name}.json"


def task_text(task: dict[str, Any]) -> str:
    """The question a task asks (``question``; ToolUse-v0 calls it ``query``)."""
    return str(task.get("question", task.get("query", "")))


def generator_index(task: dict[str, Any]) -> int:
    """The generator index in a generated task's id (``family-<index>``)."""
    return int(str(task["id"]).rsplit("-", 1)[1])


def _generated(module) -> list[dict[str, Any]]:
    """SIZE test-split tasks from position START on, skipping questions asked at the evaluated positions."""
    seen = {task_text(t) for t in module.make_tasks(EVALUATED_TEST_POSITIONS, "test")}
    out, pos = [], START
    while len(out) < SIZE:
        task = module.make_tasks(1, "test", start=pos)[0]
        pos += 1
        if task_text(task) not in seen:
            out.append(task)
    return out


def make_tooluse() -> list[dict[str, Any]]:
    from agentrl.envs import tool_use

    return _generated(tool_use)


def make_pythonmath() -> list[dict[str, Any]]:
    from agentrl.envs.python_math import tasks

    return _generated(tasks)


def search_evaluated() -> list[dict[str, Any]]:
    """The dev questions earlier Search-v0 runs evaluated (the main job's held-out draws of seed 0)."""
    from agentrl.envs.datasets import seeded_draws
    from agentrl.envs.search.questions import load_bundled

    # test_tasks(env, 32, seed=0) = env.test_tasks(32, seed=0 + HELDOUT_SEED_OFFSET); written out here so
    # that this module does not import agentrl.algos (torch).
    return seeded_draws(load_bundled("dev"), 32, 0 + 10_007)


def make_search() -> list[dict[str, Any]]:
    from agentrl.envs.search.questions import load_bundled

    skip_ids = {t["id"] for t in search_evaluated()}
    train_texts = {task_text(t).strip().lower() for t in load_bundled("train")}
    rows = sorted(load_bundled("dev"), key=lambda t: hashlib.sha1(str(t["id"]).encode()).hexdigest())
    rows = [t for t in rows if t["id"] not in skip_ids and task_text(t).strip().lower() not in train_texts]
    if len(rows) < SIZE:
        raise RuntimeError(f"the bundled dev split has only {len(rows)} unevaluated questions; {SIZE} needed")
    # The sources in turn (SHA-1 order within each) until the rarer runs out (fanoutqa: 14 in dev), so the set holds
    # every question of the rarer source that Macro-EM can have, and any prefix of the file (--quick) mixes both.
    by_source: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for t in rows:
        by_source[t["data_source"]].append(t)
    queues = [by_source[k] for k in sorted(by_source)]
    out = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return out[:SIZE]


# ---------------------------------------------------------------------------------------------- v2 (issue 28)

TOOLUSE, SEARCH, PYTHONMATH = "AgentRL/ToolUse-v0", "AgentRL/Search-v0", "AgentRL/PythonMath-v0"


def _make_tasks(env: str, n: int, split: str, start: int = 0, tiers: tuple[int, ...] | None = None,
                items: int | None = None) -> list[dict[str, Any]]:
    """``n`` generated tasks of ``env`` (ToolUse-v0 or PythonMath-v0) from ``split`` position ``start``
    (ToolUse-v0: of ``items`` stock items, default the env's)."""
    if env == TOOLUSE:
        from agentrl.envs import tool_use

        return tool_use.make_tasks(n, split, start=start, items=items or tool_use.ITEMS)
    from agentrl.envs.python_math import tasks

    return tasks.make_tasks(n, split, start=start, tiers=list(tiers) if tiers else None)


@functools.cache
def train_scan(env: str, items: int | None = None) -> dict[str, frozenset[str]]:
    """Family -> the question texts of the v2 train scan: the first TRAIN_SCAN train-split tasks of each train
    mixture (ToolUse-v0: its one; PythonMath-v0: PYTHONMATH_TRAIN_TIERS) and TRAIN_POSITIONS_USED. Training draws
    train positions at random (``sample_task``: any of 2**31), so the scan is a sample of the question distribution
    every training run draws from, larger than any run here draws (hundreds to a few thousand tasks)."""
    by_family: dict[str, set[str]] = collections.defaultdict(set)
    mixtures = PYTHONMATH_TRAIN_TIERS if env == PYTHONMATH else (None,)
    tasks = [t for tiers in mixtures for t in _make_tasks(env, TRAIN_SCAN, "train", tiers=tiers, items=items)]
    tasks += [t for e, start, n, tiers in TRAIN_POSITIONS_USED if e == env
              for t in _make_tasks(env, n, "train", start=start, tiers=tiers)]
    for t in tasks:
        by_family[str(t["family"])].add(task_text(t))
    return {k: frozenset(v) for k, v in sorted(by_family.items())}


def train_texts(env: str, items: int | None = None) -> frozenset[str]:
    """Every question text of :func:`train_scan`."""
    return frozenset().union(*train_scan(env, items).values())


def train_scan_rule(env: str, items: int | None = None) -> str:
    if env == SEARCH:
        return "every question of the bundled train split (2,048), compared lower-cased"
    mixtures = ("the default mixture" + (f" with items={items}" if items else "") if env == TOOLUSE
                else "the default mixture (all tiers) and of tiers=[1, 2]")
    extra = "; plus train positions 1,000,000-1,000,031 of tiers=[1, 2] (the tier probe)" if env == PYTHONMATH else ""
    return f"the first {TRAIN_SCAN} train-split tasks (even generator indices) of {mixtures}{extra}"


def evaluated_texts(env: str, after: tuple[str, ...] = ()) -> frozenset[str]:
    """Question texts an experiment has looked at on the test side: the first EVALUATED_TEST_POSITIONS test tasks
    (PythonMath-v0: of each mixture in PYTHONMATH_EVALUATED_TIERS) and the v1 set."""
    mixtures = PYTHONMATH_EVALUATED_TIERS if env == PYTHONMATH else (None,)
    tasks = [t for tiers in mixtures for t in _make_tasks(env, EVALUATED_TEST_POSITIONS, "test", tiers=tiers)]
    later = [t for name in after for t in read(name)]
    return frozenset(task_text(t) for t in tasks + SPECS[BY_ENV_V1[env]].make() + later)


@functools.cache
def memorisable_families(env: str, items: int | None = None, start: int = START_V2) -> dict[str, str]:
    """Family -> why it is left out of the v2 set: at least MEMORISABLE_SHARE of its questions at the FAMILY_PROBE
    test positions from ``start`` occur in the train scan (a small question space that training covers)."""
    scan = train_scan(env, items)
    hits: collections.Counter[str] = collections.Counter()
    seen: collections.Counter[str] = collections.Counter()
    for t in _make_tasks(env, FAMILY_PROBE, "test", start=start, items=items):
        family = str(t["family"])
        seen[family] += 1
        hits[family] += task_text(t) in scan.get(family, ())
    return {f: (f"{hits[f]} of its {seen[f]} questions at test positions {start}-{start + FAMILY_PROBE - 1} "
                f"occur in the train scan, which holds only {len(scan.get(f, ()))} distinct questions of it: its "
                "question space is small enough that training draws most of it, so a score on it would measure "
                "memory, not a held-out skill")
            for f in sorted(seen) if hits[f] >= MEMORISABLE_SHARE * seen[f]}


@functools.cache
def _generated_v2(env: str, items: int | None = None, start: int = START_V2, after: tuple[str, ...] = ()
                  ) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """A v2-rule set from test position ``start`` (``items``: ToolUse-v0's; ``after``: earlier sets whose
    questions it skips too)."""
    left_out = memorisable_families(env, items, start)
    train, evaluated = train_texts(env, items), evaluated_texts(env, after)
    out: list[dict[str, Any]] = []
    texts: set[str] = set()
    skipped: collections.Counter[str] = collections.Counter()
    pos = start
    while len(out) < SIZE:
        task = _make_tasks(env, 1, "test", start=pos, items=items)[0]
        pos += 1
        text = task_text(task)
        reason = ("left_out_family" if task["family"] in left_out else "train_text" if text in train
                  else "evaluated_or_v1_text" if text in evaluated else "repeated_in_set" if text in texts else None)
        if reason:
            skipped[reason] += 1
            continue
        out.append(task)
        texts.add(text)
    info = {"positions_used": [start, pos - 1], "left_out_families": left_out,
            "skipped": {k: skipped[k] for k in ("left_out_family", "train_text", "evaluated_or_v1_text",
                                                "repeated_in_set")},
            "train_scan": train_scan_rule(env, items),
            "family_rule": (f"a family is left out when at least {MEMORISABLE_SHARE:.0%} of its questions at the "
                            f"first {FAMILY_PROBE} test positions from {start} occur in the train scan")}
    if items:
        info["env_kwargs"] = {"items": items}
    return tuple(out), info


def make_tooluse_v2() -> list[dict[str, Any]]:
    return copy.deepcopy(list(_generated_v2(TOOLUSE)[0]))


#: v3 (issue 30): ToolUse-v0 with items=999 stock items, so that the multi-call stock families (stock_value,
#: stock_total) have question spaces training does not cover; from test position 3,000,000 on.
START_V3 = 3_000_000
TOOLUSE_V3_ITEMS = 999


#: v4 (issue 30): tooluse_v3's rule from test position 4,000,000 on, skipping tooluse_v2's and tooluse_v3's questions
#: too; fixed before any run is evaluated on it, for settings chosen by looking at tooluse_v3 (a lower GRPO lr).
START_V4 = 4_000_000
#: v5 / pythonmath_v3 (issue 30): fresh sets at positions no run has evaluated, written on 2026-12-04 before the
#: runs of settings chosen by looking at tooluse_v4 (a 48-step cold start, lr 6e-5) and at pythonmath_v2.
START_V5 = 5_000_000
START_PYTHONMATH_V3 = 3_000_000
#: pythonmath_v4 (issue 30): written after pythonmath_v3's one run showed a 48-step cold start solving tiers 1-2,
#: for a cold start chosen by looking at it (demonstrations of tier 1 only).
START_PYTHONMATH_V4 = 4_000_000
#: pythonmath_v5 (issue 30): written after pythonmath_v4's one run (tier-1 demonstrations: no tier-2 sample solved),
#: for a cold start chosen by looking at it (tier-1 demonstrations plus one tier-2 family's).
START_PYTHONMATH_V5 = 5_000_000


def make_pythonmath_v2() -> list[dict[str, Any]]:
    return copy.deepcopy(list(_generated_v2(PYTHONMATH)[0]))


def later_set(name: str, env: str, start: int, earlier: tuple[str, ...], items: int | None = None) -> HeldoutSpec:
    """A set drawn by the v2 rule from test position ``start`` (ToolUse-v0: in the world of ``items`` stock items),
    skipping the questions of the ``earlier`` sets too; its tasks and its sidecar's info come from one cached
    :func:`_generated_v2` call."""
    args = (env, items, start, earlier)
    where = f"ToolUse-v0 with items={items}: test-split positions" if items else "test-split positions"
    others = (", " + ", ".join(earlier[:-1]) if len(earlier) > 1 else "") + f" or {earlier[-1]}"
    return HeldoutSpec(name, env, "test",
                       _V2_POSITIONS.replace(str(START_V2), str(start)).replace("test-split positions", where)
                       + others, lambda: copy.deepcopy(list(_generated_v2(*args)[0])),
                       info=lambda: _generated_v2(*args)[1])


@functools.cache
def _search_v2() -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    from agentrl.envs.search.questions import load_bundled

    def norm(t: dict[str, Any]) -> str:
        return task_text(t).strip().lower()

    v1 = make_search()
    skip_ids = {t["id"] for t in search_evaluated()} | {t["id"] for t in v1}
    skip_texts = {norm(t) for t in load_bundled("train")} | {norm(t) for t in v1}
    rows = sorted(load_bundled("dev"), key=lambda t: hashlib.sha1(str(t["id"]).encode()).hexdigest())
    kept, texts = [], set()
    for t in rows:
        if t["id"] not in skip_ids and norm(t) not in skip_texts and norm(t) not in texts:
            kept.append(t)
            texts.add(norm(t))
    by_source: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for t in kept:
        by_source[t["data_source"]].append(t)
    queues = [by_source[k] for k in sorted(by_source)]
    out: list[dict[str, Any]] = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    dev_sources = collections.Counter(t["data_source"] for t in load_bundled("dev"))
    info = {"available": len(kept),
            "size_note": (f"only {len(kept)} dev questions remain unevaluated with no text in train (of "
                          f"{sum(dev_sources.values())}): the set holds all of them, not {SIZE}")
            if len(kept) < SIZE else None,
            "sources_note": ", ".join(f"{src}: {sum(1 for t in out[:SIZE] if t['data_source'] == src)} of "
                                      f"{n} in dev" for src, n in sorted(dev_sources.items()))
            + ("; a source with none left was used up by the 32 evaluated draws and the v1 set, so Macro-EM "
               "on this set is the mean over the sources it holds"
               if len({t["data_source"] for t in out[:SIZE]}) < len(dev_sources) else ""),
            "train_scan": train_scan_rule(SEARCH)}
    return tuple(out[:SIZE]), info


def make_search_v2() -> list[dict[str, Any]]:
    return copy.deepcopy(list(_search_v2()[0]))


_V2_POSITIONS = (f"test-split positions from {START_V2} on (generator index 2k+1), in order, leaving out the "
                 "memorisable families (left_out_families) and skipping every task whose question text occurs in "
                 f"the train scan (train_scan), at the first {EVALUATED_TEST_POSITIONS} test positions (evaluated "
                 "before), in the v1 set or earlier in this set")
_V1_BURNT = {
    "tooluse": ("several main-job configurations were scored on it before the best became the default, and 78 of "
                "its 128 questions occur in the train split (issue 28): use tooluse_v2"),
    "search": ("rl_steps=32 and balance_sources were judged on it after an 8-step run missed (issue 28): use "
               "search_v2"),
    "pythonmath": ("the RL budget was set after the cold start's score on it was seen, and 24 of its questions "
                   "occur in the train split (issue 28): use pythonmath_v2"),
}

SPECS: dict[str, HeldoutSpec] = {
    # v1 (issue 16): burnt, kept for the ledger and for re-deriving the figures measured on them.
    "tooluse": HeldoutSpec("tooluse", TOOLUSE, "test",
                           f"test-split positions from {START} on (generator index 2k+1), skipping questions asked "
                           f"at the {EVALUATED_TEST_POSITIONS} test positions evaluated before", make_tooluse,
                           burnt=_V1_BURNT["tooluse"]),
    "search": HeldoutSpec("search", SEARCH, "dev",
                          "bundled dev questions, skipping the 32 held-out draws of seed 0 evaluated before and "
                          "any question whose text is in the train split; the two sources in turn (SHA-1 order of "
                          "the ids within each), which keeps every remaining question of the rarer one", make_search,
                          primary_metric="macro_em", burnt=_V1_BURNT["search"]),
    "pythonmath": HeldoutSpec("pythonmath", PYTHONMATH, "test",
                              f"test-split positions from {START} on (generator index 2k+1), skipping questions "
                              f"asked at the {EVALUATED_TEST_POSITIONS} test positions evaluated before",
                              make_pythonmath, burnt=_V1_BURNT["pythonmath"]),
    # v2 (issue 28): fresh positions, no question text shared with train, fixed before any tuning.
    "tooluse_v2": HeldoutSpec("tooluse_v2", TOOLUSE, "test", _V2_POSITIONS, make_tooluse_v2,
                              info=lambda: _generated_v2(TOOLUSE)[1]),
    "search_v2": HeldoutSpec("search_v2", SEARCH, "dev",
                             "bundled dev questions, skipping the 32 held-out draws of seed 0 evaluated before, the "
                             "v1 set's questions (ids and texts) and any question whose text is in the train split; "
                             "the sources in turn (SHA-1 order of the ids within each); all that remain",
                             make_search_v2, primary_metric="macro_em", info=lambda: _search_v2()[1]),
    "pythonmath_v2": HeldoutSpec("pythonmath_v2", PYTHONMATH, "test", _V2_POSITIONS, make_pythonmath_v2,
                                 info=lambda: _generated_v2(PYTHONMATH)[1]),
    # v3 (issue 30): the multi-call chains tooluse_v2 had to leave out, in a question space training does not cover.
    "tooluse_v3": later_set("tooluse_v3", TOOLUSE, START_V3, ("tooluse_v2",), TOOLUSE_V3_ITEMS),
    # v4, v5 and pythonmath_v3-v5 (issue 30): the same rules at fresh positions, each for what was chosen
    # by looking at the sets before it.
    "tooluse_v4": later_set("tooluse_v4", TOOLUSE, START_V4, ("tooluse_v2", "tooluse_v3"), TOOLUSE_V3_ITEMS),
    "tooluse_v5": later_set("tooluse_v5", TOOLUSE, START_V5, ("tooluse_v2", "tooluse_v3", "tooluse_v4"),
                            TOOLUSE_V3_ITEMS),
    "pythonmath_v3": later_set("pythonmath_v3", PYTHONMATH, START_PYTHONMATH_V3, ("pythonmath_v2",)),
    "pythonmath_v4": later_set("pythonmath_v4", PYTHONMATH, START_PYTHONMATH_V4, ("pythonmath_v2", "pythonmath_v3")),
    "pythonmath_v5": later_set("pythonmath_v5", PYTHONMATH, START_PYTHONMATH_V5,
                               ("pythonmath_v2", "pythonmath_v3", "pythonmath_v4")),
}
#: Env id -> the set its experiments evaluate on now (ToolUse-v0: v3, the others v2; older sets stay selectable by
#: name).
BY_ENV = {TOOLUSE: "tooluse_v3", SEARCH: "search_v2", PYTHONMATH: "pythonmath_v2"}
#: Env id -> its v1 set (burnt).
BY_ENV_V1 = {TOOLUSE: "tooluse", SEARCH: "search", PYTHONMATH: "pythonmath"}


def dumps(tasks: list[dict[str, Any]]) -> str:
    """The file's text: one JSON object per line, keys sorted (so the bytes are a function of the tasks)."""
    return "".join(json.dumps(t, sort_keys=True, ensure_ascii=False) + "\n" for t in tasks)


def read(name_or_path: str | Path) -> list[dict[str, Any]]:
    """The tasks of a committed set (by name, e.g. ``"tooluse"``) or of any JSONL task file."""
    path = SPECS[name_or_path].path if name_or_path in SPECS else Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such held-out set; write it with python benchmarks/heldout.py write")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def path_for_env(env: str, name: str | None = None) -> Path:
    """The committed held-out file of ``env``: its current set (:data:`BY_ENV`), or the set ``name`` (KeyError for
    an env without one, ValueError for a set of another env)."""
    spec = SPECS[name or BY_ENV[env]]
    if spec.env != env:
        raise ValueError(f"held-out set {spec.name!r} is of {spec.env}, not {env}")
    return spec.path


def set_env_kwargs(path: str | Path) -> dict[str, Any]:
    """The env kwargs a committed set's tasks were drawn with (its sidecar's ``env_kwargs``: ``tooluse_v3``'s
    ``{"items": 999}``), which experiments on it train with; ``{}`` for other files."""
    for spec in SPECS.values():
        if Path(path).resolve() == spec.path.resolve() and spec.meta_path.is_file():
            return dict(json.loads(spec.meta_path.read_text(encoding="utf-8")).get("env_kwargs", {}))
    return {}


def names_for_env(env: str) -> list[str]:
    """The sets of ``env``, the current one first."""
    return [BY_ENV[env]] + [n for n, s in SPECS.items() if s.env == env and n != BY_ENV[env]]


def train_overlap(spec: HeldoutSpec, tasks: list[dict[str, Any]]) -> dict[str, int]:
    """Per family: questions whose text occurs in the train split (Search: all rows; generators: v1 the first
    TRAIN_SCAN tasks of the default mixture, v2 the whole :func:`train_scan`)."""
    if spec.env == SEARCH:
        from agentrl.envs.search.questions import load_bundled

        train = {task_text(t).strip().lower() for t in load_bundled("train")}
        hits = [t for t in tasks if task_text(t).strip().lower() in train]
    else:
        if spec.info is not None:  # v2
            train = set(train_texts(spec.env, spec.info().get("env_kwargs", {}).get("items")))
        else:
            train = {task_text(t) for t in _make_tasks(spec.env, TRAIN_SCAN, "train")}
        hits = [t for t in tasks if task_text(t) in train]
    return dict(sorted(collections.Counter(str(t.get("family", t.get("data_source"))) for t in hits).items()))


def write(spec: HeldoutSpec) -> Path:
    """Write the set and its sidecar; an unchanged set keeps the date it was first written."""
    tasks = spec.make()
    text = dumps(tasks)
    digest = hashlib.sha256(text.encode()).hexdigest()
    old = json.loads(spec.meta_path.read_text()) if spec.meta_path.is_file() else {}
    date = old.get("date") if old.get("sha256") == digest else datetime.date.today().isoformat()
    families = collections.Counter(str(t.get("family", t.get("data_source"))) for t in tasks)
    overlap = train_overlap(spec, tasks)
    meta: dict[str, Any] = {
        "env": spec.env, "split": spec.split, "tasks": len(tasks), "positions": spec.positions,
        "ids": [str(t["id"]) for t in tasks],
        "generator_command": f"python benchmarks/heldout.py write --only {spec.name}",
        "date": date, "status": "fixed before tuning: never train, tune or choose settings on this set",
    }
    if spec.burnt:
        meta["burnt"] = spec.burnt
    if spec.info is not None:
        meta["fixed_before_tuning"] = True
    meta["families"] = dict(sorted(families.items()))
    meta["train_text_overlap"] = overlap
    if spec.info is None:
        meta["train_text_overlap_note"] = ("held-out questions whose text also occurs in the train split (generators: "
                                           f"its first {TRAIN_SCAN} tasks), per family: those are memorisable")
    else:
        if sum(overlap.values()):
            raise RuntimeError(f"{spec.name}: questions in the train scan {overlap}; the generator must skip them")
        meta["train_text_overlap_total"] = 0
        meta["train_text_overlap_note"] = ("per family, questions whose text also occurs in the train scan "
                                           "(train_scan): none, by construction")
        meta.update({k: v for k, v in spec.info().items() if v is not None})
    meta["primary_metric"] = spec.primary_metric
    meta["sha256"] = digest
    FOLDER.mkdir(parents=True, exist_ok=True)
    spec.path.write_text(text, encoding="utf-8")
    spec.meta_path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return spec.path


def check(spec: HeldoutSpec) -> str | None:
    """None when the committed file equals what the generator gives today, else what differs."""
    if not spec.path.is_file():
        return f"{spec.path} is missing"
    if spec.path.read_text(encoding="utf-8") != dumps(spec.make()):
        return (f"{spec.path} differs from its generator today (the env's task generator changed?): rewrite it "
                f"with python benchmarks/heldout.py write --only {spec.name} before tuning on it")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["write", "check"])
    ap.add_argument("--only", nargs="+", choices=sorted(SPECS), help="these sets only (default: all)")
    args = ap.parse_args(argv)
    status = 0
    for name in args.only or SPECS:
        spec = SPECS[name]
        if args.action == "write":
            print(f"written: {write(spec)}")
        else:
            problem = check(spec)
            print(problem or f"{spec.path}: matches its generator")
            status |= problem is not None
    return status


if __name__ == "__main__":
    sys.exit(main())
