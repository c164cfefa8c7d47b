"""Where the checkout keeps the harness's inputs and outputs (the harness runs from a checkout; the library
``agentrl`` never looks these up)."""

from __future__ import annotations

from pathlib import Path

#: The checkout: benchmarks/harness/layout.py -> the repository root.
ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPTS = ROOT / "benchmarks"
#: The fixed held-out sets (``<name>.jsonl`` and the sidecar ``<name>.json``) and, beside them, their ledger.
SETS = SCRIPTS / "heldout"
LEDGER = SETS / "ledger.jsonl"
RESULTS = ROOT / "docs" / "results"
#: The committed data every results page is generated from.
DATA = RESULTS / "data"
README = ROOT / "README.md"
RESULTS_PAGE = ROOT / "docs" / "results.md"


def cell(arm: str, seed: int) -> str:
    """The folder of one (arm, seed) in an experiment's data folder: ``<arm>-s<seed>``; its evaluations lie in it
    as ``<set>.jsonl`` (per-task records) beside ``<set>.meta.json``."""
    return f"{arm}-s{seed}"


def set_name(heldout_file: str | Path) -> str:
    """The set of a held-out file a run recorded (``benchmarks/heldout/tooluse_v3.jsonl`` -> ``tooluse_v3``)."""
    return Path(heldout_file).name.removesuffix(".jsonl")


def records_file(folder: Path, arm: str, seed: int, name: str, fraction: float = 1.0) -> Path:
    """The per-task records of ``arm`` (seed ``seed``) on set ``name`` in an experiment's data folder; an evaluation
    part-way through a training budget (``fraction`` < 1) lies beside the final one as ``<set>.at-<fraction>``."""
    return folder / cell(arm, seed) / (f"{name}.jsonl" if fraction == 1 else f"{name}.at-{fraction:g}.jsonl")


#: The folder of an experiment's shared cold start (one for all its arms and seeds): ``cold_start/<set>.jsonl``.
COLD_START_DIR = "cold_start"

#: The training stages of a learning run by the arm they make: each stage's metrics are its arm's
#: ``<arm>-s<seed>/metrics.jsonl``, and its figures keep the stage's name (``grpo_reward.png``).
STAGE_OF_ARM = {"sft": "sft", "rl": "grpo", "sft_control": "sft_control"}
ARM_OF_STAGE = {stage: arm for arm, stage in STAGE_OF_ARM.items()}


def metrics_files(folder: Path) -> dict[str, Path]:
    """Name -> training metrics (``<arm>-s<seed>/metrics.jsonl``) of every trained arm in an experiment's data
    folder, sorted by name: a learning run's (a folder with ``learning.json``) by their stage (``grpo``, ``sft``,
    ``sft_control``), any other's by their folder (``grpo-s0``)."""
    learning = (folder / "learning.json").is_file()
    out = {}
    for path in folder.glob("*/metrics.jsonl"):
        arm = path.parent.name.rpartition("-s")[0]
        out[STAGE_OF_ARM.get(arm, path.parent.name) if learning else path.parent.name] = path
    return dict(sorted(out.items()))


def meta_file(records: Path) -> Path:
    """The meta beside a records file: ``<set>.jsonl`` -> ``<set>.meta.json``."""
    return records.with_name(records.name.removesuffix(".jsonl") + ".meta.json")


def shown(path: Path) -> str:
    """A path as a page shows it: relative to the checkout when inside it."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()
