"""Search-R1 style search environment and its backends (AgentRL/Search-v0)."""
