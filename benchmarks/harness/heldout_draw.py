"""How the fixed held-out sets are drawn: the generators of every set of :mod:`harness.heldout` (the rules are
in its docstring), the train scans they are checked against and what the sidecars say about them."""

from __future__ import annotations

import collections
import copy
import functools
import hashlib
import json
from typing import Any

from harness.experiments import PYTHONMATH, SEARCH, TOOLUSE, experiment
from harness.layout import SETS

SIZE = 128
#: Test-split positions experiments evaluated before these sets existed: 0-31 (the main job), 32-287 (issue
#: 16).
EVALUATED_TEST_POSITIONS = 32 + 256
#: Where the generator sets start in the test split: far from every position evaluated so far.
START = 100_000
#: Train-split tasks the sidecar's text-overlap count compares with (v2: that the sets skip).
TRAIN_SCAN = 200_000
#: v2 (issue 28): where the generator sets start in the test split, far beyond v1's positions
#: (100,000-100,135) and every other position an experiment is known to have evaluated.
START_V2 = 2_000_000
#: v2: the test positions from START_V2 whose questions decide which families are memorisable.
FAMILY_PROBE = 2_000
#: v2: a family is left out when at least this share of its probe questions occur in the train scan.
MEMORISABLE_SHARE = 0.5
#: v2: PythonMath-v0's train mixtures the scan covers: the env's default (all tiers) and the learning preset's
#: (``tiers=[1, 2]``, what ``benchmarks/learning.py`` trains on).
PYTHONMATH_TRAIN_TIERS: tuple[tuple[int, ...] | None, ...] = (None, (1, 2))
#: v2: PythonMath-v0's mixtures whose first EVALUATED_TEST_POSITIONS test tasks count as evaluated: the
#: default, the default before 2026-12-01 (``tiers=[3]``) and the learning preset's (``tiers=[1, 2]``).
PYTHONMATH_EVALUATED_TIERS: tuple[tuple[int, ...] | None, ...] = (None, (3,), (1, 2))
#: v2: train positions an experiment looked at beyond the scan: docs/envs/python_math.md's tier probe
#: (positions 1,000,000-1,000,031 of ``tiers=[1, 2]``), as (env, start, n, tiers).
TRAIN_POSITIONS_USED = (("AgentRL/PythonMath-v0", 1_000_000, 32, (1, 2)),)


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
    from agentrl.envs.tool_use import env as tool_use

    return _generated(tool_use)


def make_pythonmath() -> list[dict[str, Any]]:
    from agentrl.envs.python_math import tasks

    return _generated(tasks)


def search_evaluated() -> list[dict[str, Any]]:
    """The dev questions earlier Search-v0 runs evaluated (the main job's held-out draws of seed 0)."""
    from agentrl.envs.datasets import seeded_draws
    from agentrl.envs.search.questions import load_bundled

    # test_tasks(env, 32, seed=0) = env.test_tasks(32, seed=0 + TEST_SEED_OFFSET); written out here so
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
    # The sources in turn (SHA-1 order within each) until the rarer runs out (fanoutqa: 14 in dev), so the set
    # holds every question of the rarer source that Macro-EM can have, and any prefix of the file (--quick)
    # mixes both.
    by_source: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for t in rows:
        by_source[t["data_source"]].append(t)
    queues = [by_source[k] for k in sorted(by_source)]
    out = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return out[:SIZE]


# ---------------------------------------------------------------------------------------------- v2 (issue 28)


def make_generated(env: str, n: int, split: str, start: int = 0, tiers: tuple[int, ...] | None = None,
                items: int | None = None) -> list[dict[str, Any]]:
    """``n`` generated tasks of ``env`` (ToolUse-v0 or PythonMath-v0) from ``split`` position ``start``
    (ToolUse-v0: of ``items`` stock items, default the env's)."""
    if env == TOOLUSE:
        from agentrl.envs.tool_use import env as tool_use

        return tool_use.make_tasks(n, split, start=start, items=items or tool_use.ITEMS)
    from agentrl.envs.python_math import tasks

    return tasks.make_tasks(n, split, start=start, tiers=list(tiers) if tiers else None)


