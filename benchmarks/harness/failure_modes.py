"""How held-out episodes fail: the tools each one called and what its answer repeated, per model of a learning
run.

A learning run's eval files (``<run>/eval/<label>.jsonl``: whole episodes, not committed) are summarised into
one compact row per episode, ``{"id", "family", "reward", "calls", "answer"}`` (``calls``: the tool names in
order; ``answer``: ``"first"`` or ``"last"`` when the final answer repeats the first or the last tool
observation, else ``"other"``, ``null`` without a tool call), written to ``<data>/<label>-s0/calls.jsonl`` beside
the row's committed per-task records. The table of failed episodes (reward <= 0) by family, calls and answer is printed
from those files, so it can be re-derived from a fresh clone:

    python benchmarks/failure_modes.py --run runs/learning-tooluse-chains --data docs/results/data/tooluse_chains
    python benchmarks/failure_modes.py --data docs/results/data/tooluse_chains     # from the committed rows

Never asserts; exits 2 when there is nothing to read.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

from agentrl.envs.datasets import load_jsonl, located_rows
from harness.layout import cell

LABELS = ("base", "sft", "rl", "sft_control")


def calls_file(data: Path, label: str) -> Path:
    """Where the compact rows of row ``label`` lie in a learning run's data (its arm's folder, seed 0)."""
    return data / cell(label, 0) / "calls.jsonl"


def summarise(episode: dict[str, Any]) -> dict[str, Any]:
    """The compact row of one saved episode (``turns`` with ``parsed`` actions and ``observation`` texts)."""
    calls, observations = [], []
    for turn in episode.get("turns", []):
        parsed = turn.get("parsed") or {}
        if parsed.get("kind") == "tool_call":
            calls.append(parsed.get("name"))
            observations.append(turn.get("observation"))
    turns = episode.get("turns") or [{}]
    answer = (turns[-1].get("parsed") or {}).get("answer")
    if not observations:
        repeats = None
    elif answer is not None and answer == observations[0]:
        repeats = "first"
    elif answer is not None and answer == observations[-1]:
        repeats = "last"
    else:
        repeats = "other"
    task = episode.get("task") or {}
    return {"id": task.get("id"), "family": task.get("family"), "reward": episode.get("reward"), "calls": calls,
            "answer": repeats}


def write_rows(run: Path, data: Path) -> list[str]:
    """Summarise ``run``'s eval episodes into each row's ``<data>/<row>-s0/calls.jsonl``; returns the labels
    written."""
    written = []
    for label in LABELS:
        src = run / "eval" / f"{label}.jsonl"
        if not src.is_file():
            continue
        rows = []
        for where, episode in located_rows(src, name=str(src)):  # "file:line" of each JSON line
            try:
                rows.append(summarise(episode))
            except (AttributeError, TypeError) as e:
                raise SystemExit(f"{where}: not a saved episode ({e})") from None
        out = calls_file(data, label)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
        written.append(label)
    return written


def table(data: Path) -> str:
    """Markdown: per model, the failed episodes counted by (family, calls, what the answer repeated)."""
    lines = ["| Model | failed | family | tool calls | answer repeats |", "|---|---:|---|---|---|"]
    for label in LABELS:
        path = calls_file(data, label)
        if not path.is_file():
            continue
        rows = load_jsonl(path)
        failed = collections.Counter((r["family"], " > ".join(r["calls"]) or "none", r["answer"] or "-")
                                     for r in rows if (r["reward"] or 0) <= 0)
        for (family, calls, repeats), n in sorted(failed.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"| {label} | {n} | {family} | {calls} | {repeats} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", help="a learning run's directory (its eval/*.jsonl episodes): write the compact rows")
    ap.add_argument("--data", required=True, help="the run's committed data folder (docs/results/data/<name>)")
    args = ap.parse_args(argv)
    data = Path(args.data)
    if args.run:
        labels = write_rows(Path(args.run), data)
        print(f"wrote {data}/{{{','.join(cell(label, 0) for label in labels)}}}/calls.jsonl", file=sys.stderr)
    if not any(calls_file(data, label).is_file() for label in LABELS):
        print(f"no compact rows in {data}/<row>-s0/calls.jsonl: run with --run first", file=sys.stderr)
        raise SystemExit(2)
    print(table(data))
