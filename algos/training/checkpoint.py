"""Checkpoints: ``<run>/checkpoints/step-NNNNNN/{adapter/, state.pt}`` plus a ``latest`` pointer.

``state.pt`` holds the step, the data position, the exact trainable tensors, the optimizer state, every RNG
state and the config. A checkpoint is written to ``step-NNNNNN.tmp`` and renamed into place, and ``latest`` is
rewritten atomically after it, so a kill at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
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


@dataclass
class TrainingState:
    """What a checkpoint restores besides the adapter weights."""

    step: int
    data_position: int


def save_checkpoint(run_dir: str | Path, *, model, optimizer, step: int, data_position: int,
                    config: dict[str, Any], keep: int = 2) -> Path:
    """Write ``checkpoints/step-NNNNNN`` atomically, point ``latest`` at it, keep the ``keep`` newest."""
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
    return TrainingState(int(state["step"]), int(state["data_position"]))
