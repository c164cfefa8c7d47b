"""Every declared experiment through one command (issue 58): ``run``, ``status`` and ``page`` of a record of
``benchmarks/harness/record.py``, named by its folder of committed data under ``docs/results/data/``.

    python benchmarks/experiment.py status                      # every experiment: what is committed, what is left
    python benchmarks/experiment.py status axes                 # one experiment (axes: each piece, time left)
    python benchmarks/experiment.py list                        # every experiment's kind, arms, seeds and sets
    python benchmarks/experiment.py run axes --budget-minutes 150     # the runner of its kind, with its options
    python benchmarks/experiment.py run tooluse --quick         # a learning run, CI-sized (a smoke test)
    python benchmarks/experiment.py run tooluse_guided          # a declared variant of ToolUse-v0's recipe
    python benchmarks/experiment.py run compare_algorithms --seeds 0,1
    python benchmarks/experiment.py run transfer --arm base
    python benchmarks/experiment.py page                        # every results page, from the committed data
    python benchmarks/experiment.py page transfer               # the page that shows one experiment

``run`` of a learning record or the comparison runs it in resumable pieces of the one piece runner (a finished piece is
skipped; ``--budget-minutes M`` stops before a piece that would not fit; ``run NAME --help`` lists its options: those
``learning.py`` and ``compare_algorithms.py`` had, which now only write pages); an axes record goes to ``axes.py run
--experiment NAME``, the transfer to ``transfer.py``, with the rest of the line.
"""

import sys

from harness.experiment_cli import main

if __name__ == "__main__":
    sys.exit(main())
