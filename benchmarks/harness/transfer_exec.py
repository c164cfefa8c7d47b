"""The transfer experiment's pieces (``python benchmarks/experiment.py run transfer``, or ``benchmarks/transfer.py``):
one declared arm (:mod:`harness.transfer`) on each declared set, a piece per (arm, set) evaluation run by the one
piece runner (:func:`harness.axes_run.schedule`: a measured set is skipped, ``--budget-minutes`` stops between
sets), through the evaluation path ``agentrl eval`` uses (:func:`agentrl.algos.evaluation.evaluate.evaluate` with
the model, its adapter and an :class:`~agentrl.algos.policy.HFPolicy`). The axes experiments' public-benchmark
pieces (:mod:`harness.axes_exec`) use its task selection, decoding, records and ledger row.

Per (arm, set) it writes, under ``--data`` (default ``docs/results/data/transfer``):

* ``<arm>-s0/<set>.jsonl``: one record per task: ``id``, ``score`` (1.0 when the benchmark's own checker counts it
  correct), ``reward``, ``called_tool`` (the episode made a tool call), ``format_ok`` (the final reply parsed),
  ``termination``, ``turns`` and ``reply`` (the first reply, clipped; ``last_reply`` too when there were several);
* ``<arm>-s0/<set>.meta.json``: commit, adapter path and hash, where the adapter was trained (``--trained-at``), the
  decoding and budgets, the packages' versions, the command, duration and the ledger row's id.

A set already written is skipped; ``--redo`` measures it again into ``<set>.redo<k>.jsonl`` (the next free
``k``) and never over an earlier file. Each evaluation appends a row to the ledger (``benchmarks/heldout/
ledger.jsonl``; set ``transfer/<set>``) so that every configuration judged on a benchmark is on record.
``--limit N`` evaluates the first N tasks of each set: a smoke test, refused in the committed data folder and
recorded in no ledger unless ``--ledger`` names one. The episodes go to ``--out`` (default ``runs/transfer``).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation import ledger as ledger_module
from harness import export
from harness.axes_run import Piece, schedule
from harness.data import load_json
from harness.layout import LEDGER, ROOT, shown
from harness.transfer import (
    DECODING,
    PACKAGES,
    SETS,
    TRANSFER,
    TRANSFER_DATA,
    TransferSet,
    arm,
    arm_folder,
    transfer_set,
)

logger = logging.getLogger("transfer")

#: A transfer piece's kind: one greedy evaluation on a public benchmark set, as an axes experiment's (its time
#: before any has run: ``harness.axes_run.PRIOR_SECONDS``).
KIND = "eval:transfer"
#: Characters of a reply a record keeps.
REPLY_CHARS = 2000


def natural_key(task_id: Any) -> list[Any]:
    """Sort key of an id in the benchmark's own id order: ``multiple_10`` after ``multiple_9``,
    ``HumanEval/100`` after ``HumanEval/99``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(task_id))]


def select_tasks(s: TransferSet) -> list[dict[str, Any]]:
    """The declared tasks of ``s``: every task its env offers for it, in the benchmark's id order, the first
    ``s.first`` (all when None). ValueError when the env offers fewer than the declared ``size`` (another version
    of the benchmark's data)."""
    from agentrl.envs import make_text_env

    env = make_text_env(s.env, dict(s.env_kwargs))
    try:
        tasks = env.test_tasks(s.size, seed=0)
    finally:
        env.close()
    if len(tasks) != s.size:
        raise ValueError(f"{s.name}: {s.env} {dict(s.env_kwargs)} offers {len(tasks)} tasks, the declaration "
                         f"(benchmarks/harness/transfer.py) says {s.size}; installed packages must be {dict(PACKAGES)}")
    return sorted(tasks, key=lambda t: natural_key(t.get("id")))[: s.tasks]


