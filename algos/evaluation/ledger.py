"""The ledger: one JSONL row per evaluation on a fixed held-out set, appended to the file the caller names.

A held-out set stops being held out once settings are chosen by looking at it. The ledger makes that visible:
:func:`~agentrl.algos.evaluation.evaluate.evaluate` with ``ledger=PATH`` calls :func:`record` after the
evaluation, and when the tasks are a fixed set (or a subset of one) it appends a row to ``PATH``. Without
``ledger`` nothing is recorded anywhere: the library never writes a file the caller did not name. The learning
harness passes ``benchmarks/heldout/ledger.jsonl``; ``agentrl eval --ledger PATH`` does the same from the
command line. The results pages list, per set, every configuration judged on it
(``benchmarks/harness/pages.py``).

A fixed set is a ``<name>.jsonl`` with a sidecar ``<name>.json`` (holding the file's ``sha256``) **in the
folder of the ledger file**: the sets and their ledger live together (``benchmarks/heldout/``). A set is
recognised by content, not by path: the tasks' text (:func:`dumps`: one JSON object per line, keys sorted, the
format the set files are written in) is hashed and compared with each sidecar's ``sha256``, so a copy of a set
counts. Tasks that are all rows of one set, unchanged but not all of them (``--quick`` runs), are recorded
with ``tasks`` < ``set_tasks``.

A row: ``id`` (a hash of the rest), ``time`` (UTC), ``commit`` and ``dirty`` (of the git checkout holding the
ledger file, as :func:`git_state` first read it in this process: a runner reads it at its start), ``command``
(the command line), ``config_sha256`` (of the evaluation settings: env, env kwargs, N, sampling config),
``weights`` (a fingerprint of the weights the policy samples with, see :func:`weights_fingerprint`),
``adapter`` (what the caller says: an adapter's hash, ``"base"``, or null), ``set``, ``set_sha256``,
``tasks``, ``set_tasks``, ``n``, ``temperature``, ``primary_metric`` (the sidecar's), ``scores``
(``average_at_n``, ``pass_at_n``, ``macro_em`` over data sources, ``by_family``), ``per_task`` (task id -> mean
correct over its N episodes) and ``out`` (the episodes file, when written). """

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
import shlex
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.intervals import metric_value
from agentrl.algos.evaluation.metrics import task_group
from agentrl.algos.rollout.trajectory import Trajectory, group_indices

logger = logging.getLogger(__name__)

#: Elements sampled from each weight tensor by :func:`weights_fingerprint`.
FINGERPRINT_ELEMENTS = 4096


def dumps(tasks: Iterable[Mapping[str, Any]]) -> str:
    """Tasks as a set file's text: one JSON object per line, keys sorted (the format every fixed set is
    written in, so its bytes, and the ``sha256`` its sidecar records, are a function of the tasks)."""
    return "".join(json.dumps(t, sort_keys=True, ensure_ascii=False) + "\n" for t in tasks)


def tasks_sha256(tasks: Iterable[Mapping[str, Any]]) -> str:
    return hashlib.sha256(dumps(tasks).encode()).hexdigest()


def sidecars(folder: Path) -> dict[str, dict[str, Any]]:
    """Set name -> its sidecar (``<name>.json`` with a ``sha256`` beside ``<name>.jsonl``) in ``folder``."""
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if isinstance(meta, dict) and "sha256" in meta and path.with_suffix(".jsonl").is_file():
            out[path.stem] = meta
    return out


