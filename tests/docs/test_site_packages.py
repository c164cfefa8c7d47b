"""The documentation site builds with the ``[dev]`` extra alone (issue 61): the figures hook
(docs/_mkdocs/figures.py) draws the results figures with matplotlib, which ``[dev]`` lists, and never needs torch
or the other ``[train]`` packages. The build itself is checked by test_site.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def test_the_dev_extra_holds_what_the_site_build_imports():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dev = project["optional-dependencies"]["dev"]
    names = {Requirement(line).name for line in dev}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings", "mkdocs-awesome-nav", "matplotlib"} <= names, names


def test_the_figures_hook_draws_without_the_train_packages(tmp_path):
    """A figure a results page shows and the speed history's chart, drawn as the hook's workers draw them, in a
    process where torch, transformers, peft, accelerate and trl cannot be imported."""
    code = textwrap.dedent(f"""
        import sys
        for name in ("torch", "transformers", "peft", "accelerate", "trl"):
            sys.modules[name] = None  # an import of it fails
        sys.path.insert(0, "benchmarks")
        from harness.figures import draw_into
        print(draw_into(("experiment", "docs/results/data/tooluse", {str(tmp_path)!r}, ["eval_eval_comparison.png"])))
        print(draw_into(("speed", "benchmarks/speed_history.jsonl", {str(tmp_path / "speed.png")!r}, None)))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("eval_eval_comparison.png", "speed.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG", name
