"""Run every benchmark and write ``docs/results.md``: the machine, each benchmark's table and command, the date.

Each script runs as its own subprocess (``python benchmarks/<name>.py [args]``) with its output captured; a
script that fails or runs past ``--timeout`` is reported as such and the others still run. With ``--quick``
each script gets its CI-sized arguments (its own ``--quick`` flag where it has one, fewer repetitions where it
has not; see :data:`QUICK_ARGS`). The learning results are embedded from ``docs/results/learning.md`` only: the
page ``python benchmarks/learning.py --page`` generates from committed data (per-task outputs in
``docs/results/data/``, the ledger), so every learning figure on the results page can be re-derived from the
repository. Pages written straight from a run directory (``docs/results/learning_*.md``) are never embedded (nor
the archived ones, in the repository's history since issue 58: ``docs/results/archive/`` at commit 6e899db).
``run_all`` does not run the learning jobs themselves (30+ minutes each on 2 cores): run
``python benchmarks/experiment.py run NAME`` first, commit its data, then ``--learning-only``.

    python benchmarks/run_all.py                    # full sizes (tens of minutes on 2 cores)
    python benchmarks/run_all.py --quick            # CI-sized
    python benchmarks/run_all.py --only memory train_vs_trl --out /tmp/results.md
    python benchmarks/run_all.py --full rollout_throughput memory   # full-size runs, kept beside --quick ones

``--full NAME...`` runs those scripts at their full sizes (:data:`FULL_ARGS`) and writes them into the page's
"Full-size runs" section, replacing earlier full-size runs of the same scripts and keeping the rest of the page;
a later ``--quick`` regeneration keeps that section as it is.

Never asserts; the exit status is 0 unless writing the results failed.
"""

import sys

from harness.suite import main

if __name__ == "__main__":
    sys.exit(main())
