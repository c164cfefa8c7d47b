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


def meta_file(records: Path) -> Path:
    """The meta beside a records file: ``<set>.jsonl`` -> ``<set>.meta.json``."""
    return records.with_name(records.name.removesuffix(".jsonl") + ".meta.json")


def shown(path: Path) -> str:
    """A path as a page shows it: relative to the checkout when inside it."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()
