"""MkDocs hook: links from a page to the repository's own files (``../algos/rollout/collector.py``).

The pages are written to be read on a code host as well as on the site, so they link to source files, tests and
CHANGELOG.md outside ``docs/``. MkDocs only knows the files under ``docs/`` and warns on every such link. This
hook checks each link that leaves ``docs/`` against the checkout: a target that exists becomes a link to it on the
code host when ``repo_url`` is set in mkdocs.yml (``<repo_url>/blob/<branch>/<path>``), else the link's text; a
target that does not exist is left alone, so MkDocs reports it and ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

#: ``[text](target)`` (not an image); the target without spaces, an optional "title" after it
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
BRANCH = "main"


def _rewrite(match: re.Match[str], page_dir: str, root: Path, repo_url: str) -> str:
    target = match.group("target")
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith(("/", "#")):
        return match.group(0)
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join("docs", page_dir, path))
    if resolved == "docs" or resolved.startswith("docs/") or resolved.startswith(".."):
        return match.group(0)  # a page of the site (MkDocs checks it), or outside the checkout
    if not (root / resolved).exists():
        return match.group(0)  # broken: MkDocs warns, the strict build fails
    if not repo_url:
        return match.group("text")
    kind = "tree" if (root / resolved).is_dir() else "blob"
    url = f"{repo_url.rstrip('/')}/{kind}/{BRANCH}/{resolved}" + (f"#{anchor}" if anchor else "")
    return f"[{match.group('text')}]({url}{match.group('title') or ''})"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite the links of one page that point into the checkout outside ``docs/`` (code blocks untouched)."""
    root = Path(config.config_file_path).parent
    page_dir = posixpath.dirname(page.file.src_uri)
    repo_url = config.repo_url or ""
    out, last = [], 0
    for fence in FENCE.finditer(markdown):
        prose = markdown[last:fence.start()]
        out.append(LINK.sub(lambda m: _rewrite(m, page_dir, root, repo_url), prose))
        out.append(fence.group(0))
        last = fence.end()
    out.append(LINK.sub(lambda m: _rewrite(m, page_dir, root, repo_url), markdown[last:]))
    return "".join(out)


def on_config(config: Any) -> Any:
    """Without a code host (no ``repo_url``: mkdocs.yml reads it from ``AGENTRL_REPO_URL``) pages get no edit
    button: ``edit_uri`` is relative to the host and means nothing alone."""
    if not config.repo_url:
        config.edit_uri = None
    return config
