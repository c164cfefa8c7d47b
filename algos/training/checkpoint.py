"""Checkpoints: ``<run>/checkpoints/step-NNNNNN/{adapter/, state.pt}`` plus a ``latest`` pointer.

``state.pt`` holds the step, the data position, the exact trainable tensors, the optimizer state, every RNG
state, the config and the task sampler's state (its estimates and generator). A checkpoint is written to
``step-NNNNNN.tmp`` and renamed into place, and ``latest`` is rewritten atomically after it, so a kill at any
moment leaves the previous checkpoint intact.

While a trainer runs, it holds ``<run>/trainer.lock`` (:func:`lock_run`): a second trainer on the same folder (a
second ``agentrl train --resume``) is refused in one line instead of writing the same checkpoints.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.algos._io import atomic_dir, atomic_write_text
from agentrl.algos.models.lora import load_trainable_state_dict, save_adapter, trainable_state_dict

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
LATEST = "latest"
#: The file a running trainer holds locked in its run folder (it holds the trainer's pid).
LOCK_FILE = "trainer.lock"


class RunInUse(ValueError):
    """Another live process trains in this run folder."""


_locks: dict[str, list[int]] = {}  # lock file -> [fd, holders in this process]


def lock_run(run_dir: str | Path, name: str = LOCK_FILE) -> None:
    """Hold ``run_dir/trainer.lock`` (or ``run_dir/name``) until :func:`unlock_run` or this process ends (an
    ``fcntl.flock``, which the system releases whatever way the process dies, so the lock of a dead trainer is no
    lock). The file holds the holder's pid and command line. Holding it twice in one process is fine (the CLI
    takes it before it starts an engine, the trainer again). In a data-parallel run only rank 0 (``$RANK``, the
    launcher's) takes it; the others share its folder or have their own.

    Raises:
        RunInUse: another live process holds it (the message names its pid and command).
    """
    if int(os.environ.get("RANK", "0") or 0) != 0:
        return
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    path = str((Path(run_dir) / name).resolve())
    if path in _locks:
        _locks[path][1] += 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid, _, command = os.read(fd, 4096).decode(errors="replace").strip().partition(" ")
        os.close(fd)
        holder = f"`{command}` (pid {pid})" if command else f"a trainer (pid {pid or 'unknown'})"
        raise RunInUse(f"{run_dir} is in use: {holder} still runs there; wait for it to end or stop it "
                       f"(kill {pid or 'its process'}), or pass another --out") from None
    from agentrl.algos.evaluation.ledger import command_line

    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {command_line()}\n".encode())
    _locks[path] = [fd, 1]


def unlock_run(run_dir: str | Path, name: str = LOCK_FILE) -> None:
    """Give back one hold of :func:`lock_run` (the lock goes with the last one)."""
    path = str((Path(run_dir) / name).resolve())
    entry = _locks.get(path)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del _locks[path]
        fcntl.flock(entry[0], fcntl.LOCK_UN)
        os.close(entry[0])


def rng_state() -> dict[str, Any]:
    """The Python, NumPy, torch (and CUDA) RNG states."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _finished(ckdir: Path) -> list[Path]:
    return sorted(p for p in ckdir.glob("step-*") if p.is_dir() and not p.name.endswith((".tmp", ".old")))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or ``None``."""
    ckdir = Path(run_dir) / CHECKPOINTS
    pointer = ckdir / LATEST
    if pointer.is_file():
        path = ckdir / pointer.read_text().strip()
        if (path / "state.pt").is_file():
            return path
    done = [p for p in _finished(ckdir) if (p / "state.pt").is_file()]
    return done[-1] if done else None


def trained_here(run_dir: str | Path) -> str | None:
    """What a run folder holds that a fresh start would overwrite, in words (``checkpoint step-000016``,
    ``adapter/``), or None when it holds neither a finished checkpoint nor a saved adapter."""
    run_dir = Path(run_dir)
    held = []
    latest = latest_checkpoint(run_dir)
    if latest is not None:
        held.append(f"checkpoint {latest.name}")
    if (run_dir / "adapter" / "adapter_config.json").is_file():
        held.append("adapter/")
    return ", ".join(held) or None


class RunExists(ValueError):
    """A fresh start was asked for in a run folder that already holds a trained run."""


def refuse_fresh_start(run_dirs: Sequence[str | Path], out: str | Path) -> None:
    """Raise :class:`RunExists` (one line) when any of ``run_dirs`` holds a trained run (:func:`trained_here`):
    a command without ``--resume`` would train over it. ``out`` is the folder the user named."""
    for run_dir in run_dirs:
        held = trained_here(run_dir)
        if held is not None:
            raise RunExists(f"{out} already holds a run ({Path(run_dir).as_posix()}: {held}): continue it with "
                            f"--resume, pass another --out, or delete the folder to start over")


@dataclass
class TrainingState:
    """What a checkpoint restores besides the adapter weights."""

    step: int
    data_position: int
    sampler: dict[str, Any] | None = None
    """The task sampler's state (:meth:`~agentrl.algos.training.sampler.SignalSampler.state_dict`); None in a
    checkpoint written before it existed."""


def save_checkpoint(run_dir: str | Path, *, model, optimizer, step: int, data_position: int,
                    config: dict[str, Any], keep: int = 2, sampler: dict[str, Any] | None = None) -> Path:
    """Write ``checkpoints/step-NNNNNN`` atomically, point ``latest`` at it, keep the ``keep`` newest
    (``sampler``: the task sampler's state, restored by :func:`load_checkpoint`)."""
    ckdir = Path(run_dir) / CHECKPOINTS
    ckdir.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    with atomic_dir(ckdir / name) as tmp:
        save_adapter(model, tmp / "adapter")  # the trained adapter, not a frozen reference copy
        torch.save({
            "step": step,
            "data_position": data_position,
            "trainable": trainable_state_dict(model),
            "optimizer": optimizer.state_dict(),
            "rng": rng_state(),
            "config": json.loads(json.dumps(config, default=str)),
            "sampler": sampler,
        }, tmp / "state.pt")
    atomic_write_text(ckdir / LATEST, name)
    done = _finished(ckdir)
    for p in done[: max(0, len(done) - max(1, keep))]:
        shutil.rmtree(p, ignore_errors=True)
    logger.info("checkpoint %s (data position %d)", ckdir / name, data_position)
    return ckdir / name


def load_checkpoint(path: str | Path, *, model, optimizer) -> TrainingState:
    """Restore the trainable tensors, optimizer and RNG states from a checkpoint folder; returns its counters.

    The file is read onto the CPU: the RNG states must stay CPU ``ByteTensor``s (``torch.set_rng_state``
    rejects any other device), the trainable tensors are copied into the model's parameters on their own
    device, and ``optimizer.load_state_dict`` moves its state to the device of the parameters it belongs to.
    """
    state = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)
    load_trainable_state_dict(model, state["trainable"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    logger.info("resumed from %s: step %d, data position %d", path, state["step"], state["data_position"])
    return TrainingState(int(state["step"]), int(state["data_position"]), state.get("sampler"))
