"""MkDocs hook: what the site leaves out to stay small (issue 61: the built site at most 10 MB).

- The theme's source maps (``assets/javascripts/**/*.js.map``, 1.3 MB, and ``assets/stylesheets/*.css.map``,
  49 KB): a browser asks for one only when its developer tools are open, to show the theme's unminified source; a
  reader never needs them.
- The search's language support the site does not use (``assets/javascripts/lunr/``, 0.9 MB, 677 KB of it the
  Thai word splitter ``wordcut.js``): Material's search worker loads ``lunr/min/lunr.<lang>.min.js`` (with
  ``lunr.stemmer.support``, ``lunr.multi`` for several languages, ``tinyseg.js`` for ja and ``wordcut.js`` for
  hi and th) only for the languages of the search plugin's ``lang`` (the theme's language, en, here), and
  nothing for English alone. The files of the configured languages are kept.
- The results' raw data (``docs/results/data/``) is left out by ``exclude_docs`` in mkdocs.yml, and the results
  figures by ``docs/_mkdocs/figures.py`` (only those a page shows, as compact copies).
"""

from __future__ import annotations

from typing import Any

LUNR = "assets/javascripts/lunr/"


def search_files(langs: list[str]) -> set[str]:
    """The files under ``assets/javascripts/lunr/`` Material's search worker loads for ``langs`` (its
    ``setupSearchLanguages``): none for English alone."""
    need: set[str] = set()
    for lang in langs:
        if lang == "ja":
            need.add("tinyseg.js")
        if lang in ("hi", "th"):
            need.add("wordcut.js")
        if lang != "en":
            need.add(f"min/lunr.{lang}.min.js")
    if len(langs) > 1:
        need.add("min/lunr.multi.min.js")
    if need:
        need.add("min/lunr.stemmer.support.min.js")
    return need


def _search_langs(config: Any) -> list[str] | None:
    """The search plugin's languages (Material resolves an unset ``lang`` to the theme's in its on_config),
    or None without Material's search plugin."""
    plugin = next((p for name, p in config["plugins"].items() if name.endswith("search")), None)
    lang = getattr(getattr(plugin, "config", None), "lang", None)
    return None if lang is None else [lang] if isinstance(lang, str) else list(lang)


def on_files(files: Any, config: Any) -> Any:
    """Drop the theme's source maps and the search languages the site does not use from the site's files."""
    langs = _search_langs(config)
    keep = search_files(langs) if langs is not None else None
    for file in list(files):
        uri = file.src_uri
        if uri.startswith("assets/") and uri.endswith((".js.map", ".css.map")):
            files.remove(file)
        elif keep is not None and uri.startswith(LUNR) and uri[len(LUNR):] not in keep:
            files.remove(file)
    return files
