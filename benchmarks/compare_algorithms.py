"""The algorithms side by side on ToolUse-v0: GRPO, PPO (clip-higher), online DPO, SFT-continued, from ONE cold start.

``--algos`` also takes options of an algorithm as rows of their own (the arms of ``COMPARE`` marked ``option`` in
``benchmarks/harness/experiments.py``): ``grpo_turns`` is GRPO with turn credit (GiGPO's turn-level advantage,
``grpo.turn_weight=1``); ``grpo_lr6e-5`` and ``grpo_lr2e-5`` are GRPO at lower learning rates; ``grpo_guided`` and
``grpo_relift`` are GRPO with demonstration guidance (``grpo.guidance=luffy``, LUFFY; ``grpo.guidance=relift``,
ReLIFT); the page compares each with plain GRPO too.

Every run starts from the same cold-start adapter (the main job's SFT stage: made once in ``<out>/cold_start``, or
an existing one given with ``--cold-start``), trains for the SAME wall time (``Trainer.step()`` in a loop
until ``--minutes`` of training are spent; evaluation time is not counted) and is evaluated greedily on the same
fixed held-out set (``benchmarks/heldout/tooluse_v3.jsonl``, fixed before any tuning; trained with its
``env_kwargs``, ``items=999``) at a few points of its budget
(``--eval-points``, fractions of it; the cold start itself is the point at 0). Each algorithm runs once per seed
(``--seeds 0,1``); the page gives the mean and the spread (min..max) over seeds, says for each algorithm whether
it beat the cold start, and shows the metrics that explain a miss: groups with equal rewards (no signal), skipped
groups, optimizer steps, clip fractions (PPO), KL, DPO pairs and preference accuracy.

Settings shared by all runs are the main job's (``MainJobConfig``; ``key=value`` overrides, e.g.
``stages.rl.group_size=4``; ``ppo.eps_high=0.3`` / ``dpo.beta=0.2`` set those algorithms' sections). GRPO is the main
job's Dr. GRPO; PPO uses its default clip-higher range [0.8, 1.28] and two epochs per rollout batch
(``COMPARE.sections``; with one it would optimise Dr. GRPO's objective); online DPO pairs the best and worst halves of
each group against the cold-start reference; SFT-continued trains on the demonstrations of the cold start (seed
``s`` draws the demonstrations of seed ``s``; seed 0's are the cold start's own, continued from where it stopped).

It runs since issue 58 as ``python benchmarks/experiment.py run compare_algorithms [options]``, in resumable pieces
of the one piece runner (``harness.compare_exec``): the cold start, its evaluation, each (algorithm, seed) run (its
adapter saved at each evaluation point) and each evaluation; a finished piece is read back, a run killed part-way is
redone from its start (its time budget would not be comparable otherwise), and ``--budget-minutes M`` stops before a
piece that would not fit in M minutes. ``<out>`` remembers its settings (``setup.json``) and refuses an invocation
with other ones; more algorithms or seeds may be added to it.

Writes ``<out>/compare.json`` (every figure, the command, the commit, times, machine, peak RSS), the page
``docs/results/learning_compare_algorithms[_quick].md`` and its two plots in
``docs/results/compare_algorithms[_quick]/`` (held-out success against training wall time; rollout reward against
step), and copies the results page's raw data to ``docs/results/data/compare_algorithms[_quick]/`` (``compare.json``,
per-task scores and each run's metrics; commit it, then ``python benchmarks/learning.py --page``, which redraws the
plots, this page and the section from that data). A run takes about algorithms x seeds x (--minutes + set-up and
evaluations) plus the cold start: the committed ``--minutes 15 --seeds 0 --eval-points 1`` took 77.3 min for its
four algorithms on a 2-core CPU without bf16 units (fp32; its page has the machine): the cold start's 16 SFT steps
14.4 min, an evaluation of the 128 tasks about a minute, a GRPO step 6-8.5 min, PPO's two-epoch step 13.4 min, a
DPO step 3-5 min, an SFT step under a minute; there a budget of minutes holds few RL steps. A CPU with AMX runs
several times faster.

    python benchmarks/experiment.py run compare_algorithms             # 4 algorithms x 2 seeds, 10 min each
    python benchmarks/experiment.py run compare_algorithms --minutes 20 --seeds 0,1,2
    python benchmarks/experiment.py run compare_algorithms --cold-start runs/main   # a main-job run's SFT adapter
    python benchmarks/experiment.py run compare_algorithms --quick     # CI-sized (a smoke test, not a result)
    python benchmarks/compare_algorithms.py --page                     # the pages from the committed data

This script only writes the pages (``--page``, as ``learning.py --page``); with any other options it names the
command above in one line and exits with status 2.
"""

import sys

from harness.commands import compare_main

if __name__ == "__main__":
    sys.exit(compare_main())