@functools.cache
def train_scan(env: str, items: int | None = None) -> dict[str, frozenset[str]]:
    """Family -> the question texts of the v2 train scan: the first TRAIN_SCAN train-split tasks of each train
    mixture (ToolUse-v0: its one; PythonMath-v0: PYTHONMATH_TRAIN_TIERS) and TRAIN_POSITIONS_USED. Training
    draws train positions at random (``sample_task``: any of 2**31), so the scan is a sample of the question
    distribution every training run draws from, larger than any run here draws (hundreds to a few thousand
    tasks)."""
    by_family: dict[str, set[str]] = collections.defaultdict(set)
    mixtures = PYTHONMATH_TRAIN_TIERS if env == PYTHONMATH else (None,)
    tasks = [t for tiers in mixtures for t in make_generated(env, TRAIN_SCAN, "train", tiers=tiers, items=items)]
    tasks += [t for e, start, n, tiers in TRAIN_POSITIONS_USED if e == env
              for t in make_generated(env, n, "train", start=start, tiers=tiers)]
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
    """Question texts an experiment has looked at on the test side: the first EVALUATED_TEST_POSITIONS test
    tasks (PythonMath-v0: of each mixture in PYTHONMATH_EVALUATED_TIERS) and the v1 set."""
    mixtures = PYTHONMATH_EVALUATED_TIERS if env == PYTHONMATH else (None,)
    tasks = [t for tiers in mixtures for t in make_generated(env, EVALUATED_TEST_POSITIONS, "test", tiers=tiers)]
    later = [t for name in after for t in read_set(name)]
    return frozenset(task_text(t) for t in tasks + FIRST_SETS[experiment(env).first_set]() + later)


@functools.cache
def memorisable_families(env: str, items: int | None = None, start: int = START_V2) -> dict[str, str]:
    """Family -> why it is left out of the v2 set: at least MEMORISABLE_SHARE of its questions at the
    FAMILY_PROBE test positions from ``start`` occur in the train scan (a small question space that training
    covers)."""
    scan = train_scan(env, items)
    hits: collections.Counter[str] = collections.Counter()
    seen: collections.Counter[str] = collections.Counter()
    for t in make_generated(env, FAMILY_PROBE, "test", start=start, items=items):
        family = str(t["family"])
        seen[family] += 1
        hits[family] += task_text(t) in scan.get(family, ())
    return {f: (f"{hits[f]} of its {seen[f]} questions at test positions {start}-{start + FAMILY_PROBE - 1} "
                f"occur in the train scan, which holds only {len(scan.get(f, ()))} distinct questions of it: its "
                "question space is small enough that training draws most of it, so a score on it would measure "
                "memory, not a held-out skill")
            for f in sorted(seen) if hits[f] >= MEMORISABLE_SHARE * seen[f]}


