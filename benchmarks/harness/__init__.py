"""The learning harness: the experiments of ``docs/results/learning.md``, declared once, run, and rendered
from committed data.

Layers, lowest first (``tests/test_architecture.py`` checks them); a module imports only from its own layer or
lower ones:

1. :mod:`harness.layout` (where the checkout keeps things), :mod:`harness.experiments` and
   :mod:`harness.transfer` (the declarations: env, fixed sets, overrides, variants, comparisons with their goals,
   page section), :mod:`harness.record` (every experiment as one ``Record``, by its data folder: recipe, arms x
   seeds, sets and decoding, judge, and the notes its page carries);
2. :mod:`harness.heldout_draw`, :mod:`harness.heldout` (the fixed held-out sets), :mod:`harness.machine`;
3. :mod:`harness.data` (the one reader of committed data and the ledger), :mod:`harness.export` (the runners'
   writer of that data), :mod:`harness.speed` (the speed history: its reader, writer and table);
4. runners: :mod:`harness.axes_run` (the one piece runner: a piece per cell / evaluation, skipped when finished,
   a budget) with each kind's pieces, their work and their record, :mod:`harness.axes_exec`,
   :mod:`harness.learning_exec`, :mod:`harness.compare_exec`, :mod:`harness.transfer_exec`; :mod:`harness.controls`,
   :mod:`harness.suite`, :mod:`harness.failure_modes`; renderers: :mod:`harness.tables`,
   :mod:`harness.figures`, :mod:`harness.compare_page`, :mod:`harness.run_page`, :mod:`harness.results_page`,
   :mod:`harness.pages`. A runner never imports a renderer, a renderer never imports a runner;
5. :mod:`harness.experiment_cli`, ``benchmarks/experiment.py run|status|page EXPERIMENT``: any record through
   the runner and page of its kind; :mod:`harness.commands`, the pages of ``benchmarks/learning.py --page`` and
   ``benchmarks/compare_algorithms.py --page``; :mod:`harness.axes_cli`, :mod:`harness.transfer_cli`
   (``axes.py``, ``transfer.py``).

The scripts in ``benchmarks/`` are thin entry points: ``python benchmarks/experiment.py`` has ``benchmarks/`` as
``sys.path[0]``, so ``harness`` imports as a package; tests get it from pytest's ``pythonpath``.
"""
