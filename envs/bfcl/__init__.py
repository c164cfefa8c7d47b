"""``AgentRL/BFCL-v0``: the Berkeley Function Calling Leaderboard (BFCL v4) as an environment, with BFCL's own data,
executable classes and checkers from the installed ``bfcl-eval`` package (its pin and pip command:
:data:`~agentrl.envs.benchmark_packages.PACKAGES`).

* :mod:`agentrl.envs.bfcl.env` — :class:`~agentrl.envs.bfcl.env.BFCLEnv` (``category=``; the single-turn
  categories, graded by BFCL's AST checker) and :func:`~agentrl.envs.bfcl.env.ground_truth_calls` (a task's
  ``possible_answer`` as calls);
* :mod:`agentrl.envs.bfcl.multi_turn` — :class:`~agentrl.envs.bfcl.multi_turn.BFCLMultiTurnEnv` (what
  ``BFCLEnv`` makes for a multi-turn category: played turn by turn against BFCL's classes, graded by its
  multi-turn checker) and :func:`~agentrl.envs.bfcl.multi_turn.ground_truth_turns`;
* :mod:`agentrl.envs.bfcl.base` — what both share (rows, drawing and pinning tasks, BFCL's verdict in ``info``);
* :mod:`agentrl.envs.bfcl.loading` — :func:`~agentrl.envs.bfcl.loading.load_category` (a category's rows),
  :func:`~agentrl.envs.bfcl.loading.check_calls` (BFCL's single-turn verdict), ``SINGLE_TURN``, ``MULTI_TURN``.

Importing this package does not import ``bfcl_eval``; making the env does (a one-line error names the pip
command when it is missing). See ``docs/envs/bfcl.md``.
"""