def match_set(tasks: list[Mapping[str, Any]], folder: Path) -> tuple[str, dict[str, Any]] | None:
    """``(name, sidecar)`` of the fixed set in ``folder`` that ``tasks`` are (by content hash), or are
    unchanged rows of; else None."""
    metas = sidecars(folder)
    digest = tasks_sha256(tasks)
    for name, meta in metas.items():
        if meta["sha256"] == digest:
            return name, meta
    ids = [str(t.get("id")) for t in tasks]
    for name, meta in metas.items():
        if set(ids) <= set(map(str, meta.get("ids", ()))):
            rows = {str(r.get("id")): r for r in map(json.loads, _lines(folder / f"{name}.jsonl"))}
            if all(dumps([rows[str(t.get("id"))]]) == dumps([t]) for t in tasks):
                return name, meta
    return None


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def task_scores(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """One compact row per task, in order of first appearance: ``id``, ``family``, ``score`` (mean ``correct``
    over its episodes), ``n`` (its episodes), plus ``data_source`` / ``tier`` when the task has them."""
    trajs = list(trajectories)
    rows = []
    for members in group_indices(t.group_id for t in trajs):
        ts = [trajs[i] for i in members]
        task = ts[0].task or {}
        row = {"id": str(task.get("id", ts[0].group_id)), "family": task_group(task),
               "score": sum(float(bool(t.metrics.get("correct", 0))) for t in ts) / len(ts), "n": len(ts)}
        for key in ("data_source", "tier"):
            if key in task:
                row[key] = task[key]
        rows.append(row)
    return rows


def scores(rows: list[dict[str, Any]], report: Any = None) -> dict[str, Any]:
    """Overall and per-family scores of :func:`task_scores` rows (``report``'s Pass@N when given).

    ``macro_em`` is Macro-EM as the results pages and ``summarize`` define it (docs/evaluation.md): the unweighted
    mean over data sources (a task's ``data_source``, else its family) of each source's mean task score
    (:func:`~agentrl.algos.evaluation.intervals.metric_value`). ``by_family`` groups by family."""
    by: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by[r["family"]].append(r["score"])
    by_family = {k: sum(v) / len(v) for k, v in sorted(by.items())}
    sources = [str(r.get("data_source", r["family"])) for r in rows]
    return {"average_at_n": sum(r["score"] for r in rows) / len(rows) if rows else None,
            "pass_at_n": getattr(report, "pass_at_n", None),
            "macro_em": metric_value([r["score"] for r in rows], "macro_em", sources) if rows else None,
            "by_family": by_family}


def git_state(where: str | Path) -> dict[str, Any]:
    """``{"commit": <sha or None>, "dirty": <bool or None>}`` of the git checkout holding the folder
    ``where``, as it was the first time this process asked about that checkout: the code a long run executes
    is what it imported when it started, so a commit made while it runs must not be recorded as its source. A
    runner calls this once at its start (the learning harness, ``agentrl eval --ledger``); :func:`record` then
    reads the cached state."""
    return dict(_git_state(_toplevel(str(Path(where).resolve()))))


@functools.cache
def _toplevel(folder: str) -> str:
    """The work tree holding ``folder`` (itself when it is in none, or git is missing)."""
    try:
        return subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip() or folder
    except (OSError, subprocess.SubprocessError):
        return folder


@functools.cache
def _git_state(root: str) -> tuple[tuple[str, Any], ...]:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=30, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=60, check=True).stdout
        return (("commit", commit), ("dirty", bool(status.strip())))
    except (OSError, subprocess.SubprocessError):
        return (("commit", None), ("dirty", None))


def command_line(argv: list[str] | None = None) -> str:
    """The command line, its program shown as typed from the working directory (``agentrl``,
    ``python benchmarks/x.py``)."""
    argv = list(sys.argv if argv is None else argv)
    if argv:
        prog = Path(argv[0])
        if prog.name == "agentrl":
            argv[0] = "agentrl"
        elif prog.suffix == ".py":
            try:
                argv[0] = "python " + prog.resolve().relative_to(Path.cwd().resolve()).as_posix()
            except ValueError:
                argv[0] = "python " + prog.name
    return " ".join([argv[0], shlex.join(argv[1:])] if len(argv) > 1 else argv)


