"""``AgentRL/Coding-v0``: the env (``env.py``), its bundled tasks (``tasks.jsonl``) and their generated stress
tests (``stress.py``). HumanEval, graded by its own package, is the ``humaneval`` package beside this one."""
