"""The command lines of ``benchmarks/learning.py`` and ``benchmarks/compare_algorithms.py``: run an experiment
(:mod:`harness.learning_run`, :mod:`harness.compare_run`), then write its pages from the data it committed
(:mod:`harness.run_page`, :mod:`harness.compare_page`, :mod:`harness.pages`)."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from harness.compare_page import write_page_file
from harness.compare_run import run_compare
from harness.experiments import COMPARE, EXPERIMENTS
from harness.export import export_compare
from harness.figures import compare_plots
from harness.layout import LEDGER, README, RESULTS, ROOT
from harness.learning_run import all_commands, configure, data_dir, run
from harness.pages import write_page
from harness.run_page import write_run_page

logger = logging.getLogger("learning")


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


def readme_for(args) -> Path | None:
    """README.md, whose generated results summary ``--page`` rewrites, when the page goes to docs/results."""
    return README if Path(args.results).resolve() == RESULTS.resolve() else None


def run_everything(args) -> int:
    """``--all``: each experiment in its own process (failures are reported, the rest still run), then the
    page."""
    failed = []
    for cmd in all_commands(args.quick, args.model, Path(args.runs), args.results):
        logger.info("running %s", " ".join(cmd[1:]))
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            failed.append(" ".join(cmd[1:]))
    suffix = "_quick" if args.quick else ""
    export_compare(Path(args.runs) / f"compare-algorithms{suffix.replace('_', '-')}",
                   data_dir(args) / f"compare_algorithms{suffix}")
    path = write_page(data_dir(args), Path(args.results), quick=args.quick, readme=readme_for(args))
    print(f"written: {path}")
    for cmd in failed:
        print(f"FAILED: {cmd}", file=sys.stderr)
    return 1 if failed else 0


def learning_main(argv: list[str] | None = None) -> int:
    """``benchmarks/learning.py``."""
    ap = argparse.ArgumentParser(description="Proof of learning: the main job (base -> SFT cold start -> "
                                             "GRPO -> eval) on held-out tasks, plus controls.")
    add = ap.add_argument
    add("--env", default="AgentRL/ToolUse-v0", choices=[e.env for e in EXPERIMENTS], help="environment")
    add("--quick", action="store_true", help="CI-sized budgets (a smoke test of the runner)")
    add("--all", action="store_true", help="every env, compare_algorithms.py, then docs/results/learning.md")
    add("--page", action="store_true", help="only regenerate docs/results/learning.md from committed data")
    add("--runs", default="runs", help="where --all finds the run directories (runs/)")
    add("--model", help="model alias or path (MainJobConfig.model; default the embedded 135M)")
    add("--minutes", type=float, help="SFT control budget in minutes (default: the GRPO stage's time)")
    add("--budget-minutes", type=float,
        help="stop before a piece (a stage, an evaluation) that would not finish within this; run again to resume")
    add("--no-control", action="store_true",
        help="skip the controls: SFT for the same time (every env), the text-only pipeline (PythonMath-v0)")
    add("--no-text-only", action="store_true",
        help="keep the SFT control but skip PythonMath-v0's text-only pipeline (the tool's comparison, which "
             "trains a second model)")
    add("--heldout", metavar="NAME",
        help="the env's committed held-out set to evaluate on (default: the experiment's or its variant's, "
             "benchmarks/harness/experiments.py; the first sets tooluse/search/pythonmath only to re-derive "
             "old figures)")
    add("--out", help="run directory (default runs/learning-<env>[-quick])")
    add("--results", default=str(RESULTS), help="where the markdown and plots go (docs/results)")
    add("--data", help="where the run's committed data goes, read by --page (default <results>/data)")
    add("--note", help="a paragraph to put in the results page (e.g. where reused stages came from)")
    add("--variant", metavar="NAME",
        help="a variant of the env's recipe declared in benchmarks/harness/experiments.py (its overrides and "
             "set): its own run directory, page and data (<env>_<NAME>), a section of its own on the results "
             "page, compared with the plain recipe's RL")
    add("--reuse-cold-start", metavar="DIR",
        help="start from another run directory's base evaluation, cold start and its evaluation (copied into "
             "--out; not re-run, no new ledger rows), so a variant differs from DIR only after the cold "
             "start; the page says so")
    add("--engine", choices=["vllm"],  # agentrl.algos.policy.engine.ENGINES (it imports torch; --page not)
        help="sample every evaluation and GRPO rollout through this inference server, started by the run "
             "(log <out>/vllm.log) and stopped at its end; SFT trains in process (docs/engines.md)")
    add("--engine-python", help="the engine's python (default $AGENTRL_VLLM_PYTHON, else .venv-vllm)")
    add("--ledger", default=str(LEDGER),
        help="the ledger every evaluation on a fixed set appends to (benchmarks/heldout/ledger.jsonl; the "
             "sets lie beside it)")
    ap.add_argument("overrides", nargs="*", help="MainJobConfig key=value overrides (stages.rl.steps=20)")
    args = ap.parse_args(argv)
    _logging()
    if args.all:
        if args.engine:
            raise SystemExit("--all runs every experiment in process (compare_algorithms.py has no engine); "
                             "run one env through the engine with: python benchmarks/learning.py --env ID "
                             f"--variant NAME --engine {args.engine}")
        return run_everything(args)
    if args.page:
        path = write_page(data_dir(args), Path(args.results), quick=args.quick, readme=readme_for(args))
        print(f"written: {path}")
        return 0

    from agentrl.algos.evaluation.ledger import git_state
    from harness.machine import machine

    git_state(ROOT)  # the commit this run starts from: what its ledger rows and learning.json name
    machine()  # the machine and the load it starts under (cached: the page shows these, not the end's)
    setup = configure(args)
    from agentrl.algos.run_folder import claim_run
    from agentrl.algos.training.checkpoint import RunInUse

    try:
        with claim_run(setup.out):  # one writer per run folder: a second learning run on this --out is refused
            data = _run_learning(args, argv, setup)
    except RunInUse as e:
        raise SystemExit(f"learning.py: {e}") from None
    if data is None:  # stopped by --budget-minutes: no page until every piece is finished
        return 0
    path = write_run_page(data, Path(args.results))
    print(path.read_text(encoding="utf-8"))
    print(f"written: {path}")
    return 0


def _run_learning(args, argv, setup):
    policy = None
    if args.engine:
        from agentrl.algos.policy.engine import start_engine_policy

        cfg = setup.cfg
        policy = start_engine_policy(cfg.model, engine=args.engine, run_dir=setup.out, lora_rank=cfg.lora.r,
                                     dtype=cfg.dtype, python=args.engine_python, record_dir=setup.out)
    try:
        return run(args, argv, setup, policy)
    finally:
        if policy is not None:
            policy.close()  # also stops the server


def compare_main(argv: list[str] | None = None) -> int:
    """``benchmarks/compare_algorithms.py``."""
    env = COMPARE.env.split("/")[-1]
    ap = argparse.ArgumentParser(description=f"The algorithms side by side on {env}: GRPO, PPO "
                                             "(clip-higher), online DPO and SFT-continued, from ONE cold "
                                             "start.")
    options = ", ".join(COMPARE.options)
    add = ap.add_argument
    add("--algos", default=",".join(COMPARE.algos),
        help=f"comma-separated, of {', '.join(COMPARE.algos)} and the options {options}")
    add("--seeds", default="0,1", help="comma-separated seeds (>= 2 for a spread)")
    add("--minutes", type=float, help="training wall time per run (default 10; --quick 0.03)")
    add("--eval-points", default="0.5,1", help="fractions of the budget to evaluate at (1 = the end)")
    add("--max-steps", type=int, help="also stop a run after this many steps (default: time only)")
    add("--budget-minutes", type=float,
        help="stop before a piece (a run, an evaluation) that would not finish within this; run again to resume")
    add("--cold-start", help="an adapter folder or a main-job run dir (its sft/adapter) to start from")
    add("--heldout", help="held-out task file (default benchmarks/heldout/tooluse_v3.jsonl)")
    add("--model", help="model alias or path (default: the main job's)")
    add("--quick", action="store_true", help="CI-sized settings (a smoke test, not a result)")
    add("--out", help="run directory (default runs/compare-algorithms[-quick])")
    add("--results", default=str(RESULTS), help="where the page and plots go (docs/results)")
    add("--ledger", default=str(LEDGER), help="the ledger the evaluations append to (beside the sets)")
    ap.add_argument("overrides", nargs="*", help="MainJobConfig key=value (and ppo.* / dpo.*) overrides")
    args = ap.parse_args(argv)
    _logging()
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
