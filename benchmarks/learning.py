"""Proof of learning: the main job (base -> SFT cold start -> GRPO -> eval) on held-out tasks, plus controls.

For every environment this runs :func:`agentrl.algos.recipes.main_job.run_main_job` (read its docstring: base eval, a
small SFT cold start, GRPO on all of the environment's task families, eval; held-out tasks throughout, never
trained on) with a per-environment preset, then adds:

* **every env** — the same-run control: the cold-start adapter trained further with SFT on the same
  demonstrations for the same wall time as the GRPO stage (``sft_control``), in the same invocation. If RL beats
  the control, the gain is RL's, not "more training".
* **Search-v0** (offline BM25 backend) — the text-only baseline (the base model without the search tool) and EM
  per data source / Macro-EM in the table.
* **PythonMath-v0** — ReTool's comparison: the same pipeline run a second time with the tool switched off
  (``tools_enabled=False``: text-only demonstrations, SFT and GRPO with the same budgets) in ``<out>/text_only``;
  Average@4 / Pass@4 (4 samples per task at temperature 0.7), per tier and family, with the tool-use and
  self-correction rates.

Each experiment is a learning ``Record`` of ``benchmarks/harness/experiments.py`` (one per env, ``tooluse``,
``search``, ``pythonmath``, and one per declared variant, ``tooluse_guided``, ...), run since issue 58 by the one
command of every experiment, in resumable pieces (``harness.learning_exec``: the base model's evaluation, the cold
start, GRPO, the SFT control, each evaluation, the text-only rows; a finished piece is skipped, a training stage
killed part-way continues from its last checkpoint, ``--budget-minutes M`` stops before a piece that would not fit)::

    python benchmarks/experiment.py run tooluse                # ToolUse-v0, the main job's defaults (26 min*)
    python benchmarks/experiment.py run tooluse --quick        # CI-sized budgets (a smoke test, not a result)
    python benchmarks/experiment.py run search                 # Search-v0: 32 min* (32 GRPO steps of 4 x 4)
    python benchmarks/experiment.py run pythonmath
    python benchmarks/experiment.py run tooluse --minutes 10   # the SFT control's budget (default: GRPO's time)
    python benchmarks/experiment.py run tooluse_vllm --engine vllm --no-control   # rollouts and evals via vLLM
    python benchmarks/experiment.py run tooluse_guided         # a declared variant (LUFFY guidance)
    python benchmarks/experiment.py run tooluse --heldout tooluse   # an old figure, on the first (v1) set
    python benchmarks/experiment.py run tooluse key=value ...  # any MainJobConfig override (stages.rl.steps=20)
    python benchmarks/experiment.py run tooluse --help         # every option

Every evaluation uses the record's fixed held-out set (``tooluse_v3``, ``search_v2``, ``pythonmath_v2`` in
``benchmarks/heldout/``, written before any tuning; ``--quick`` takes its first rows); ``--heldout NAME`` picks
another committed set of the env (the first, burnt v1 sets only to re-derive a figure measured on them). A run writes
its page ``docs/results/learning_<name>.md``, copies its plots into ``docs/results/<name>/``, leaves
``<out>/learning.json`` (figures, command, wall time, peak RSS, machine) and copies the page's raw data to
``docs/results/data/<name>[_quick]/`` (per-task scores of every row, the stages' metrics, ``learning.json``; commit it
with the page). Every evaluation on a fixed set appends a row to ``benchmarks/heldout/ledger.jsonl`` (``--ledger``).
``--engine vllm`` samples every evaluation and GRPO rollout through one vLLM server the run starts and stops
(docs/engines.md); SFT trains in process.

This script only writes the pages from the committed data; with any other options it names the command above in one
line and exits with status 2::

    python benchmarks/learning.py --page                       # docs/results/learning.md from the committed data
    python benchmarks/learning.py --page --quick               # the --quick runs' page

(* measured on a 2-core Xeon with AMX; each run's own time is on its results page.)
"""

import sys

from harness.commands import learning_main

if __name__ == "__main__":
    sys.exit(learning_main())