def unsupported(s: TransferSet) -> str | None:
    """Why the env cannot make ``s`` yet (its one-line error), or None when it can."""
    from agentrl.envs import make_text_env

    try:
        make_text_env(s.env, dict(s.env_kwargs)).close()
    except (ValueError, ImportError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def collector_config(s: TransferSet):
    """The declared decoding and budgets of ``s`` as the collector's settings."""
    from agentrl.algos.rollout.collector import CollectorConfig

    return CollectorConfig(max_turns=s.max_turns, max_new_tokens=s.max_new_tokens, max_total_tokens=s.max_total_tokens,
                           temperature=DECODING["temperature"], seed=DECODING["seed"],
                           call_format=DECODING["call_format"])


def clip(text: str, chars: int = REPLY_CHARS) -> str:
    return text if len(text) <= chars else text[:chars] + f" [... {len(text) - chars} more characters]"


def records(trajectories: Sequence[Any]) -> list[dict[str, Any]]:
    """One record per episode (one per task: N = 1): what the page needs to say why a score is what it is."""
    out = []
    for t in trajectories:
        replies = [turn.completion for turn in t.turns]
        called = (float(t.metrics.get("tool_calls", 0) or 0) > 0
                  or any((turn.parsed or {}).get("kind") == "tool_call" for turn in t.turns))
        row = {"id": str((t.task or {}).get("id", t.group_id)), "score": float(bool(t.metrics.get("correct", 0))),
               "reward": float(t.reward), "called_tool": bool(called),
               "format_ok": bool(t.metrics.get("format_ok", 0)), "termination": t.termination,
               "turns": len(t.turns), "reply": clip(replies[0]) if replies else ""}
        if len(replies) > 1:
            row["last_reply"] = clip(replies[-1])
        out.append(row)
    return out


def scores(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """A measurement's shares: the score, the episodes that called a tool, the final replies that parsed."""
    return {key: sum(float(r[key]) for r in rows) / len(rows) for key in ("score", "called_tool", "format_ok")}


def package_versions() -> dict[str, str | None]:
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {name: version(name) for name in (*PACKAGES, "agentrl-gym", "torch", "transformers")}


def adapter_run(adapter: str | None) -> dict[str, Any] | None:
    """What the training run beside an adapter recorded (``<run>/config.json`` next to ``<run>/adapter``): its
    algorithm, steps, learning rate, seed, env and the file's hash; None without one."""
    if not adapter:
        return None
    path = Path(adapter).resolve().parent / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
        config = json.loads(text)
    except (OSError, ValueError):
        return None
    keys = ("algo", "steps", "lr", "seed", "env", "env_kwargs", "adapter")
    return {"config": str(path), "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
            **{k: config.get(k) for k in keys if k in config}}


def record_paths(folder: Path, set_name: str, redo: bool) -> tuple[Path, Path] | None:
    """``(records, meta)`` paths for a new evaluation of ``set_name`` in ``folder``: the plain ones when the set
    was not measured yet; else, with ``redo``, the next free ``<set>.redo<k>``; else None (skip it). A measurement
    is its records file (written last); a meta alone is a killed evaluation's, replaced."""
    first = folder / f"{set_name}.jsonl"
    if not first.exists():
        return first, folder / f"{set_name}.meta.json"
    if not redo:
        return None
    k = 1
    while (folder / f"{set_name}.redo{k}.jsonl").exists():
        k += 1
    return folder / f"{set_name}.redo{k}.jsonl", folder / f"{set_name}.redo{k}.meta.json"


@dataclasses.dataclass
class Options:
    """What ``benchmarks/transfer.py`` was asked for."""

    arm: str
    adapter: str | None = None
    sets: tuple[str, ...] = ()
    """Declared set names (empty: every set)."""
    model: str | None = None
    """Model alias or folder (default: the package's default model, SmolLM2-135M)."""
    data: Path = TRANSFER_DATA
    out: Path = ROOT / "runs" / "transfer"
    ledger: Path | None = None
    limit: int | None = None
    redo: bool = False
    trained_at: str | None = None
    """The commit the adapter was trained at (what the lead's main-job run started from)."""
    device: str = "auto"
    dtype: str = "auto"
    progress: bool = True
    command: str = ""
    budget_minutes: float | None = None
    """Stop before a set whose evaluation would not finish within this (None: no budget)."""


def check_options(o: Options) -> tuple[str, list[TransferSet]]:
    """The arm and sets ``o`` names; ValueError in one line for what cannot run."""
    a = arm(o.arm)
    sets = [transfer_set(n) for n in o.sets] if o.sets else list(SETS)
    if a.get("adapter") is None and o.adapter:
        raise ValueError(f"--arm {o.arm} is the base model: it takes no --adapter")
    if a.get("adapter") is not None and not o.adapter:
        raise ValueError(f"--arm {o.arm} needs --adapter (declared: {a['adapter']}, made by: {a['made_by']})")
    if o.adapter and not (Path(o.adapter) / "adapter_config.json").is_file():
        raise ValueError(f"--adapter {o.adapter}: no adapter_config.json there")
    if o.limit is not None:
        if o.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {o.limit}")
        if o.data.resolve() == TRANSFER_DATA.resolve():
            raise ValueError(f"--limit is for smoke tests: pass --data to a scratch folder, not {shown(TRANSFER_DATA)}")
    return o.arm, sets


def check_same_weights(folder: Path, adapter_hash: str) -> None:
    """An arm is one set of weights: ValueError in one line when ``folder`` (the arm's records) already holds a
    measurement made with other weights than ``adapter_hash`` (``"base"`` for none), naming its sets and the
    commit that trained them. A new training run is a new arm, declared in ``benchmarks/harness/transfer.py``."""
    other: dict[tuple[str, str], list[str]] = {}
    for meta_path in sorted(folder.glob("*.meta.json")):
        if not meta_path.with_name(meta_path.name.replace(".meta.json", ".jsonl")).exists():
            continue  # a killed evaluation's meta: not a measurement
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        seen = meta.get("adapter_sha256")
        if seen is not None and seen != adapter_hash:
            other.setdefault((seen, str(meta.get("trained_at"))), []).append(meta.get("set", meta_path.name))
    if other:
        (seen, trained_at), names = next(iter(other.items()))
        raise ValueError(f"{shown(folder)} holds measurements of other weights (adapter sha256 {seen}, trained at "
                         f"{trained_at}: {', '.join(names)}) than these ({adapter_hash}); an arm is one set of "
                         "weights: declare this training run as a new arm in benchmarks/harness/transfer.py")


def record_in_ledger(s: TransferSet, tasks: list[dict[str, Any]], trajectories: Sequence[Any], episodes: Path,
                     report: Any, policy: Any, ledger_path: Path, extra: dict[str, Any]) -> str:
    """Append the ledger row of one evaluation on ``s`` (set ``transfer/<name>``, the tasks' hash as its sidecar;
    ``episodes``: where its episodes were written); its id."""
    sidecar = {"sha256": ledger_module.tasks_sha256(tasks), "tasks": len(tasks), "primary_metric": "average_at_n"}
    row = ledger_module.make_row(tasks, list(trajectories), report, set_name=f"transfer/{s.name}",
                                 sidecar=sidecar, where=ledger_path.parent, policy=policy, out=episodes,
                                 extra={**extra, "benchmark": s.label})
    ledger_module.append(row, ledger_path)
    return str(row["id"])


@dataclasses.dataclass(frozen=True)
class Work:
    """What one piece measures: a declared set, into ``records`` beside ``meta``."""

    set: TransferSet
    records: Path
    meta: Path


def plan(o: Options, sets: Sequence[TransferSet], folder: Path) -> tuple[dict[str, Work], dict[str, str]]:
    """The pieces of ``o`` by key, one per asked set: ``<arm>-s0/<set>``, finished (skipped) when its records are
    there; with ``--redo`` of a measured set ``<arm>-s0/<set>.redo<k>`` (the next free ``k``). And the sets that
    get none: ``{set: "not run: <the env's one-line error>"}``."""
    work: dict[str, Work] = {}
    not_run: dict[str, str] = {}
    for s in sets:
        paths = record_paths(folder, s.name, o.redo)
        if paths is None:  # measured: a finished piece, which the runner skips
            paths = folder / f"{s.name}.jsonl", folder / f"{s.name}.meta.json"
        else:
            why = unsupported(s)
            if why is not None:
                not_run[s.name] = f"not run: {why}"
                continue
        work[f"{folder.name}/{paths[0].name.removesuffix('.jsonl')}"] = Work(s, *paths)
    return work, not_run


class TransferStore:
    """Where the transfer's pieces lie (:func:`harness.axes_run.schedule`'s ``store``): the arm's folder of records.
    A piece is finished when its records file is there; the meta beside it is written first and the records last
    (both through :mod:`harness.export`, never over a file), so a meta alone is a killed evaluation's, replaced.
    The files keep the runner's own meta: the runner's key, kind and wall time are not added to them."""

    ADDED = ("key", "kind", "wall_seconds")

    def __init__(self, work: dict[str, Work]):
        self.work = work
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def finished(self) -> dict[str, dict[str, Any]]:
        out = {}
        for key, w in self.work.items():
            if w.records.is_file():
                meta = load_json(w.meta) or {}
                out[key] = {"key": key, "kind": KIND, **meta,
                            **({"wall_seconds": meta["seconds"]} if "seconds" in meta else {})}
        return out

    def run(self, piece: Piece, execute: Callable[[Piece, Path], dict[str, Any]]) -> dict[str, Any]:
        meta = execute(piece, self.work[piece.key].records.parent)
        self.rows[piece.key] = meta.pop("records")
        return meta

    def finish(self, piece: Piece, meta: dict[str, Any]) -> None:
        w = self.work[piece.key]
        meta = {k: v for k, v in meta.items() if k not in self.ADDED}
        # the records last: they mark the measurement done (a meta without them is a killed run's)
        export.write_new(w.meta, json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        export.write_new(w.records, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                            for r in self.rows.pop(piece.key)))


class Evaluations:
    """The work of the transfer's pieces: the arm's model (with its adapter) loaded at the first piece that runs and
    shared by the rest; each piece evaluates it on one set through ``agentrl eval``'s path, appends its ledger row
    and returns its meta with its per-task ``records``."""

    def __init__(self, o: Options, arm_name: str, work: dict[str, Work], adapter_hash: str, state: dict[str, Any]):
        self.o, self.arm, self.work, self.adapter_hash, self.state = o, arm_name, work, adapter_hash, state
        self.ledger = o.ledger if (o.ledger is not None or o.limit is not None) else LEDGER
        self.policy: Any = None
        self.model_name = ""

    def load(self) -> Any:
        if self.policy is None:
            from agentrl.algos.models import DEFAULT_MODEL, load_model
            from agentrl.algos.policy.hf import HFPolicy

            self.model_name = self.o.model or DEFAULT_MODEL
            model, tokenizer = load_model(self.model_name, dtype=self.o.dtype, device=self.o.device)
            if self.o.adapter:
                from agentrl.algos.models.lora import load_adapter

                model = load_adapter(model, self.o.adapter)
            self.policy = HFPolicy(model, tokenizer)
        return self.policy

    def close(self) -> None:
        if self.policy is not None:
            self.policy.close()

    def __call__(self, piece: Piece, folder: Path) -> dict[str, Any]:
        from agentrl.algos.evaluation.evaluate import evaluate
        from agentrl.algos.rollout.trajectory import load_trajectories

        o, a, w = self.o, self.arm, self.work[piece.key]
        s = w.set
        policy = self.load()
        tasks = select_tasks(s)[: o.limit]
        cfg = collector_config(s)
        started = datetime.datetime.now(datetime.timezone.utc)
        t0 = time.perf_counter()
        episodes = o.out / a / w.records.name.replace(".jsonl", ".episodes.jsonl")
        for stale in (episodes, w.meta):  # a killed evaluation's: its records were never written
            if stale.exists():
                logger.info("removing %s: left by an evaluation that did not finish", stale)
                export.remove(stale)
        report = evaluate(s.env, policy, tasks, DECODING["n"], cfg, env_kwargs=dict(s.env_kwargs),
                          out=episodes, progress=o.progress)
        seconds = time.perf_counter() - t0
        trajectories = load_trajectories(episodes)
        rows = records(trajectories)
        row_id = None if self.ledger is None else record_in_ledger(
            s, tasks, trajectories, episodes, report, policy, self.ledger,
            {"model": self.model_name, "adapter": self.adapter_hash, "arm": a})
        n = len(rows)
        meta = {
            "arm": a, "set": s.name, "label": s.label, "env": s.env, "env_kwargs": dict(s.env_kwargs),
            "subset": s.subset, "tasks": n, "limit": o.limit, "model": self.model_name,
            "adapter": o.adapter, "adapter_sha256": self.adapter_hash, "trained_at": o.trained_at,
            "adapter_run": adapter_run(o.adapter),
            "decoding": {**DECODING, "max_new_tokens": s.max_new_tokens, "max_turns": s.max_turns,
                         "max_total_tokens": s.max_total_tokens},
            "collector": dataclasses.asdict(cfg), "packages": package_versions(), **self.state,
            "command": o.command, "started": started.isoformat(timespec="seconds"), "seconds": round(seconds, 1),
            "ledger": {"path": shown(self.ledger), "id": row_id} if self.ledger is not None else None,
            "scores": scores(rows),
        }
        logger.info("%s on %s: %.1f%% of %d tasks in %.0f s", a, s.name, 100 * meta["scores"]["score"], n, seconds)
        return {**meta, "records": rows}


def run(o: Options) -> dict[str, Any]:
    """Evaluate ``o.arm`` on each asked set, a piece per set through the one piece runner
    (:func:`harness.axes_run.schedule`); returns ``{set: "written <path>" | "skipped: ..." | "not run: ..."}`` in
    the asked sets' order."""
    from agentrl.algos.evaluation.ledger import adapter_sha256, git_state

    a, sets = check_options(o)
    state = git_state(ROOT)  # the commit this run starts from (what its records and ledger rows name)
    folder = arm_folder(o.data, a)
    work, not_run = plan(o, sets, folder)
    store = TransferStore(work)
    if set(work) - set(store.finished()):  # something to measure: with this arm's weights only
        adapter_hash = adapter_sha256(o.adapter) if o.adapter else "base"
        check_same_weights(folder, adapter_hash)
    else:
        adapter_hash = "base"
    evaluations = Evaluations(o, a, work, adapter_hash, state)
    budget = None if o.budget_minutes is None else 60 * o.budget_minutes
    try:
        done = schedule([Piece(key, KIND) for key in work], o.data, evaluations, TRANSFER, budget, store=store)
    finally:
        evaluations.close()
    by_set = {w.set.name: key for key, w in work.items()}
    measured = store.finished()
    outcome: dict[str, Any] = {}
    for s in sets:
        key = by_set.get(s.name)
        if key is None:
            outcome[s.name] = not_run[s.name]
        elif key in done.ran:
            outcome[s.name] = f"written {shown(work[key].records)}"
        elif key in measured:
            outcome[s.name] = f"skipped: {shown(work[key].records)} exists (--redo measures it again)"
        else:
            outcome[s.name] = "not run: --budget-minutes stopped before it (run again to go on)"
    return outcome
