"""Fixed held-out task sets for the learning experiments, written once, before any tuning, and committed.

Issue 16: the main job's first 32 test-split tasks were also used to choose the cold start, so figures measured
on them are not held out. The sets here are drawn from positions no experiment had evaluated and are committed as
``benchmarks/heldout/<name>.jsonl`` (one task per line: the env's own task dicts, read by ``agentrl eval
--tasks-file`` and ``MainJobConfig.eval_tasks_file``) with a sidecar ``<name>.json`` saying how the set was made
(env, split, positions, generator command, date, "fixed before tuning") and what it overlaps.

* ``tooluse`` — ToolUse-v0: 128 test-split tasks (odd generator indices) from test position 100,000 on. Earlier
  experiments evaluated test positions 0-31 (the main job) and 32-287 (issue 16's two sets of 128); a task whose
  question text equals one of those 288 is skipped, so no question an experiment has looked at is in the set.
* ``search`` — Search-v0: 128 questions of the bundled dev split, skipping the questions earlier runs evaluated
  (the held-out draws of seed 0: ``heldout_tasks(env, 32, seed=0)``) and any whose text occurs in the train
  split: the two sources (fanoutqa, wiki_description) in turn, each in SHA-1 order of its ids, so the set holds
  every remaining question of the rarer source (fanoutqa) and any prefix mixes both.
* ``pythonmath`` — PythonMath-v0: as ToolUse-v0, with the problem generator of ``envs/python_math/tasks.py``. Its
  families change when the generator does; rewrite the file after such a change (``write --only pythonmath``)
  *before* tuning on it, and the check below fails until you do.

Split membership is the env's own: generator index parity (ToolUse, PythonMath) and the id hash (Search). For
ToolUse two families have small question spaces (``stock`` ~100 distinct questions, ``power`` ~85), so their
held-out questions also occur in the train split; the sidecar counts, per family, the held-out questions whose
text occurs among the first 200,000 train-split tasks. Report those families as memorisable, not held out.

    python benchmarks/heldout.py write                  # (re)write every set (keeps the date of an unchanged set)
    python benchmarks/heldout.py write --only pythonmath
    python benchmarks/heldout.py check                  # exit 1 when a committed set differs from its generator
"""

from __future__ import annotations

import argparse
import collections
import datetime
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
#: Train-split tasks the sidecar's text-overlap count compares with.
TRAIN_SCAN = 200_000


@dataclass(frozen=True)
class HeldoutSpec:
    """One fixed set: its env, split, how its positions were chosen, and the function that makes it."""

    name: str
    env: str
    split: str
    positions: str
    make: Callable[[], list[dict[str, Any]]]

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

    # heldout_tasks(env, 32, seed=0) = env.heldout_tasks(32, seed=0 + HELDOUT_SEED_OFFSET); written out here so
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


SPECS: dict[str, HeldoutSpec] = {
    "tooluse": HeldoutSpec("tooluse", "AgentRL/ToolUse-v0", "test",
                           f"test-split positions from {START} on (generator index 2k+1), skipping questions asked "
                           f"at the {EVALUATED_TEST_POSITIONS} test positions evaluated before", make_tooluse),
    "search": HeldoutSpec("search", "AgentRL/Search-v0", "dev",
                          "bundled dev questions, skipping the 32 held-out draws of seed 0 evaluated before and "
                          "any question whose text is in the train split; the two sources in turn (SHA-1 order of "
                          "the ids within each), which keeps every remaining question of the rarer one", make_search),
    "pythonmath": HeldoutSpec("pythonmath", "AgentRL/PythonMath-v0", "test",
                              f"test-split positions from {START} on (generator index 2k+1), skipping questions "
                              f"asked at the {EVALUATED_TEST_POSITIONS} test positions evaluated before",
                              make_pythonmath),
}
#: Env id -> set name.
BY_ENV = {spec.env: name for name, spec in SPECS.items()}


def dumps(tasks: list[dict[str, Any]]) -> str:
    """The file's text: one JSON object per line, keys sorted (so the bytes are a function of the tasks)."""
    return "".join(json.dumps(t, sort_keys=True, ensure_ascii=False) + "\n" for t in tasks)


def read(name_or_path: str | Path) -> list[dict[str, Any]]:
    """The tasks of a committed set (by name, e.g. ``"tooluse"``) or of any JSONL task file."""
    path = SPECS[name_or_path].path if name_or_path in SPECS else Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such held-out set; write it with python benchmarks/heldout.py write")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def path_for_env(env: str) -> Path:
    """The committed held-out file of ``env`` (KeyError for an env without one)."""
    return SPECS[BY_ENV[env]].path


def train_overlap(spec: HeldoutSpec, tasks: list[dict[str, Any]]) -> dict[str, int]:
    """Per family: held-out questions whose text occurs in the train split (first TRAIN_SCAN tasks / all rows)."""
    if spec.name == "search":
        from agentrl.envs.search.questions import load_bundled

        train = {task_text(t).strip().lower() for t in load_bundled("train")}
        hits = [t for t in tasks if task_text(t).strip().lower() in train]
    else:
        from agentrl.envs import tool_use
        from agentrl.envs.python_math import tasks as python_math

        module = tool_use if spec.name == "tooluse" else python_math
        train = {task_text(t) for t in module.make_tasks(TRAIN_SCAN, "train")}
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
    meta = {
        "env": spec.env, "split": spec.split, "tasks": len(tasks), "positions": spec.positions,
        "ids": [str(t["id"]) for t in tasks],
        "generator_command": f"python benchmarks/heldout.py write --only {spec.name}",
        "date": date, "status": "fixed before tuning: never train, tune or choose settings on this set",
        "families": dict(sorted(families.items())),
        "train_text_overlap": train_overlap(spec, tasks),
        "train_text_overlap_note": ("held-out questions whose text also occurs in the train split (generators: "
                                    f"its first {TRAIN_SCAN} tasks), per family: those are memorisable"),
        "sha256": digest,
    }
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
