"""MkDocs hook: what the site leaves out to stay small (issue 61: the built site at most 10 MB).

- The theme's JavaScript source maps (``assets/javascripts/**/*.js.map``, 1.3 MB): a browser asks for one only
  when its developer tools are open, to show the theme's unminified source; a reader never needs them.
- The results' raw data (``docs/results/data/``) is left out by ``exclude_docs`` in mkdocs.yml, and the results
  figures by ``docs/_mkdocs/figures.py`` (only those a page shows, as compact copies).
"""

from __future__ import annotations

from typing import Any


def on_files(files: Any, config: Any) -> Any:
    """Drop the theme's source maps from the site's files."""
    for file in [f for f in files if f.src_uri.startswith("assets/javascripts/") and f.src_uri.endswith(".js.map")]:
        files.remove(file)
    return files
