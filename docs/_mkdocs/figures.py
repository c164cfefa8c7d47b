"""MkDocs hook: the results pages' figures, drawn from the committed data when the site is built.

No figure of an experiment is committed (issue 58): ``docs/results/<experiment>/<name>.png``, which the results
pages show and link, is drawn from ``docs/results/data/<experiment>/`` by the harness's own plotting code
(``benchmarks/harness/figures.py``: ``agentrl plot``'s curves, the held-out charts, the comparison and engine
figures), and ``docs/results/speed_history.png`` from ``benchmarks/speed_history.jsonl``. This hook draws them
and adds them to the site's files, so the strict build checks every link to a figure as if it were committed.

Drawn figures are kept in ``.cache/figures/<experiment>/<digest>/`` (ignored by git), keyed by the digest of the
files they are drawn from and of the drawing code: a build draws only what is missing (the first build of a
checkout draws the ~40 figures the pages show in about 20 s on 2 cores; every figure takes a few minutes).
Drawing needs matplotlib (in the ``[dev]`` extra, as the rest of the site's packages; torch is not needed).

The site stays small (issue 61: at most 10 MB): it holds the figures a page shows (``![...](x.png)``), each as a
64-colour copy of the drawn figure, and not the ~200 training-curve figures the run pages only link in their
"Plots:" lists; those links become the figure's name and say which command draws it.
``AGENTRL_ALL_FIGURES=1 mkdocs build`` puts every figure in the site instead (about 30 MB more).
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import posixpath
import re
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.figures")
#: Where drawn figures are kept between builds, relative to the checkout.
CACHE = Path(".cache") / "figures"
#: The code that draws them: a change to it redraws every figure.
CODE = ("benchmarks/harness/figures.py", "benchmarks/harness/speed.py", "algos/evaluation/plot.py")


def _harness(root: Path) -> Any:
    """``harness.figures`` of this checkout (benchmarks/ on the path, as the benchmark scripts have it)."""
    scripts = str(root / "benchmarks")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("the site draws its results figures with matplotlib: pip install -e '.[dev]'") from None
    import harness.figures

    return harness.figures


def _digest(root: Path, paths: list[Path]) -> str:
    import matplotlib

    h = hashlib.sha256(matplotlib.__version__.encode())
    for path in [*(root / c for c in CODE), *paths]:
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def draw(root: Path, wanted: set[str] | None = None, cache: Path | None = None) -> dict[str, Path]:
    """The results figures (``wanted``: just these site paths; None: every one), drawn from the committed data into
    the cache unless already there for the same inputs: the site path of each (``results/<experiment>/<name>.png``)
    -> the drawn file."""
    data, history = root / "docs" / "results" / "data", root / "benchmarks" / "speed_history.jsonl"
    if not data.is_dir() and not history.is_file():
        return {}  # a site without results (a test's own mkdocs.yml beside a page or two)
    figures = _harness(root)
    cache = cache or root / CACHE
    speed = Path(figures.SPEED_CHART)
    folders = {d.name: ("experiment", d, figures.figure_inputs(d)) for d in figures.experiment_dirs(data)}
    if history.is_file():
        folders[speed.stem] = ("speed", history, [history])
    jobs, drawn = [], {}
    for name, (kind, source, inputs) in folders.items():
        folder = cache / name / _digest(root, inputs)
        if not folder.is_dir():
            shutil.rmtree(cache / name, ignore_errors=True)  # an earlier digest's figures
            folder.mkdir(parents=True)
        prefix = "results/" if kind == "speed" else f"results/{name}/"
        need = None if wanted is None else {u.removeprefix(prefix) for u in wanted
                                            if u.startswith(prefix) and "/" not in u.removeprefix(prefix)}
        complete = (folder / ".all").is_file() or (need is not None and all((folder / n).is_file() for n in need))
        if not complete and need != set():
            dest = folder / speed.name if kind == "speed" else folder
            jobs.append(((kind, str(source), str(dest), None if need is None else sorted(need)), folder, need))
        drawn[name] = (folder, prefix)
    if jobs:
        log.info("drawing the figures of %d results folders from docs/results/data", len(jobs))
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for (_, folder, need), _paths in zip(jobs, pool.map(figures.draw_into, [j for j, _, _ in jobs]),
                                                 strict=True):
                if need is None:
                    (folder / ".all").touch()
    return {prefix + png.name: png for folder, prefix in drawn.values() for png in sorted(folder.glob("*.png"))}


#: ``![alt](target.png)`` and ``[text](target.png)`` in a page's markdown
IMAGE = re.compile(r"!\[[^\]\n]*\]\((?P<target>[^)\s]+\.png)\)")
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+\.png)\)")
#: What a figure linked but not in the site says instead (a run page's "Plots:" list).
NOT_IN_SITE = ("(these figures are not in the site: `python benchmarks/learning_page.py --figures` draws each one "
               "from the committed data into `docs/results/`)")
_ALL = "AGENTRL_ALL_FIGURES"


def compact(path: Path) -> Path:
    """A 64-colour copy of a drawn figure (about a third of its size, the same picture), made once beside it."""
    from PIL import Image

    out = path.parent / "site" / path.name
    if not out.is_file():
        out.parent.mkdir(exist_ok=True)
        with Image.open(path) as image:
            image.convert("RGB").quantize(64, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    return out


def _shown(files: Any) -> set[str]:
    """The site paths of the figures the pages show as images."""
    shown = set()
    for file in files.documentation_pages():
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        for m in IMAGE.finditer(text):
            shown.add(posixpath.normpath(posixpath.join(posixpath.dirname(file.src_uri), m.group("target"))))
    return shown


def on_files(files: Any, config: Any) -> Any:
    """Add the drawn figures the pages show to the site's files (every one with ``AGENTRL_ALL_FIGURES=1``),
    replacing a copy drawn into docs/results/ by hand."""
    root = Path(config.config_file_path).parent
    every = os.environ.get(_ALL, "") not in ("", "0")
    shown = _shown(files)
    for uri, path in draw(root, None if every else shown).items():
        if (existing := files.get_file_from_path(uri)) is not None:  # drawn by hand (ignored by git)
            files.remove(existing)
        if every or uri in shown:
            files.append(File.generated(config, uri, abs_src_path=str(path if every else compact(path))))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """A link to a results figure the site does not hold becomes the figure's name, and its line says which
    command draws it."""
    here = posixpath.dirname(page.file.src_uri)

    def missing(target: str) -> bool:
        uri = posixpath.normpath(posixpath.join(here, target))
        return uri.startswith("results/") and files.get_file_from_path(uri) is None

    out = []
    for line in markdown.split("\n"):
        changed = LINK.sub(lambda m: f"`{m.group('text')}`" if missing(m.group("target")) else m.group(0), line)
        out.append(changed if changed == line else f"{changed} {NOT_IN_SITE}")
    return "\n".join(out)
