"""``AgentRL/ToolUse-v0``, the flagship env: answer a question by calling tools.

* ``env.py`` — the env (:class:`~agentrl.envs.tool_use.env.ToolUseEnv`), its mock tools and the seeded task
  families;
* ``axes.py`` — the generalisation axes (depth, recombination, rule variants, failures) drawn from the same tools;
* ``procedural.py`` — the opt-in procedural families, each task with functions of its own;
* ``dial.py`` — the difficulty dial: decoy tools (``distractors=``), a per-call failure rate (``failure_rate=``)
  and :func:`~agentrl.envs.tool_use.dial.difficulty`, what makes a task hard.

``gym.make("AgentRL/ToolUse-v0")`` builds the env.
"""
