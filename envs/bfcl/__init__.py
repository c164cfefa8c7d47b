"""``AgentRL/BFCL-v0``: the Berkeley Function Calling Leaderboard (BFCL v4) as an environment, with BFCL's own data
and AST checker from the installed ``bfcl-eval`` package (``pip install --no-deps bfcl-eval==2026.3.23``).

* :mod:`agentrl.envs.bfcl.env` — :class:`~agentrl.envs.bfcl.env.BFCLEnv` (``category=``) and
  :func:`~agentrl.envs.bfcl.env.ground_truth_calls` (a task's ``possible_answer`` as calls);
* :mod:`agentrl.envs.bfcl.loading` — :func:`~agentrl.envs.bfcl.loading.load_category` (a category's rows),
  :func:`~agentrl.envs.bfcl.loading.check_calls` (BFCL's verdict on a ``model_output``), ``SINGLE_TURN``.

Importing this package does not import ``bfcl_eval``; making the env does (a one-line error names the pip
command when it is missing). See ``docs/envs/bfcl.md``.
"""
