"""The pre-declared experiments on the generalisation axes (``AXES``) and of the train-split lr choice
(``LR_CHOICE``), both in ``benchmarks/harness/experiments.py``, run in resumable pieces across sessions.

``run`` trains the shared cold start once, then each (arm, seed) cell as declared, and evaluates the cold start
and every finished adapter on every declared set (greedy pass@1; 8 tries at temperature 0.7 for pass@k and
pass^k) and on a fixed train-split sample (with the mean per-token KL to the base model). An experiment that
declares an equal-updates cut (``cut_updates``, EDGE) also keeps each cell's adapter after that many
weight-changing updates and evaluates it greedily on every set (``<set>-cut-greedy``). Each piece writes into
``docs/results/data/<experiment>/`` in the one layout (a cell's folder ``<arm>-s<seed>/`` with its ``meta.json``
and training metrics; each evaluation ``<arm>-s<seed>/<set>-<mode>.jsonl`` beside its ``.meta.json``: commit,
config, machine, wall time) and is skipped when present, so a killed or budget-stopped run resumes where it
stopped; with ``--budget-minutes`` it stops cleanly before a piece it cannot finish in the time left (estimated from the
finished pieces of the same kind). Adapters stay in ``--work`` (``runs/<experiment>``, not committed): keep that
folder between sessions. ``status`` lists the pieces; ``page`` rewrites docs/results/learning.md.

    python benchmarks/axes.py status
    python benchmarks/axes.py run --budget-minutes 150                 # as much as fits, in the declared order
    python benchmarks/axes.py run --cells grpo:0,sft:0,rft:0 --budget-minutes 150
    python benchmarks/axes.py run --experiment lr_choice --cells grpo_lr2e-4:0
    python benchmarks/axes.py page                                     # then commit docs/results
"""

import sys

from harness.axes_cli import main

if __name__ == "__main__":
    sys.exit(main())
