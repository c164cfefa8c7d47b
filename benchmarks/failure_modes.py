"""How held-out episodes fail: the tools each one called and what its answer repeated, per model of a learning run.

A learning run's eval files (``<run>/eval/<label>.jsonl``: whole episodes, not committed) are summarised into one
compact row per episode, ``{"id", "family", "reward", "calls", "answer"}`` (``calls``: the tool names in order;
``answer``: ``"first"`` or ``"last"`` when the final answer repeats the first or the last tool observation,
else ``"other"``, ``null`` without a tool call), written to ``<data>/calls/<label>.jsonl`` beside the run's
committed data. The table of failed episodes (reward <= 0) by family, calls and answer is printed from those
files, so it can be re-derived from a fresh clone:

    python benchmarks/failure_modes.py --run runs/learning-tooluse-chains --data docs/results/data/tooluse_chains
    python benchmarks/failure_modes.py --data docs/results/data/tooluse_chains     # from the committed rows

Never asserts; exits 2 when there is nothing to read.
"""

import sys

from harness.failure_modes import main

if __name__ == "__main__":
    sys.exit(main())
