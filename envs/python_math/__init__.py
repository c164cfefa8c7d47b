"""``AgentRL/PythonMath-v0`` (ReTool): the env (``env.py``) and its built-in problem generator
(``tasks.py``)."""
