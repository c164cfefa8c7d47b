"""``docs/results/learning.md``: one page of every learning result, generated only from committed data
(:mod:`harness.pages`; ``python benchmarks/learning.py --page`` does the same).

Read by it, all committed: ``docs/results/data/<experiment>/learning.json`` and ``eval/<stage>.jsonl`` (per-task
scores: task id, family, score) that ``benchmarks/learning.py`` copies there at the end of a run;
``docs/results/data/compare_algorithms/compare.json`` (``benchmarks/compare_algorithms.py`` copies it there at its
end) and each earlier comparison kept beside it (``compare_algorithms_<name>/``); the held-out sets' sidecars
``benchmarks/heldout/<name>.json``; and the ledger ``benchmarks/heldout/ledger.jsonl`` (a row per evaluation on a
fixed set, whichever command ran it).
Nothing is read from ``runs/`` (ignored by git), so a fresh clone regenerates the page byte for byte
(``tests/benchmarks/test_learning_page.py``). A section without committed data says "not run yet".

Each comparison shows both scores on the set's declared primary metric, the difference, its paired bootstrap
95% interval over tasks (``agentrl.algos.evaluation.intervals``), the verdict against the stated goal, the
command and the commit. The ledger section lists per set every configuration judged on it; a figure is
**selected** when several configurations were judged on the same set (same N and temperature) and it is the
best of them: it was chosen by looking at the set, so it is not a held-out figure.

    python benchmarks/learning_page.py                 # docs/results/learning.md from docs/results/data/
    python benchmarks/learning_page.py --quick         # learning-quick.md from the *_quick experiments
    python benchmarks/learning_page.py --figures       # every figure the pages show, into docs/results/

No figure is committed: the site's build draws them from the committed data (``docs/_mkdocs/figures.py``);
``--figures`` draws the same files into ``docs/results/`` (ignored by git) to read the pages in a checkout.
"""

import argparse
import sys
from pathlib import Path

from harness.figures import draw_all
from harness.layout import DATA, LEDGER, README, RESULTS
from harness.pages import write_page
from harness.speed import HISTORY


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA), help="the committed data (docs/results/data)")
    ap.add_argument("--ledger", default=str(LEDGER), help="the ledger (benchmarks/heldout/ledger.jsonl)")
    ap.add_argument("--results", default=str(RESULTS), help="where the page goes")
    ap.add_argument("--quick", action="store_true", help="the --quick runs' page (learning-quick.md)")
    ap.add_argument("--figures", action="store_true",
                    help="instead of the page, draw every results figure from the committed data into --results")
    args = ap.parse_args(argv)
    if args.figures:
        drawn = draw_all(Path(args.data), Path(args.results), HISTORY)
        print(f"drawn: {len(drawn)} figures into {args.results}/")
        return 0
    path = write_page(Path(args.data), Path(args.results), quick=args.quick, ledger=Path(args.ledger), readme=README)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
