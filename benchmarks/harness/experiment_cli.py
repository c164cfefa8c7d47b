"""The command line of ``benchmarks/experiment.py``: ``run``, ``status`` and ``page`` of any declared experiment
(a :class:`harness.record.Record` of ``harness.experiments.RECORDS``, named by its data folder). ``run`` of a
learning record or the comparison runs its pieces through the one piece runner (:mod:`harness.learning_exec`,
:mod:`harness.compare_exec`) with the options below, then writes its page; an axes record goes to ``axes.py run``,
the transfer to ``transfer.py``'s options (:mod:`harness.transfer_cli`; its pieces in :mod:`harness.transfer_exec`),
and their command lines keep working."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from harness.data import load_json
from harness.experiments import RECORDS, record
from harness.layout import DATA, LEDGER, README, RESULTS, ROOT, cell, shown
from harness.record import Record

USAGE = """python benchmarks/experiment.py status [EXPERIMENT]       # what is committed, what is left
python benchmarks/experiment.py run EXPERIMENT [ARGS...]     # run it (ARGS: run EXPERIMENT --help)
python benchmarks/experiment.py page [EXPERIMENT | all]      # the page that shows it, from committed data"""


def _short(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


def _common(ap: argparse.ArgumentParser, what: str) -> None:
    add = ap.add_argument
    add("--quick", action="store_true", help="CI-sized budgets (a smoke test of the runner, not a result)")
    add("--model", help="model alias or path (MainJobConfig.model; default the embedded 135M)")
    add("--budget-minutes", type=float,
        help=f"stop before a piece ({what}) that would not finish within this; run again to resume")
    add("--out", help="run directory (default runs/learning-<name>[-quick], runs/compare-algorithms[-quick])")
    add("--results", default=str(RESULTS), help="where the run's page and plots go (docs/results)")
    add("--ledger", default=str(LEDGER), help="the ledger every evaluation on a fixed set appends to (beside the sets)")


def run_learning(r: Record, argv: list[str]) -> int:
    """``run`` of a learning record: the main job and its controls in pieces (:mod:`harness.learning_exec`), then
    its run page (:mod:`harness.run_page`)."""
    ap = argparse.ArgumentParser(prog=f"python benchmarks/experiment.py run {r.name}",
                                 description=f"{r.title or r.name}: the main job (base -> SFT cold start -> GRPO -> "
                                             "eval) on its fixed held-out set, plus controls, in resumable pieces.")
    _common(ap, "a stage, an evaluation")
    add = ap.add_argument
    add("--minutes", type=float, help="SFT control budget in minutes (default: the GRPO stage's recorded time)")
    add("--no-control", action="store_true",
        help="skip the controls: SFT for the same time (every env), the text-only pipeline (PythonMath-v0)")
    add("--no-text-only", action="store_true",
        help="keep the SFT control but skip PythonMath-v0's text-only pipeline (it trains a second model)")
    add("--heldout", metavar="NAME", help="another committed held-out set of the env (the first sets tooluse/search/"
                                          "pythonmath only to re-derive old figures)")
    add("--data", help="where the run's committed data goes, read by the pages (default <results>/data)")
    add("--note", help="a paragraph to put in the results page (e.g. where reused stages came from)")
    add("--reuse-cold-start", metavar="DIR",
        help="start from another run directory's base evaluation, cold start and its evaluation (copied into --out, "
             "not re-run), so a variant differs from DIR only after the cold start; the page says so")
    add("--engine", choices=["vllm"],  # agentrl.algos.policy.engine.ENGINES (it imports torch)
        help="sample every evaluation and GRPO rollout through this inference server, started by the run (log "
             "<out>/vllm.log) and stopped at its end; SFT trains in process (docs/engines.md)")
    add("--engine-python", help="the engine's python (default $AGENTRL_VLLM_PYTHON, else .venv-vllm)")
    add("overrides", nargs="*", help="MainJobConfig key=value overrides (stages.rl.steps=20)")
    args = ap.parse_args(argv)
    _logging()
    from agentrl.algos.evaluation.ledger import git_state
    from agentrl.algos.run_folder import claim_run
    from agentrl.algos.training.checkpoint import RunInUse
    from harness.learning_exec import configure
    from harness.machine import machine
    from harness.run_page import write_run_page

    git_state(ROOT)  # the commit this run starts from: what its ledger rows and learning.json name
    machine()  # the machine and the load it starts under (cached: the page shows these, not the end's)
    setup = configure(r, args)
    try:
        with claim_run(setup.out):  # one writer per run folder: a second run on this --out is refused
            data = _learning_pieces(args, argv, setup)
    except RunInUse as e:
        raise SystemExit(f"experiment.py: {e}") from None
    if data is None:  # stopped by --budget-minutes: no page until every piece is finished
        return 0
    path = write_run_page(data, Path(args.results))
    if path is not None:
        print(path.read_text(encoding="utf-8"))
        print(f"written: {path}")
    return 0


def _learning_pieces(args, argv, setup):
    from harness.learning_exec import run as run_pieces

    policy = None
    if args.engine:
        from agentrl.algos.policy.engine import start_engine_policy

        cfg = setup.cfg
        policy = start_engine_policy(cfg.model, engine=args.engine, run_dir=setup.out, lora_rank=cfg.lora.r,
                                     dtype=cfg.dtype, python=args.engine_python, record_dir=setup.out)
    try:
        return run_pieces(args, argv, setup, policy)
    finally:
        if policy is not None:
            policy.close()  # also stops the server


def run_comparison(r: Record, argv: list[str]) -> int:
    """``run`` of the algorithms comparison: its cold start, runs and evaluations in pieces
    (:mod:`harness.compare_exec`), then its page and plots (:mod:`harness.compare_page`)."""
    ap = argparse.ArgumentParser(prog=f"python benchmarks/experiment.py run {r.name}",
                                 description=f"The algorithms side by side on {r.env.split('/')[-1]}: "
                                             f"{', '.join(r.algos)} from ONE cold start, in resumable pieces.")
    _common(ap, "a run, an evaluation")
    add = ap.add_argument
    add("--algos", default=",".join(r.algos),
        help=f"comma-separated, of {', '.join(r.algos)} and the options {', '.join(r.options)}")
    add("--seeds", default="0,1", help="comma-separated seeds (>= 2 for a spread)")
    add("--minutes", type=float, help=f"training wall time per run (default {r.minutes:g}; --quick 0.03)")
    add("--eval-points", default="0.5,1", help="fractions of the budget to evaluate at (1 = the end)")
    add("--max-steps", type=int, help="also stop a run after this many steps (default: time only)")
    add("--cold-start", help="an adapter folder or a main-job run dir (its sft/adapter) to start from")
    add("--heldout", help=f"held-out task file (default benchmarks/heldout/{r.heldout}.jsonl)")
    add("overrides", nargs="*", help="MainJobConfig key=value (and ppo.* / dpo.*) overrides")
    args = ap.parse_args(argv)
    _logging()
    from harness.compare_exec import run_compare
    from harness.compare_page import write_page_file
    from harness.figures import compare_plots

    summary, data = run_compare(args, argv)
    if summary is None or data is None:  # stopped by --budget-minutes: no page until every piece is finished
        return 0
    results = Path(args.results)
    compare_plots(summary, data, results / data.name)
    path = write_page_file(summary, results, data, args.quick)
    print(path.read_text(encoding="utf-8"))
    print(f"written: {path}")
    print(f"data: {data / 'compare.json'} (commit it with the page)")
    return 0


def run(r: Record, rest: list[str]) -> int:
    """Run ``r`` with its kind's runner; ``rest``: that runner's options."""
    if not r.runnable:
        raise SystemExit(f"{r.name} is kept for its data only: its declaration was replaced (see its section on "
                         f"docs/results/{r.page}); nothing runs it again")
    if r.pending:
        raise SystemExit(f"{r.name} is declared but may not run yet: {r.pending}")
    if r.kind == "learning":
        return run_learning(r, rest)
    if r.kind == "comparison":
        return run_comparison(r, rest)
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
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) >= 2 and argv[0] == "run" and not argv[1].startswith("-"):  # the rest is the runner's, all of it
        try:
            return run(record(argv[1]), argv[2:])
        except ValueError as e:
            raise SystemExit(f"experiment.py: {e}") from None
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
