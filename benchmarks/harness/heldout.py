"""Fixed held-out task sets for the learning experiments, written once, before any tuning, and committed.

Each set is ``benchmarks/heldout/<name>.jsonl`` (one task per line: the env's own task dicts, read by
``agentrl eval --tasks-file`` and ``MainJobConfig.eval_tasks_file``) with a sidecar ``<name>.json`` saying how
the set was made (env, split, positions, generator command, date, "fixed before tuning"), what it overlaps,
its declared ``primary_metric`` (what a goal on the set is stated in) and its content hash ``sha256``, by
which the ledger ``benchmarks/heldout/ledger.jsonl`` (``agentrl.algos.evaluation.ledger``) recognises it:
every evaluation on a set the harness makes appends a row there. Each experiment names the set it evaluates on
(its record's ``heldout``, :mod:`harness.experiments`); how the sets are drawn is :mod:`harness.heldout_draw`.

**v2 (issue 28)** — ``tooluse_v2``, ``search_v2``, ``pythonmath_v2``: fresh positions, no question text shared
with the train split, fixed before any tuning (sidecar ``"fixed_before_tuning": true``,
``train_text_overlap_total: 0``, how the set was drawn in ``left_out_families``, ``skipped``, ``train_scan``).

* ``tooluse_v2``, ``pythonmath_v2`` — 128 test-split tasks (odd generator indices) from test position 2,000,000 on,
  in order: far beyond v1 (100,000-100,135) and every position an experiment is known to have evaluated. The
  train scan is the first 200,000 train-split tasks (PythonMath-v0: of the default mixture and of ``tiers=[1,
  2]``, the learning preset's, plus the tier probe's train positions 1,000,000-1,000,031). Training draws
  train positions at random, so the scan is a sample of what every training run draws from, far larger than
  any run here draws. A family is left out when at least half of its questions at the first 2,000 positions
  from 2,000,000 occur in the scan: its question space is so small that training covers it (ToolUse-v0:
  ``stock`` 99 distinct questions, ``power`` 85, ``convert``, ``stock_value``, ``stock_total``; PythonMath-v0:
  ``digit_count``, ``no_consecutive_subsets``, ``lattice_paths``, ``sum_powers``, ``digit_sum``,
  ``odd_squares``), the sidecar says why for each. Of the other families every task is skipped whose question
  text occurs in the scan, at the first 288 test positions (evaluated before; PythonMath-v0: of the default
  mixture, ``tiers=[3]`` and ``tiers=[1, 2]``), in the v1 set or earlier in the set.
* ``search_v2`` — every bundled dev question not evaluated before (the 32 held-out draws of seed 0 and the v1
  set, by id and text) whose text is not in the train split: 106, fewer than 128, all ``wiki_description``
  (the 14 ``fanoutqa`` dev questions were all used), so Macro-EM on it is wiki_description's EM.

**v3 (issue 30)** — ``tooluse_v3``: what ``tooluse_v2`` could not hold. Its cold start scored 98% on
``tooluse_v2`` (only ``add``, ``multiply``, ``add_multiply`` and ``days`` were left in it), so it cannot show
what RL adds, and the multi-call stock families were left out because 99 stock items make their question
spaces small. ToolUse-v0 with ``items=999`` (``env_kwargs``; the env's default stays 99) widens them: 128
test-split tasks from position 3,000,000 on, drawn by the v2 rule with a train scan of the same ``items=999``
mixture (which also leaves out ``stock``, ``power`` and ``convert``), skipping ``tooluse_v2``'s questions too.
Experiments on it train with ``items=999`` (``benchmarks/learning.py``'s ToolUse-v0 preset).

**v4 (issue 30)** — ``tooluse_v4``: ``tooluse_v3``'s rule (``items=999``) from test position 4,000,000 on,
skipping ``tooluse_v2``'s and ``tooluse_v3``'s questions too. A setting chosen by looking at ``tooluse_v3``
(the GRPO learning rate of the algorithms comparison's diagnostic) is evaluated here, on questions no run had
seen when it was chosen; written before any evaluation on it.

**v5 and pythonmath_v3 (issue 30)** — ``tooluse_v5`` (``tooluse_v4``'s rule from test position 5,000,000 on,
skipping the questions of every earlier ToolUse set) and ``pythonmath_v3`` (``pythonmath_v2``'s rule from test
position 3,000,000 on, skipping ``pythonmath_v2``'s questions): for settings chosen by looking at
``tooluse_v4`` (a 48-step cold start, GRPO at lr 6e-5) and at ``pythonmath_v2``; written before any evaluation
on them. ``pythonmath_v4`` (from 4,000,000, skipping ``pythonmath_v2``'s and ``pythonmath_v3``'s questions):
for a cold start chosen after ``pythonmath_v3``'s run (demonstrations of tier 1 only).

**Axes (issue 45)** — ``tooluse_axis_depth``, ``tooluse_axis_recombination``, ``tooluse_axis_rules``,
``tooluse_axis_failures``: what every earlier set could not show, since they are all in-distribution (the
training's families at the training's chain lengths). Each holds 128 test-split tasks of one generalisation axis of
ToolUse-v0 (``agentrl.envs.tool_use.axes``: 3-4-call chains; known tools in unseen orders; tools renamed or a stock
counted in boxes, the rule stated in the question; a first call that fails and needs a retry), ``items=999``,
skipping any question of the default mixture's train scan or of ``tooluse_v2``-``v5``. ``tooluse_axis_forgetting``
holds ``days`` and ``convert`` tasks from test position 6,000,000 on: the families the axes experiment's continued
training leaves out, so a drop there is forgetting (its questions may occur in the cold start's train split, which
is the point). Written and committed before any run evaluates on them.

**v1 (issue 16), burnt** — ``tooluse``, ``search``, ``pythonmath`` (sidecar ``"burnt": "<why>"``): settings
were chosen by looking at them (main-job configurations on ``tooluse``, Search's ``rl_steps=32`` and
``balance_sources`` on ``search``, PythonMath's RL budget after its cold start's score on ``pythonmath``), and
78 of ``tooluse``'s 128 questions (24 of ``pythonmath``'s) occur in the train split. Kept, unchanged, because
the ledger and the old pages refer to them: select one by name (``benchmarks/learning.py --heldout tooluse``)
only to re-derive a figure measured on it. How they were drawn:

* ``tooluse`` — ToolUse-v0: 128 test-split tasks from test position 100,000 on, skipping a task whose question
  text equals one at the test positions evaluated before (0-31, the main job; 32-287, issue 16's two sets).
* ``search`` — Search-v0: 128 questions of the bundled dev split, skipping the questions earlier runs evaluated
  (``test_tasks(env, 32, seed=0)``) and any whose text occurs in the train split: the two sources (fanoutqa,
  wiki_description) in turn, each in SHA-1 order of its ids.
* ``pythonmath`` — PythonMath-v0: as ``tooluse``, with the problem generator of ``envs/python_math/tasks.py``.

Split membership is the env's own: generator index parity (ToolUse, PythonMath) and the id hash (Search). When
an env's task generator changes, ``check`` fails: rewrite the set (``write --only NAME``) *before* tuning on
it.

    python benchmarks/heldout.py write                  # (re)write every set (keeps the date of an unchanged set)
    python benchmarks/heldout.py write --only tooluse_v2 tooluse_v3 tooluse_v4 tooluse_v5 search_v2   # seconds
    python benchmarks/heldout.py write --only pythonmath_v2 pythonmath_v3 pythonmath_v4   # ~20 s: their train scan
    python benchmarks/heldout.py write --only tooluse_axis_depth tooluse_axis_recombination tooluse_axis_rules \
        tooluse_axis_failures tooluse_axis_forgetting   # ~30 s: their train scan
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.ledger import dumps
from harness.experiments import PYTHONMATH, SEARCH, TOOLUSE, experiment
from harness.heldout_draw import (
    EVALUATED_TEST_POSITIONS,
    START,
    START_FORGETTING,
    START_PYTHONMATH_V3,
    START_PYTHONMATH_V4,
    START_PYTHONMATH_V5,
    START_V2,
    START_V3,
    START_V4,
    START_V5,
    TOOLUSE_V3_ITEMS,
    TRAIN_SCAN,
    V2_POSITIONS,
    generated_axis,
    generated_v2,
    make_generated,
    make_pythonmath,
    make_pythonmath_v2,
    make_search,
    make_search_v2,
    make_tooluse,
    make_tooluse_v2,
    search_v2_draw,
    task_text,
    train_texts,
)
from harness.layout import SETS


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
    """Why the set no longer gives held-out figures (settings were chosen by looking at it); kept for
    re-deriving old figures only."""
    info: Callable[[], dict[str, Any]] | None = None
    """Extra sidecar fields: how the set was drawn (v2: families left out and why, tasks skipped, the
    scan)."""
    train_overlap_allowed: str | None = None
    """Why questions of the train split may occur in the set (the forgetting set: skills training taught
    before); otherwise a set with ``info`` must share no question with the train scan."""

    @property
    def path(self) -> Path:
        return SETS / f"{self.name}.jsonl"

    @property
    def meta_path(self) -> Path:
        return SETS / f"{self.name}.json"



def later_set(name: str, env: str, start: int, earlier: tuple[str, ...], items: int | None = None) -> HeldoutSpec:
    """A set drawn by the v2 rule from test position ``start`` (ToolUse-v0: in the world of ``items`` stock
    items), skipping the questions of the ``earlier`` sets too; its tasks and its sidecar's info come from one
    cached :func:`generated_v2` call."""
    args = (env, items, start, earlier)
    where = f"ToolUse-v0 with items={items}: test-split positions" if items else "test-split positions"
    others = (", " + ", ".join(earlier[:-1]) if len(earlier) > 1 else "") + f" or {earlier[-1]}"
    return HeldoutSpec(name, env, "test",
                       V2_POSITIONS.replace(str(START_V2), str(start)).replace("test-split positions", where)
                       + others, lambda: copy.deepcopy(list(generated_v2(*args)[0])),
                       info=lambda: generated_v2(*args)[1])



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
    "tooluse_v2": HeldoutSpec("tooluse_v2", TOOLUSE, "test", V2_POSITIONS, make_tooluse_v2,
                              info=lambda: generated_v2(TOOLUSE)[1]),
    "search_v2": HeldoutSpec("search_v2", SEARCH, "dev",
                             "bundled dev questions, skipping the 32 held-out draws of seed 0 evaluated before, the "
                             "v1 set's questions (ids and texts) and any question whose text is in the train split; "
                             "the sources in turn (SHA-1 order of the ids within each); all that remain",
                             make_search_v2, primary_metric="macro_em", info=lambda: search_v2_draw()[1]),
    "pythonmath_v2": HeldoutSpec("pythonmath_v2", PYTHONMATH, "test", V2_POSITIONS, make_pythonmath_v2,
                                 info=lambda: generated_v2(PYTHONMATH)[1]),
    # v3 (issue 30): the multi-call chains tooluse_v2 had to leave out, in a question space training does not
    # cover.
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
#: What was chosen by looking at a set (its status on the pages: burnt, used to choose this, or clean).
SET_USES = {
    "tooluse_v2": "the world of tooluse_v3 (items=999), after its cold start scored 98% here",
    "tooluse_v3": "GRPO's lr 6e-5 (the algorithms comparison rerun, reported on this set too)",
    "tooluse_v4": "the 48-step cold start and lr 6e-5 of sft48, chains and multicall",
    "pythonmath_v2": "the 48-step cold start of pythonmath sft48",
    "pythonmath_v3": "tier-1 demonstrations (tier1demos)",
    "pythonmath_v4": "tier-1 demonstrations plus count_multiples (tier1count)",
}


def set_status(name: str) -> str:
    """``burnt``, ``used to choose <what>`` or ``clean`` (nothing chosen by looking at it)."""
    spec = SPECS[name]
    return "burnt" if spec.burnt else f"used to choose {SET_USES[name]}" if name in SET_USES else "clean"


# The generalisation axes (issue 45): each written and committed before any run evaluates on it.
_AXIS_POSITIONS = ("ToolUse-v0 with items=999, axis={axis}: test-split positions of the axis generator from 0 on "
                   "(generator index 2k+1), in order, skipping every task whose question text occurs in the train "
                   "scan of the default mixture (train_scan), in tooluse_v2-v5 or earlier in this set")
AXIS_SETS = {"tooluse_axis_depth": "depth", "tooluse_axis_recombination": "recombination",
             "tooluse_axis_rules": "rule_variants", "tooluse_axis_failures": "tool_failures"}
for _name, _axis in AXIS_SETS.items():
    SPECS[_name] = HeldoutSpec(_name, TOOLUSE, "test", _AXIS_POSITIONS.format(axis=_axis),
                               functools.partial(lambda a: copy.deepcopy(list(generated_axis(a)[0])), _axis),
                               info=functools.partial(lambda a: generated_axis(a)[1], _axis))
SPECS["tooluse_axis_forgetting"] = HeldoutSpec(
    "tooluse_axis_forgetting", TOOLUSE, "test",
    "ToolUse-v0, families days and convert (what the axes experiment's continued training leaves out): test-split "
    f"positions from {START_FORGETTING} on (generator index 2k+1), in order, skipping a question of tooluse_v2-v5 "
    "or one earlier in this set", lambda: copy.deepcopy(list(generated_axis(None)[0])),
    info=lambda: generated_axis(None)[1],
    train_overlap_allowed=("the forgetting set measures whether skills the cold start was taught survive the "
                           "continued training, so its questions may occur in the cold start's train split (convert "
                           "has a small question space); the continued training never draws these families"))
AXIS_SETS["tooluse_axis_forgetting"] = "forgetting"


def read(name_or_path: str | Path) -> list[dict[str, Any]]:
    """The tasks of a committed set (by name, e.g. ``"tooluse"``) or of any JSONL task file."""
    path = SPECS[name_or_path].path if name_or_path in SPECS else Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such held-out set; write it with python benchmarks/heldout.py write")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def path_for_env(env: str, name: str | None = None) -> Path:
    """The committed held-out file of ``env``: its experiment's set (its record's ``heldout``), or the set
    ``name`` (KeyError for an env without one, ValueError for a set of another env)."""
    spec = SPECS[name or experiment(env).heldout]
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
    current = experiment(env).heldout
    return [current] + [n for n, s in SPECS.items() if s.env == env and n != current]


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
            train = {task_text(t) for t in make_generated(spec.env, TRAIN_SCAN, "train")}
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
        if sum(overlap.values()) and not spec.train_overlap_allowed:
            raise RuntimeError(f"{spec.name}: questions in the train scan {overlap}; the generator must skip them")
        meta["train_text_overlap_total"] = sum(overlap.values())
        meta["train_text_overlap_note"] = spec.train_overlap_allowed or (
            "per family, questions whose text also occurs in the train scan (train_scan): none, by construction")
        meta.update({k: v for k, v in spec.info().items() if v is not None})
    meta["primary_metric"] = spec.primary_metric
    meta["sha256"] = digest
    SETS.mkdir(parents=True, exist_ok=True)
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

