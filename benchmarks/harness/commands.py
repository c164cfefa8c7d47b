"""The command lines of ``benchmarks/learning.py`` and ``benchmarks/compare_algorithms.py``: ``--page`` writes the
results pages from committed data (:mod:`harness.pages`). They run no experiment since issue 58 step 1: a learning
run or the comparison is ``python benchmarks/experiment.py run NAME`` (:mod:`harness.experiment_cli`, the one piece
runner), which they name in one line (exit status 2)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.experiments import COMPARE, EXPERIMENTS, learning_record
from harness.layout import LEDGER, README, RESULTS

#: What both scripts say instead of running (``{name}``: the record, ``{rest}``: the options to pass on).
MOVED = ("{script} runs no experiment since issue 58: python benchmarks/experiment.py run {name}{rest} (its pieces "
         "resume; python benchmarks/experiment.py list names every experiment)")


def _page(args) -> int:
    from harness.pages import write_page

    readme = README if Path(args.results).resolve() == RESULTS.resolve() else None
    data = Path(args.data) if args.data else Path(args.results) / "data"
    print(f"written: {write_page(data, Path(args.results), quick=args.quick, ledger=Path(args.ledger), readme=readme)}")
    return 0


def _parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--page", action="store_true", help="regenerate docs/results/learning.md from committed data")
    ap.add_argument("--quick", action="store_true", help="the --quick runs' page (learning-quick.md)")
    ap.add_argument("--results", default=str(RESULTS), help="where the pages go (docs/results)")
    ap.add_argument("--data", help="the committed data the page reads (default <results>/data)")
    ap.add_argument("--ledger", default=str(LEDGER), help="the ledger the page reads (benchmarks/heldout/ledger.jsonl)")
    return ap


def _moved(script: str, name: str, rest: list[str], quick: bool) -> int:
    shown = " ".join([*(["--quick"] if quick else []), *rest])
    print(MOVED.format(script=script, name=name, rest=f" {shown}" if shown else ""), file=sys.stderr)
    return 2


def learning_main(argv: list[str] | None = None) -> int:
    """``benchmarks/learning.py``: ``--page``, or the one line naming the command that runs the experiment."""
    ap = _parser("The learning results page (--page); a run is python benchmarks/experiment.py run NAME.")
    ap.add_argument("--env", default="AgentRL/ToolUse-v0", choices=[e.env for e in EXPERIMENTS], help="environment")
    ap.add_argument("--variant", metavar="NAME", help="a declared variant of the env's recipe")
    args, rest = ap.parse_known_args(argv)
    if args.page:
        return _page(args)
    try:
        name = learning_record(args.env, args.variant).name
    except ValueError:
        name = "NAME"
    return _moved("learning.py", name, rest, args.quick)


def compare_main(argv: list[str] | None = None) -> int:
    """``benchmarks/compare_algorithms.py``: ``--page``, or the one line naming the command that runs it."""
    ap = _parser("The algorithms comparison's pages (--page, with the learning page); a run is python "
                 f"benchmarks/experiment.py run {COMPARE.name}.")
    args, rest = ap.parse_known_args(argv)
    if args.page:
        return _page(args)
    return _moved("compare_algorithms.py", COMPARE.name, rest, args.quick)