def weights_fingerprint(policy: Any) -> str | None:
    """A short hash of the weights ``policy`` samples with (its ``model``'s parameters: names, shapes and
    :data:`FINGERPRINT_ELEMENTS` evenly spaced values of each, as float32); None for a policy without a local
    model (a server). Two evaluations with equal fingerprints sampled with the same weights, up to the sampled
    values; a fine-tuned or merged adapter changes them."""
    model = getattr(policy, "model", None)
    if model is None or not hasattr(model, "named_parameters"):
        return None
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        flat = p.detach().reshape(-1)
        step = max(1, flat.numel() // FINGERPRINT_ELEMENTS)
        h.update(f"{name}{tuple(p.shape)}".encode())
        h.update(flat[::step][:FINGERPRINT_ELEMENTS].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def adapter_sha256(path: str | Path) -> str:
    """A short hash of an adapter folder's files (names and bytes), or of one file."""
    path = Path(path)
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if f.is_file():
            h.update(f.relative_to(path).as_posix().encode() if path.is_dir() else f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def config_sha256(settings: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_row(tasks: list[Mapping[str, Any]], trajectories: list[Trajectory], report: Any, *, set_name: str,
             sidecar: Mapping[str, Any], where: str | Path, policy: Any = None,
             extra: Mapping[str, Any] | None = None, out: str | Path | None = None) -> dict[str, Any]:
    """The ledger row of one evaluation (without writing it); ``where``: the folder whose checkout's commit
    the row names (the ledger's)."""
    settings = dict(getattr(report, "settings", {}) or {})
    collector = settings.get("collector") or {}
    per = task_scores(trajectories)
    row: dict[str, Any] = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **git_state(where), "command": command_line(), "config_sha256": config_sha256(settings),
        "weights": weights_fingerprint(policy), "adapter": None,
        "set": set_name, "set_sha256": sidecar.get("sha256"), "tasks": len(tasks),
        "set_tasks": sidecar.get("tasks"), "n": getattr(report, "n", None),
        "temperature": collector.get("temperature"), "env": settings.get("env"),
        "primary_metric": sidecar.get("primary_metric", "average_at_n"),
        "scores": scores(per, report), "per_task": {r["id"]: r["score"] for r in per},
        "out": str(out) if out is not None else None,
    }
    row.update(extra or {})
    row["id"] = hashlib.sha256(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return row


def append(row: Mapping[str, Any], path: Path) -> None:
    """Append ``row`` as one line (one ``write`` in append mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def read(path: str | Path) -> list[dict[str, Any]]:
    """Every row of the ledger file ``path`` (``[]`` when there is none)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in _lines(path)]


def record(tasks: Sequence[Mapping[str, Any]], trajectories: list[Trajectory], report: Any,
           ledger: str | Path, *, policy: Any = None, extra: Mapping[str, Any] | None = None,
           out: str | Path | None = None) -> dict[str, Any] | None:
    """Append the row of an evaluation to the ledger file ``ledger`` when its tasks are (rows of) a fixed set
    of the ledger's folder; the row, or None when they are not. Sets ``report.settings["ledger"]`` to the
    row's id and set."""
    path = Path(ledger)
    found = match_set(list(tasks), path.parent)
    if found is None:
        return None
    name, meta = found
    row = make_row(list(tasks), trajectories, report, set_name=name, sidecar=meta, where=path.parent,
                   policy=policy, extra=extra, out=out)
    append(row, path)
    if isinstance(getattr(report, "settings", None), dict):
        report.settings["ledger"] = {"id": row["id"], "set": name}
    logger.info("ledger: %s row %s on set %s (%d of %s tasks)", path, row["id"], name, row["tasks"],
                row["set_tasks"])
    return row


__all__ = ["adapter_sha256", "append", "command_line", "config_sha256", "dumps", "git_state", "make_row",
           "match_set", "read", "record", "scores", "sidecars", "task_scores", "tasks_sha256",
           "weights_fingerprint"]
