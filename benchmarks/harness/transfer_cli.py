"""The command line of ``python benchmarks/experiment.py run transfer`` and ``benchmarks/transfer.py`` (the
transfer experiment, declared in :mod:`harness.transfer`): evaluate one arm on the public benchmark sets, a piece
per set through the one piece runner (:mod:`harness.transfer_exec`), or write the page ``docs/results/transfer.md``
from the committed records. The two commands take the same options.

    python benchmarks/transfer.py --arm base                                  # every declared set, no adapter
    python benchmarks/transfer.py --arm main_sft --adapter runs/main/sft/adapter --trained-at <commit>
    python benchmarks/transfer.py --arm main_grpo --adapter runs/main/grpo/adapter --trained-at <commit>
    python benchmarks/transfer.py --arm base --sets bfcl_multiple,humaneval   # some sets only
    python benchmarks/transfer.py --arm base --limit 2 --data /tmp/t          # a smoke test (not a result)
    python benchmarks/transfer.py --arm base --budget-minutes 30              # the sets that fit; again to go on
    python benchmarks/transfer.py --page                                      # docs/results/transfer.md
    python benchmarks/transfer.py --commands                                  # what to run for every arm
    python benchmarks/transfer.py --regrade-cut   # grade stored cut BFCL replies by today's rule (no sampling)

A set already measured for the arm is skipped; ``--redo`` measures it again beside the first (never over it).
Each evaluation is also a row of the ledger ``benchmarks/heldout/ledger.jsonl``.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from harness.layout import LEDGER, ROOT, shown
from harness.transfer import ARMS, SETS, TRANSFER_DATA, TRANSFER_PAGE


def commands() -> list[str]:
    """The commands that make every arm's weights and measure them, in order."""
    made_by = [a.get("made_by", "") for a in ARMS.values()]
    training = list(dict.fromkeys(m for m in made_by if m.startswith("agentrl ")))
    out = [f"{c}   # note the commit it starts from for --trained-at" for c in training]
    for name, a in ARMS.items():
        adapter = f" --adapter {a['adapter']} --trained-at <commit>" if a.get("adapter") else ""
        out.append(f"flock /tmp/torch.lock python benchmarks/transfer.py --arm {name}{adapter}")
    return [*out, "python benchmarks/transfer.py --page"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/transfer.py",
                                 description="The transfer experiment: evaluate one arm on the public benchmark "
                                             "sets, or write docs/results/transfer.md from the committed records.")
    ap.add_argument("--arm", choices=list(ARMS), help="the declared arm to evaluate")
    ap.add_argument("--adapter", help="the arm's adapter folder (every arm but base)")
    ap.add_argument("--sets", help=f"comma-separated declared sets (default: all: {', '.join(s.name for s in SETS)})")
    ap.add_argument("--trained-at", help="the commit the adapter's training run started from (recorded)")
    ap.add_argument("--model", help="model alias or folder (default: the embedded SmolLM2-135M)")
    ap.add_argument("--data", default=str(TRANSFER_DATA), help="where records go (docs/results/data/transfer)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "transfer"), help="where episodes go (runs/transfer)")
    ap.add_argument("--ledger", help="ledger file (default benchmarks/heldout/ledger.jsonl; none with --limit)")
    ap.add_argument("--limit", type=int, help="first N tasks of each set: smoke tests only (needs another --data)")
    ap.add_argument("--redo", action="store_true", help="measure a set again, kept beside the first")
    ap.add_argument("--budget-minutes", type=float,
                    help="stop before a set whose evaluation would not finish within this; run again to go on")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--page", action="store_true", help="write docs/results/transfer.md from the records in --data")
    ap.add_argument("--page-out", default=str(TRANSFER_PAGE), help="where --page writes (docs/results/transfer.md)")
    ap.add_argument("--commands", action="store_true", help="print the commands that run every arm")
    ap.add_argument("--regrade-cut", action="store_true",
                    help="grade the BFCL replies cut by the token budget in --data again, from the episodes in --out "
                         "(harness/transfer_regrade.py; nothing is sampled)")
    args = ap.parse_args(argv)
    if args.commands:
        print("\n".join(commands()))
        return 0
    if args.page:
        from harness.transfer_page import write_page

        ledger = Path(args.ledger) if args.ledger else LEDGER
        print(f"written: {shown(write_page(Path(args.data), Path(args.page_out), ledger))}")
        return 0
    if args.regrade_cut:
        from harness.transfer_regrade import regrade_cut

        command = shlex.join(["python", "benchmarks/transfer.py", *(sys.argv[1:] if argv is None else argv)])
        for name, what in regrade_cut(Path(args.data), Path(args.out), command, args.model).items():
            print(f"{name}: {what}")
        return 0
    if not args.arm:
        ap.error("--arm is required (or --page / --commands)")
    from harness.transfer_exec import Options, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    options = Options(arm=args.arm, adapter=args.adapter,
                      sets=tuple(s.strip() for s in (args.sets or "").split(",") if s.strip()),
                      model=args.model, data=Path(args.data), out=Path(args.out),
                      ledger=Path(args.ledger) if args.ledger else None, limit=args.limit, redo=args.redo,
                      trained_at=args.trained_at, device=args.device, dtype=args.dtype,
                      progress=not args.no_progress, budget_minutes=args.budget_minutes,
                      command=shlex.join(["python", "benchmarks/transfer.py", *(sys.argv[1:] if argv is None
                                                                                  else argv)]))
    from agentrl.algos.run_folder import claim_run

    try:
        with claim_run(options.out):  # one writer per run folder: a second transfer run on this --out is refused
            outcome = run(options)
    except ValueError as e:
        print(f"transfer.py: {e}", file=sys.stderr)
        return 2
    for name, what in outcome.items():
        print(f"{name}: {what}")
    return 0

