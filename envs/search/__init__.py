"""Search-R1 style search environment and its backends (``AgentRL/Search-v0``).

Importing this package is light: bm25s, the corpus and ``requests`` load on first use.
"""
