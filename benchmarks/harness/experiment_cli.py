"""The command line of ``benchmarks/experiment.py``: ``run``, ``status`` and ``page`` of any declared experiment
(a :class:`harness.record.Record` of ``harness.experiments.RECORDS``, named by its data folder), through the runner
and the page that serve its kind today (``learning.py``, ``compare_algorithms.py``, ``axes.py``, ``transfer.py``;
their own command lines keep working)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.data import load_json
from harness.experiments import RECORDS, record
from harness.layout import DATA, LEDGER, README, RESULTS, cell, shown
from harness.record import Record

USAGE = """python benchmarks/experiment.py status [EXPERIMENT]       # what is committed, what is left
python benchmarks/experiment.py run EXPERIMENT [ARGS...]     # run it (ARGS: its runner's options)
python benchmarks/experiment.py page [EXPERIMENT | all]      # the page that shows it, from committed data"""


def _short(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _learning_args(r: Record) -> list[str]:
    return ["--env", r.env, *(["--variant", r.variant] if r.variant else [])]


def run(r: Record, rest: list[str]) -> int:
    """Run ``r`` with its kind's runner; ``rest`` goes to that runner's command line."""
    if not r.runnable:
        raise SystemExit(f"{r.name} is kept for its data only: its declaration was replaced (see its section on "
                         f"docs/results/{r.page}); nothing runs it again")
    if r.pending:
        raise SystemExit(f"{r.name} is declared but may not run yet: {r.pending}")
    if r.kind == "learning":
        from harness.commands import learning_main

        return learning_main([*_learning_args(r), *rest])
    if r.kind == "comparison":
        from harness.commands import compare_main

        return compare_main(rest)
    if r.kind == "axes":
        from harness.axes_cli import main

        return main(["run", "--experiment", r.name, *rest])
    from harness.transfer_cli import main as transfer_main

    return transfer_main(rest)


def status_lines(r: Record, data: Path = DATA) -> list[str]:
    """What is committed of ``r`` under ``data`` and what is not."""
    folder = data / r.name
    head = f"{r.name} ({r.kind}): {shown(folder)}" + ("" if r.runnable else " (kept for its data; not run again)")
    head += f" (may not run yet: {r.pending})" if r.pending else ""
    if r.kind == "axes":
        from harness.axes_run import status_lines as pieces

        return [head, *pieces(r, folder)[1:]]
    if r.kind == "learning":
        run_ = load_json(folder / "learning.json")
        if run_ is None:
            return [head, "  not run"]
        evals = run_.get("evals", {})
        rows = [f"  {'done' if r.label(a) in evals else 'not run':8} {a} ({r.label(a)})" for a in r.arms]
        return [head, f"  ran at {run_.get('commit', '?')[:7]} on {run_.get('started', '?')}: "
                      f"{_short(run_.get('command', '?'))}", *rows]
    if r.kind == "comparison":
        summary = load_json(folder / "compare.json")
        if summary is None:
            return [head, "  not run"]
        runs = summary.get("runs", {})
        seeds = summary.get("seeds", [])
        rows = [f"  {'done' if runs.get(a) else 'not run':8} {a} (seeds run: "
                f"{', '.join(str(x['seed']) for x in runs.get(a, [])) or 'none'}; the run's seeds: "
                f"{', '.join(map(str, seeds))})" for a in r.arms]
        return [head, f"  ran at {str(summary.get('commit'))[:7]} on {summary.get('started', '?')}", *rows]
    lines, done = [head], 0
    for a, notes in r.arms.items():
        measured = [s for s in r.sets if (folder / cell(a, r.seeds[0]) / f"{s}.meta.json").is_file()]
        done += len(measured)
        left = [s for s in r.sets if s not in measured]
        requires = notes.get("requires", "")
        lines.append(f"  {a}: {len(measured)} of {len(r.sets)} sets"
                     + (f"; not run: {', '.join(left)}" if left else "") + (f" ({requires})" if requires and left
                                                                             else ""))
    return [*lines, f"{done} of {len(r.arms) * len(r.sets)} evaluations done"]


def summary_line(r: Record, data: Path = DATA) -> str:
    """One line of ``status`` without a name: the record's head and how much of it is committed."""
    lines = status_lines(r, data)
    if r.kind in ("axes", "transfer"):
        return f"{lines[0]}; {lines[-1]}"
    done = sum(line.startswith("  done") for line in lines)
    rows = sum(line.startswith(("  done", "  not run")) for line in lines)
    return f"{lines[0]}; {done} of {rows} arms {'run' if r.kind == 'comparison' else 'evaluated'}" if rows else \
        f"{lines[0]}; not run"


def page(name: str, data: Path = DATA, results: Path = RESULTS, ledger: Path = LEDGER) -> list[Path]:
    """Write the page(s) that show ``name`` (``all``: every page) from the committed data."""
    kinds = {r.kind for r in RECORDS.values()} if name == "all" else {record(name).kind}
    written = []
    if kinds - {"transfer"}:
        from harness.pages import write_page

        readme = README if results.resolve() == RESULTS.resolve() else None
        written.append(write_page(data, results, ledger=ledger, readme=readme))
    if "transfer" in kinds:
        from harness.transfer_page import write_page as write_transfer

        written.append(write_transfer(data / "transfer", results / "transfer.md", ledger))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/experiment.py", usage=USAGE,
                                 description="Run, list or render any declared experiment (harness/experiments.py).")
    ap.add_argument("command", choices=["run", "status", "page", "list"])
    ap.add_argument("experiment", nargs="?", help=f"a declared experiment: {', '.join(RECORDS)}")
    ap.add_argument("--data", default=str(DATA), help="the committed data (docs/results/data); status and page")
    ap.add_argument("--results", default=str(RESULTS), help="where page writes (docs/results)")
    ap.add_argument("--ledger", default=str(LEDGER), help="the ledger page reads (benchmarks/heldout/ledger.jsonl)")
    args, rest = ap.parse_known_args(argv)
    if args.command != "run" and rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "list":
            for r in RECORDS.values():
                print(json.dumps({"name": r.name, "kind": r.kind, "sets": list(r.evaluated),
                                  "arms": list(r.arms), "seeds": list(r.seeds)}))
            return 0
        if args.command == "status":
            if args.experiment:
                print("\n".join(status_lines(record(args.experiment), Path(args.data))))
            else:
                print("\n".join(summary_line(r, Path(args.data)) for r in RECORDS.values()))
            return 0
        if args.command == "page":
            for path in page(args.experiment or "all", Path(args.data), Path(args.results), Path(args.ledger)):
                print(f"written: {shown(path)}")
            return 0
        if not args.experiment:
            ap.error(f"run needs an EXPERIMENT: {', '.join(RECORDS)}")
        return run(record(args.experiment), rest)
    except ValueError as e:
        raise SystemExit(f"experiment.py: {e}") from None
