"""Every declared experiment through one command (issue 58): ``run``, ``status`` and ``page`` of a record of
``benchmarks/harness/record.py``, named by its folder of committed data under ``docs/results/data/``.

    python benchmarks/experiment.py status                      # every experiment: what is committed, what is left
    python benchmarks/experiment.py status axes                 # one experiment (axes: each piece, time left)
    python benchmarks/experiment.py list                        # every experiment's kind, arms, seeds and sets
    python benchmarks/experiment.py run axes --budget-minutes 150     # the runner of its kind, with its options
    python benchmarks/experiment.py run tooluse_guided          # learning.py --variant guided (ToolUse-v0)
    python benchmarks/experiment.py run compare_algorithms --seeds 0,1
    python benchmarks/experiment.py run transfer --arm base
    python benchmarks/experiment.py page                        # every results page, from the committed data
    python benchmarks/experiment.py page transfer               # the page that shows one experiment

``run`` passes what follows the experiment's name to the runner that serves its kind today
(``benchmarks/learning.py``, ``compare_algorithms.py``, ``axes.py run --experiment NAME``, ``transfer.py``),
whose command lines keep working.
"""

import sys

from harness.experiment_cli import main

if __name__ == "__main__":
    sys.exit(main())
