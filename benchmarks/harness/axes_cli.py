"""The command line of ``benchmarks/axes.py``: ``run``, ``status`` and ``page``."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from harness.axes_run import experiment_named, finished, parse_cells, plan, schedule, status_lines
from harness.experiments import RUNNABLE
from harness.layout import DATA, LEDGER, README, RESULTS, ROOT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The pre-declared axes experiment and the train-split lr choice, in "
                                             "resumable pieces.")
    ap.add_argument("command", choices=["run", "status", "page"])
    ap.add_argument("--experiment", default="axes", choices=list(RUNNABLE), help="the declared experiment")
    ap.add_argument("--cells", help="comma-separated arm:seed cells to run (default: every declared one)")
    ap.add_argument("--sets", help="comma-separated declared sets to evaluate on (default: all)")
    ap.add_argument("--budget-minutes", type=float, help="stop before a piece that would not finish within this")
    ap.add_argument("--data", help="the committed data folder (default docs/results/data/<experiment>)")
    ap.add_argument("--work", help="adapters and episodes, not committed (default runs/<experiment>)")
    ap.add_argument("--model", help="model alias or path (default: the main job's)")
    ap.add_argument("--minutes", type=float, help="training minutes per cell instead of the declared (a smoke test)")
    ap.add_argument("--tasks", type=int, help="only the first N tasks of each set (a smoke test, not a result)")
    ap.add_argument("--results", default=str(RESULTS), help="where `page` writes learning.md (docs/results)")
    ap.add_argument("--ledger", default=str(LEDGER), help="the ledger fixed-set evaluations append to")
    ap.add_argument("overrides", nargs="*", help="MainJobConfig key=value overrides (a smoke test, not a result)")
    args = ap.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        exp = experiment_named(args.experiment)
        cells = parse_cells(args.cells, exp) if args.cells else None
        sets = [s.strip() for s in args.sets.split(",") if s.strip()] if args.sets else None
        pieces = plan(exp, cells, sets)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    data = Path(args.data) if args.data else DATA / exp.name
    if args.command == "status":
        print("\n".join(status_lines(exp, data, args.minutes)))
        return 0
    if args.command == "page":
        from harness.pages import write_page

        readme = README if Path(args.results).resolve() == RESULTS.resolve() else None
        print(f"written: {write_page(data.parent, Path(args.results), readme=readme)}")
        return 0
    if exp.pending:  # declared before it runs, with a setting still to be decided in a commit of its own
        raise SystemExit(f"--experiment {exp.name} is declared but may not run yet: {exp.pending}")
    from agentrl.algos.evaluation.ledger import git_state
    from agentrl.algos.run_folder import claim_run
    from agentrl.algos.training.checkpoint import RunInUse
    from harness.machine import machine

    git_state(ROOT)  # the commit this run starts from: what every piece it writes records
    machine()
    work = Path(args.work) if args.work else ROOT / "runs" / exp.name
    try:
        with claim_run(work):  # one writer per run folder: a second run of this experiment's pieces is refused
            return _run_pieces(args, exp, pieces, data, work)
    except RunInUse as e:
        raise SystemExit(f"axes.py: {e}") from None


def _run_pieces(args, exp, pieces, data, work) -> int:
    from harness.axes_exec import Executor
    from harness.axes_run import check_setup

    executor = Executor(exp, data, work, list(args.overrides), args.model, Path(args.ledger), args.tasks, args.minutes)
    data.mkdir(parents=True, exist_ok=True)
    check_setup(data, executor.setup(), "--data")
    budget = None if args.budget_minutes is None else 60 * args.budget_minutes
    done, t0 = finished(data), time.perf_counter()
    if "cold_start" in done and any(p.key not in done and "cold_start" in p.needs for p in pieces):
        executor.adapter("cold_start")  # a missing one trained again and checked before any piece's clock starts
    if budget is not None:
        budget -= time.perf_counter() - t0
    out = schedule(pieces, data, executor, exp, budget, args.minutes)
    print(f"ran {len(out.ran)}, already there {len(out.skipped)}, waiting on an unfinished piece {len(out.blocked)}")
    if out.stopped_before:
        print(f"stopped before {out.stopped_before}: it would not finish within --budget-minutes; run again to "
              "resume")
    print("\n".join(status_lines(exp, data, args.minutes)))
    return 0
