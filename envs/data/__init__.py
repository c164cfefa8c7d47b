"""Bundled data files (read with importlib.resources)."""