@functools.cache
def generated_v2(env: str, items: int | None = None, start: int = START_V2, after: tuple[str, ...] = ()
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
        task = make_generated(env, 1, "test", start=pos, items=items)[0]
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
    return copy.deepcopy(list(generated_v2(TOOLUSE)[0]))


#: v3 (issue 30): ToolUse-v0 with items=999 stock items, so that the multi-call stock families (stock_value,
#: stock_total) have question spaces training does not cover; from test position 3,000,000 on.
START_V3 = 3_000_000
TOOLUSE_V3_ITEMS = 999


#: v4 (issue 30): tooluse_v3's rule from test position 4,000,000 on, skipping tooluse_v2's and tooluse_v3's
#: questions too; fixed before any run is evaluated on it, for settings chosen by looking at tooluse_v3 (a
#: lower GRPO lr).
START_V4 = 4_000_000
#: v5 / pythonmath_v3 (issue 30): fresh sets at positions no run has evaluated, written on 2026-12-04 before
#: the runs of settings chosen by looking at tooluse_v4 (a 48-step cold start, lr 6e-5) and at pythonmath_v2.
START_V5 = 5_000_000
START_PYTHONMATH_V3 = 3_000_000
#: pythonmath_v4 (issue 30): written after pythonmath_v3's one run showed a 48-step cold start solving tiers
#: 1-2, for a cold start chosen by looking at it (demonstrations of tier 1 only).
START_PYTHONMATH_V4 = 4_000_000
#: pythonmath_v5 (issue 30): written after pythonmath_v4's one run (tier-1 demonstrations: no tier-2 sample
#: solved), for a cold start chosen by looking at it (tier-1 demonstrations plus one tier-2 family's).
START_PYTHONMATH_V5 = 5_000_000


def make_pythonmath_v2() -> list[dict[str, Any]]:
    return copy.deepcopy(list(generated_v2(PYTHONMATH)[0]))


@functools.cache
def search_v2_draw() -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
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
    return copy.deepcopy(list(search_v2_draw()[0]))


V2_POSITIONS = (f"test-split positions from {START_V2} on (generator index 2k+1), in order, leaving out the "
                 "memorisable families (left_out_families) and skipping every task whose question text occurs in "
                 f"the train scan (train_scan), at the first {EVALUATED_TEST_POSITIONS} test positions (evaluated "
                 "before), in the v1 set or earlier in this set")


#: The first (v1) sets' generators, by set name (each env's learning record's ``first_set``).
FIRST_SETS = {"tooluse": make_tooluse, "search": make_search, "pythonmath": make_pythonmath}


def read_set(name: str) -> list[dict[str, Any]]:
    """The tasks of the committed set ``name`` (``benchmarks/heldout/<name>.jsonl``)."""
    path = SETS / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------- axes (issue 45)

#: The generalisation-axis sets (issue 45): ToolUse-v0 tasks of each axis generator
#: (``agentrl.envs.tool_use.axes``), in the world of TOOLUSE_V3_ITEMS stock items (what the learning preset trains
#: with), from the axis generator's test position 0 on: no run has drawn from these generators before.
START_AXES = 0
#: The forgetting set: the families the axes experiment's continued training leaves out (``days``, ``convert``),
#: from the default generator's test position 6,000,000 on, beyond every earlier set.
START_FORGETTING = 6_000_000
FORGETTING_FAMILIES = ("days", "convert")


@functools.cache
def generated_axis(axis: str | None) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """SIZE test-split tasks of ``axis`` (None: the forgetting set), skipping a task whose question text occurs
    in the train scan of the default mixture (items=TOOLUSE_V3_ITEMS; not for the forgetting set, whose point is
    skills training has taught before), in an earlier ToolUse-v0 set or earlier in this set."""
    from agentrl.envs.tool_use import env as tool_use

    earlier = ("tooluse_v2", "tooluse_v3", "tooluse_v4", "tooluse_v5")
    train = train_texts(TOOLUSE, TOOLUSE_V3_ITEMS) if axis is not None else frozenset()
    evaluated = evaluated_texts(TOOLUSE, earlier)
    families = None if axis is not None else list(FORGETTING_FAMILIES)
    out: list[dict[str, Any]] = []
    texts: set[str] = set()
    skipped: collections.Counter[str] = collections.Counter()
    pos = START_AXES if axis is not None else START_FORGETTING
    while len(out) < SIZE:
        task = tool_use.make_tasks(1, "test", families, start=pos, items=TOOLUSE_V3_ITEMS, axis=axis)[0]
        pos += 1
        text = task_text(task)
        reason = ("train_text" if text in train else "evaluated_or_v1_text" if text in evaluated
                  else "repeated_in_set" if text in texts else None)
        if reason:
            skipped[reason] += 1
            continue
        out.append(task)
        texts.add(text)
    info: dict[str, Any] = {
        "axis": axis or "forgetting", "positions_used": [START_AXES if axis else START_FORGETTING, pos - 1],
        "skipped": {k: skipped[k] for k in ("train_text", "evaluated_or_v1_text", "repeated_in_set")},
        "env_kwargs": {"items": TOOLUSE_V3_ITEMS}}
    if axis is not None:
        info["train_scan"] = train_scan_rule(TOOLUSE, TOOLUSE_V3_ITEMS)
    return tuple(out), info
