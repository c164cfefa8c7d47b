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

Each experiment is an ``Experiment`` record of ``benchmarks/harness/experiments.py`` (this script is the entry point of
the ``harness`` package: ``harness.commands``). Every evaluation uses the experiment's fixed held-out set
(``Experiment.heldout``: ``tooluse_v3``, ``search_v2``, ``pythonmath_v2`` in ``benchmarks/heldout/``;
``benchmarks/heldout.py``: written before any tuning, from positions no earlier experiment evaluated, no question
text shared with the train split; ``--quick`` takes its first rows), set as ``MainJobConfig.eval_tasks_file``.
``--heldout NAME`` picks another committed set of the env — the first (v1) sets (``tooluse``, ``search``,
``pythonmath``), on which settings were chosen, to re-derive a figure measured on them, never to report a new one;
``eval_tasks_file=...`` any file.

Writes ``docs/results/learning_<env>.md`` (the table, settings, timings, the goal and the command; rendered from the
run's committed data, ``harness.run_page``), copies the
training curves and the eval bar chart into ``docs/results/<env>/`` and leaves ``<out>/learning.json`` (the
figures, command, wall time, peak RSS, machine) for the results page. A run is pieces of the one piece runner
(``harness.learning_exec``: the base model's evaluation, the cold start, GRPO, the SFT control, each evaluation,
the text-only rows): a finished piece in ``--out`` is skipped, not redone, so a killed run continues where it
stopped (a training stage from its last checkpoint), and ``--budget-minutes M`` stops before a piece that would not
fit in M minutes (run the same command again to go on; the page and data are written once every piece is done).

At the end of a run the page's raw data is copied to ``docs/results/data/<env>[_quick]/`` (``--data``): per-task
eval scores of every row (``eval/*.jsonl``), the training stages' metrics and ``learning.json`` with the commit; commit
it with the page. Every evaluation on a fixed set also appends a row to the ledger, ``benchmarks/heldout/ledger.jsonl``
(``--ledger PATH``: another file, with the sets beside it).

``--variant NAME`` runs a ``Variant`` declared in the experiment (its overrides and, if it names one, its set; an
undeclared name is refused); ``key=value`` overrides after it still apply.

``--engine vllm`` samples every evaluation and every GRPO rollout of the run (the main job's, the SFT control's eval,
the text-only baselines) through one vLLM server the run starts
(:func:`agentrl.algos.policy.engine.start_engine_policy`, its log in ``<out>/vllm.log``) and stops at exit, also on
an error; the SFT training stays in process.
``learning.json`` records ``"engine"`` (None: in process). docs/engines.md.

``--all`` runs every env's experiment and ``benchmarks/compare_algorithms.py``, each in its own process (so each
records its own peak RSS), copies the comparison's data, then regenerates ``docs/results/learning.md``
(``harness.pages``) from the committed data; ``--page`` only regenerates that page.

    python benchmarks/learning.py                              # ToolUse-v0, the main job's defaults (26 min*)
    python benchmarks/learning.py --quick                      # CI-sized budgets (a smoke test, not a result)
    python benchmarks/learning.py --env AgentRL/Search-v0      # 32 min* (32 GRPO steps of 4 x 4)
    python benchmarks/learning.py --env AgentRL/PythonMath-v0
    python benchmarks/learning.py --minutes 10                 # the SFT control's budget (default: GRPO's time)
    python benchmarks/learning.py --variant vllm --engine vllm --no-control   # rollouts and evals through vLLM
    python benchmarks/learning.py --variant guided             # a declared variant (LUFFY guidance)
    python benchmarks/learning.py --heldout tooluse            # an old figure, on the first (v1) set
    python benchmarks/learning.py key=value ...                # any MainJobConfig override (stages.rl.steps=20)
    python benchmarks/learning.py --all [--quick]              # every env + the algorithm comparison + the page
    python benchmarks/learning.py --page                       # the page from docs/results/data and the ledger

(* measured on a 2-core Xeon with AMX; each run's own time is on its results page.)
"""

import sys

from harness.commands import learning_main

if __name__ == "__main__":
    sys.exit(learning_main())
