"""One writer per run folder, and a record of who wrote it.

Every command that writes a run folder (``agentrl main-job``, ``agentrl train``, ``agentrl eval --out`` and the
benchmark runners) holds the folder's lock (:func:`agentrl.algos.training.checkpoint.lock_run`) for its whole life
through :func:`claim_run`: a second writer is refused in one line that names the holder's pid and command line.
While it holds the lock, :func:`claim_run` appends one line to ``<run>/writers.jsonl``: the command, the commit
(and whether the checkout had uncommitted changes) it started from, its pid and the time, so a run folder says
which commands and which code wrote it (a ``--resume`` adds a line).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

#: The file in a run folder that lists the commands that wrote it, one JSON object a line.
WRITERS_FILE = "writers.jsonl"


def writer_record(writes: str | None = None) -> dict[str, Any]:
    """This process as a writer: its command line, the commit of the code it runs (:func:`git_state` of this
    package's checkout, read once per process), its pid, host and the time; ``writes`` names the file it writes
    when it is not the whole folder."""
    from agentrl.algos.evaluation.ledger import command_line, git_state

    record: dict[str, Any] = {"command": command_line(), **git_state(Path(__file__).parent), "pid": os.getpid(),
                              "host": socket.gethostname(),
                              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if writes is not None:
        record["writes"] = writes
    return record


@contextlib.contextmanager
def claim_run(run_dir: str | Path, *, writes: str | None = None,
              check: Callable[[], None] | None = None) -> Iterator[Path]:
    """Hold ``run_dir``'s lock while the block runs and record this command in ``run_dir/writers.jsonl``.

    ``writes``: the one file of the folder this command writes (``agentrl eval --out FILE``); then the lock is
    ``.<file>.lock`` of that file alone, so evaluations into other files of one folder do not wait on each other.
    ``check``: runs once the lock is held and before the record is written (a refusal to start over a finished
    run, :func:`~agentrl.algos.training.checkpoint.refuse_fresh_start`): no second process can change what it
    checked until the block ends, and a refused command is not recorded as a writer.

    Raises:
        RunInUse: another live process holds the lock (one line: its pid and command).
    """
    from agentrl.algos.training.checkpoint import LOCK_FILE, lock_run, unlock_run

    run_dir = Path(run_dir)
    name = f".{writes}.lock" if writes else LOCK_FILE
    lock_run(run_dir, name)
    try:
        if check is not None:
            check()
        if int(os.environ.get("RANK", "0") or 0) == 0:
            with open(run_dir / WRITERS_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(writer_record(writes), sort_keys=True) + "\n")
        yield run_dir
    finally:
        unlock_run(run_dir, name)


class NoRunToResume(ValueError):
    """``--resume`` was asked of a folder that holds no run to continue."""


def holds_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a run that ``--resume`` can continue: a trainer's ``config.json``,
    ``checkpoints/``, ``adapter/`` or ``metrics.jsonl``, or a whole-folder writer in its ``writers.jsonl`` (a run
    killed before its first checkpoint; an ``agentrl eval --out FILE`` into the folder is not a run)."""
    run_dir = Path(run_dir)
    if any((run_dir / name).exists() for name in ("config.json", "checkpoints", "adapter", "metrics.jsonl")):
        return True
    try:
        return any("writes" not in row for row in writers(run_dir))
    except (OSError, ValueError):  # an unreadable or torn writers.jsonl still says a run was started here
        return True


def refuse_resume_without_run(run_dirs: Sequence[str | Path], out: str | Path) -> None:
    """Raise :class:`NoRunToResume` (one line) unless one of ``run_dirs`` :func:`holds_run`: a ``--resume`` there
    would silently start a fresh run. ``out`` is the folder the user named."""
    if not any(holds_run(d) for d in run_dirs):
        where = "does not exist" if not Path(out).exists() else "holds no run to continue"
        raise NoRunToResume(f"--resume: {out} {where} (no config.json, checkpoints/ or {WRITERS_FILE}); "
                            f"drop --resume to start a fresh run there, or pass the --out of the run to continue")


def writers(run_dir: str | Path) -> list[dict[str, Any]]:
    """The commands that wrote ``run_dir``, oldest first (``[]`` when it records none)."""
    path = Path(run_dir) / WRITERS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


__all__ = ["WRITERS_FILE", "NoRunToResume", "claim_run", "holds_run", "refuse_resume_without_run", "writer_record",
           "writers"]
