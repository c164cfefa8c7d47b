"""Docs that run: every ```python block of README.md and docs/**/*.md is executed.

A page is one session, as a reader follows it: its blocks run in order, in one fresh Python process whose
working directory is an empty temporary folder, sharing one namespace (a later block may use what an earlier
one defined). A block is skipped only when the line just above its fence is a visible marker with the reason,
``<!-- not run: needs a GPU -->``; :data:`MAX_SKIPPED` keeps such skips few. A block under
``<!-- file: NAME -->`` is the content of a file a later block uses: it is written to NAME, not run. The process
runs with
``HF_HUB_OFFLINE=1`` (no snippet may need the network) and one thread per library.

Pages whose blocks load the real 135M model (README.md, collector.md, quickstart.md, own-tools.md) are marked
``slow``, like the other tests that load it: ``python -m pytest -m slow tests/docs/test_snippets.py``. Measured on
the shared 2-core development machine: those three pages 112 s, 177 s and 65 s; every other page under 15 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
_FILE = re.compile(r"<!--\s*file:\s*(\S+)\s*-->")
#: The most blocks the docs may mark as not runnable (each with its reason on the page).
MAX_SKIPPED = 17
#: Pages known to fail, with the first failing block: strict xfail, so each must come off this list once fixed.
KNOWN_FAILING: dict[str, str] = {}

_RUNNER = r"""
import json, sys, traceback
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for where, source, file in blocks:
    if file:
        open(file, "w").write(source)
        continue
    try:
        exec(compile(source, where, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"SNIPPET FAILED: {where}", file=sys.stderr)
        sys.exit(1)
"""


def blocks(page: Path) -> list[tuple[str, str, str | None, str | None]]:
    """``(where, source, skip reason, file name)`` of each ```python block of ``page`` (``where`` is
    ``path:line``)."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        above = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip, file = _SKIP.search(above), _FILE.search(above)
        out.append((f"{page.relative_to(ROOT)}:{line + 1}", m.group(1), skip.group(1) if skip else None,
                    file.group(1) if file else None))
    return out


def test_the_docs_have_python_blocks_and_few_skips():
    found = [b for page in PAGES for b in blocks(page)]
    skipped = [(where, reason) for where, _, reason, _ in found if reason]
    assert len(found) >= 30, "the block finder lost the docs' snippets"
    assert len(skipped) <= MAX_SKIPPED, skipped


def _page_params():
    """Pages with a runnable block; a page whose blocks load the real model is ``slow`` (``-m slow``)."""
    out = []
    for page in PAGES:
        runnable = [source for _, source, reason, file in blocks(page) if reason is None and file is None]
        if not runnable:
            continue
        name = str(page.relative_to(ROOT))
        marks = [pytest.mark.slow] if any("load_model(" in s or "cli import main" in s for s in runnable) else []
        if name in KNOWN_FAILING:
            marks.append(pytest.mark.xfail(reason=KNOWN_FAILING[name], strict=True))
        out.append(pytest.param(page, id=name, marks=marks))
    return out


@pytest.mark.parametrize("page", _page_params())
def test_every_python_block_of_the_page_runs(page, tmp_path):
    runnable = [(where, source, file) for where, source, reason, file in blocks(page) if reason is None]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(runnable), capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, f"{page.relative_to(ROOT)}:\n{r.stderr[-4000:]}"
