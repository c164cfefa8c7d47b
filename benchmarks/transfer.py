"""The transfer experiment (declared in ``benchmarks/harness/transfer.py``): evaluate one arm on the public
benchmark sets, or write the page ``docs/results/transfer.md`` from the committed records. Its options are
:mod:`harness.transfer_cli`'s; ``python benchmarks/experiment.py run transfer ARGS`` and ``python
benchmarks/experiment.py page transfer`` do the same.

    python benchmarks/transfer.py --arm base                                  # every declared set, no adapter
    python benchmarks/transfer.py --arm main_sft --adapter runs/main/sft/adapter --trained-at <commit>
    python benchmarks/transfer.py --arm base --sets bfcl_multiple,humaneval   # some sets only
    python benchmarks/transfer.py --page                                      # docs/results/transfer.md
    python benchmarks/transfer.py --commands                                  # what to run for every arm
    python benchmarks/transfer.py --regrade-cut   # grade stored cut BFCL replies by today's rule (no sampling)
"""

import sys

from harness.transfer_cli import main

if __name__ == "__main__":
    sys.exit(main())
