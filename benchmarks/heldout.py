"""Fixed held-out task sets for the learning experiments, written once, before any tuning, and committed
(``benchmarks/heldout/<name>.jsonl`` and its sidecar): how each set was drawn is in :mod:`harness.heldout`.

    python benchmarks/heldout.py write                  # (re)write every set (keeps the date of an unchanged set)
    python benchmarks/heldout.py write --only tooluse_v2 tooluse_v3 tooluse_v4 tooluse_v5 search_v2   # seconds
    python benchmarks/heldout.py write --only pythonmath_v2 pythonmath_v3 pythonmath_v4   # ~20 s: their train scan
    python benchmarks/heldout.py check                  # exit 1 when a committed set differs from its generator
"""

import sys

from harness.heldout import main

if __name__ == "__main__":
    sys.exit(main())
