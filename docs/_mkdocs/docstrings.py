"""Griffe extension for the API pages: docstrings written for ``help()`` and the code host, read as Markdown.

Two reStructuredText habits of the code's docstrings would show raw on the site:

* Sphinx roles (``:class:`TrainConfig```, ``:func:`~agentrl.envs.make_text_env```) become inline code
  (``TrainConfig``, ``make_text_env``: the ``~`` form keeps the last dotted part, as Sphinx shows it);
* doctest examples (lines from ``>>> `` to the next blank line) become ``pycon`` code blocks, so their
  brackets are not read as Markdown links;
* a definition list (a line, then lines indented under it) becomes the term in bold and its body
  dedented, so the body's paragraphs and lists are not read as an indented code block. Google sections
  (``Args:``), list items and literal blocks (after ``::``, which becomes ``:``) are left as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

from agentrl.algos.config_reference import sphinx_roles_to_markdown


def _fence_doctests(text: str) -> str:
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if not stripped.startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(stripped)]
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        if out and out[-1].strip():
            out.append("")
        out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"]
    return "\n".join(out)


SECTION = re.compile(r"^[A-Z][\w ]*:\s*$")  # Args:, Returns:, Raises:, Example:, ...
ITEM = re.compile(r"^([*+-]|\d+[.)])\s")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _dedent_definitions(text: str) -> str:
    lines, out, i, fenced = text.split("\n"), [], 0, False
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.lstrip().startswith("```"):
            fenced = not fenced
        term = line.strip()
        if not fenced and term.endswith("::"):
            out[-1] = line.rstrip()[:-1]  # reST's "::" before a literal block: one colon (the block stays code)
        if (fenced or not term or _indent(line) or SECTION.match(term) or ITEM.match(term) or term.endswith("::")
                or i >= len(lines) or not lines[i].strip() or not _indent(lines[i])):
            continue
        end = i
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end])):
            end += 1
        while end > i and not lines[end - 1].strip():
            end -= 1
        body = lines[i:end]
        cut = min(_indent(b) for b in body if b.strip())
        out[-1] = f"**{term}**"
        out += ["", *(b[cut:] for b in body)]
        i = end
        if i < len(lines) and lines[i].strip():
            out.append("")  # the next term starts a paragraph of its own
    return "\n".join(out)


class MarkdownDocstrings(griffe.Extension):
    """Rewrite each docstring once it is loaded (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _dedent_definitions(_fence_doctests(sphinx_roles_to_markdown(obj.docstring.value)))
