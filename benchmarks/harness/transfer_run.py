"""The transfer experiment's runner (``benchmarks/transfer.py``): one declared arm (:mod:`harness.transfer`) on each
declared set, through the evaluation path ``agentrl eval`` uses (:func:`agentrl.algos.evaluation.evaluate.evaluate`
with the model, its adapter and an :class:`~agentrl.algos.policy.HFPolicy`).

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation import ledger as ledger_module
from harness import export
from harness.layout import LEDGER, ROOT, shown
from harness.transfer import (
    DECODING,
    PACKAGES,
    SETS,
    TRANSFER_DATA,
    TransferSet,
    arm,
    arm_folder,
    transfer_set,
)

logger = logging.getLogger("transfer")

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


def run(o: Options) -> dict[str, Any]:
    """Evaluate ``o.arm`` on each asked set; returns ``{set: "written <path>" | "skipped: ..." | "not run: ..."}``."""
    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.ledger import adapter_sha256, git_state
    from agentrl.algos.models import DEFAULT_MODEL, load_model
    from agentrl.algos.policy.hf import HFPolicy

    a, sets = check_options(o)
    state = git_state(ROOT)  # the commit this run starts from (what its records and ledger rows name)
    folder = arm_folder(o.data, a)
    todo: list[tuple[TransferSet, tuple[Path, Path]]] = []
    outcome: dict[str, Any] = {}
    for s in sets:
        paths = record_paths(folder, s.name, o.redo)
        if paths is None:
            outcome[s.name] = f"skipped: {shown(folder / (s.name + '.jsonl'))} exists (--redo measures it again)"
            continue
        why = unsupported(s)
        if why is not None:
            outcome[s.name] = f"not run: {why}"
            continue
        todo.append((s, paths))
    if not todo:
        return outcome
    adapter_hash = adapter_sha256(o.adapter) if o.adapter else "base"
    check_same_weights(folder, adapter_hash)
    model_name = o.model or DEFAULT_MODEL
    model, tokenizer = load_model(model_name, dtype=o.dtype, device=o.device)
    if o.adapter:
        from agentrl.algos.models.lora import load_adapter

        model = load_adapter(model, o.adapter)
    policy = HFPolicy(model, tokenizer)
    ledger_path = o.ledger if (o.ledger is not None or o.limit is not None) else LEDGER
    try:
        for s, (rec_path, meta_path) in todo:
            tasks = select_tasks(s)[: o.limit]
            cfg = collector_config(s)
            started = datetime.datetime.now(datetime.timezone.utc)
            t0 = time.perf_counter()
            episodes = o.out / a / rec_path.name.replace(".jsonl", ".episodes.jsonl")
            for stale in (episodes, meta_path):  # a killed evaluation's: its records were never written
                if stale.exists():
                    logger.info("removing %s: left by an evaluation that did not finish", stale)
                    export.remove(stale)
            report = evaluate(s.env, policy, tasks, DECODING["n"], cfg, env_kwargs=dict(s.env_kwargs),
                              out=episodes, progress=o.progress)
            seconds = time.perf_counter() - t0
            from agentrl.algos.rollout.trajectory import load_trajectories

            trajectories = load_trajectories(episodes)
            rows = records(trajectories)
            row_id = None if ledger_path is None else record_in_ledger(
                s, tasks, trajectories, episodes, report, policy, ledger_path,
                {"model": model_name, "adapter": adapter_hash, "arm": a})
            n = len(rows)
            meta = {
                "arm": a, "set": s.name, "label": s.label, "env": s.env, "env_kwargs": dict(s.env_kwargs),
                "subset": s.subset, "tasks": n, "limit": o.limit, "model": model_name,
                "adapter": o.adapter, "adapter_sha256": adapter_hash, "trained_at": o.trained_at,
                "adapter_run": adapter_run(o.adapter),
                "decoding": {**DECODING, "max_new_tokens": s.max_new_tokens, "max_turns": s.max_turns,
                             "max_total_tokens": s.max_total_tokens},
                "collector": dataclasses.asdict(cfg), "packages": package_versions(), **state,
                "command": o.command, "started": started.isoformat(timespec="seconds"), "seconds": round(seconds, 1),
                "ledger": {"path": shown(ledger_path), "id": row_id} if ledger_path is not None else None,
                "scores": scores(rows),
            }
            # the records last: they mark the measurement done (a meta without them is a killed run's)
            export.write_new(meta_path, json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
            export.write_new(rec_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
            outcome[s.name] = f"written {shown(rec_path)}"
            logger.info("%s on %s: %.1f%% of %d tasks in %.0f s", a, s.name, 100 * meta["scores"]["score"], n,
                        seconds)
    finally:
        policy.close()
    return outcome
