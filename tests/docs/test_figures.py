"""The results figures are drawn from committed data, not committed (issue 58): the checkout tracks almost no image
and no archive, every figure a page links is one its experiment's committed data draws (or one of the few small
tracked ones), the drawing gives the names the pages use, and the site's hook turns a linked figure the site does
not hold into its name and the command that draws it. The built site's size is checked in test_site.py."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from harness.figures import (
    ENGINE_CHART,
    EVAL_CHART,
    TEXT_CHART,
    experiment_dirs,
    experiment_figures,
    figure_names,
)
from harness.layout import DATA
from helpers import ROOT

DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")
#: What the checkout may hold in images under docs/ (today: PythonMath-v0's nine text-only curves, ~0.33 MB).
TRACKED_IMAGES_BUDGET = 2_000_000
#: The largest image one may commit there: a figure drawn from committed data is never committed.
ONE_IMAGE_LIMIT = 100_000
PNG_LINK = re.compile(r"\]\(([^)\s#]+\.png)\)")


def _tracked(*pathspec: str) -> list[Path]:
    done = subprocess.run(["git", "ls-files", "-z", "--", *pathspec], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / p for p in done.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def _hook():
    spec = importlib.util.spec_from_file_location("figures_hook", DOCS / "_mkdocs" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checkout_tracks_at_most_2_mb_of_images_under_docs_none_large_and_no_archive():
    images = [p for p in _tracked("docs") if p.suffix.lower() in IMAGES]
    sizes = {p.relative_to(ROOT).as_posix(): p.stat().st_size for p in images}
    assert sum(sizes.values()) <= TRACKED_IMAGES_BUDGET, sorted(sizes.items(), key=lambda kv: -kv[1])[:10]
    large = {p: s for p, s in sizes.items() if s > ONE_IMAGE_LIMIT}
    assert not large, f"figures are drawn from docs/results/data when the site is built, not committed: {large}"
    assert not _tracked("docs/results/archive"), "the archive lives in the history (commit 6e899db), not the tree"


def test_every_figure_a_page_links_is_drawn_from_committed_data_or_tracked():
    drawn = {f"results/{d.name}/{n}" for d in experiment_dirs(DATA) for n in figure_names(d)}
    drawn.add("results/speed_history.png")  # benchmarks/speed_history.jsonl (harness.figures.speed_figure)
    tracked = {p.relative_to(DOCS).as_posix() for p in _tracked("docs") if p.suffix == ".png"}
    missing = []
    for page in DOCS.rglob("*.md"):
        for target in PNG_LINK.findall(page.read_text(encoding="utf-8")):
            uri = (page.parent / target).resolve().relative_to(DOCS.resolve()).as_posix()
            if uri not in drawn | tracked:
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, missing
    assert len(drawn) > 200  # every stage's curves of every committed run, the charts, the comparisons


def test_the_figures_of_an_engine_run_are_drawn_from_its_committed_data_with_the_names_its_pages_use(tmp_path):
    exp_dir = DATA / "tooluse_vllm"  # an engine run: its curves, its held-out chart and the engine figure
    written = experiment_figures(exp_dir, tmp_path)
    names = [p.name for p in written]
    assert sorted(names) == sorted(figure_names(exp_dir))
    assert {EVAL_CHART, ENGINE_CHART, "grpo_reward.png", "sft_train.png"} <= set(names)
    assert TEXT_CHART not in names  # no text-only pipeline in this run
    page = (RESULTS / "learning_tooluse_vllm.md").read_text(encoding="utf-8")
    linked = {Path(t).name for t in PNG_LINK.findall(page)}
    assert linked and linked <= set(names)
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_the_hook_draws_just_the_figures_a_page_shows_the_same_bytes_as_all_of_them_and_caches_them(tmp_path):
    hook = _hook()
    wanted = {"results/tooluse_vllm/grpo_reward.png", "results/tooluse_vllm/eval_eval_comparison.png",
              "results/speed_history.png"}
    drawn = hook.draw(ROOT, wanted, cache=tmp_path / "cache")
    assert wanted <= set(drawn) and not any(u.startswith("results/tooluse/") for u in drawn)
    assert {u for u in drawn if u.startswith("results/tooluse_vllm/")} == wanted - {"results/speed_history.png"}
    every = {p.name: p.read_bytes() for p in experiment_figures(DATA / "tooluse_vllm", tmp_path / "all")}
    for uri in wanted - {"results/speed_history.png"}:
        assert drawn[uri].read_bytes() == every[Path(uri).name], uri  # a group alone: the same figure
    stamp = {u: p.stat().st_mtime_ns for u, p in drawn.items()}
    assert {u: p.stat().st_mtime_ns for u, p in hook.draw(ROOT, wanted, cache=tmp_path / "cache").items()} == stamp


def test_figure_names_are_the_files_plot_run_writes(tmp_path):
    from agentrl.algos.evaluation.plot import figure_names as stage_names
    from agentrl.algos.evaluation.plot import plot_run

    run = tmp_path / "grpo"
    run.mkdir()
    # 14 panels in the "train" group: two files (train.png, train_2.png); one in "reward"
    rows = [{"step": s, "reward/mean": s / 4, **{f"train/m{i}": float(i * s) for i in range(14)}} for s in range(1, 5)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert sorted(p.name for p in plot_run(run)) == sorted(stage_names(rows)) == ["reward.png", "train.png",
                                                                                  "train_2.png"]


def test_the_hook_unlinks_a_figure_the_site_does_not_hold_and_names_the_command():
    hook = _hook()
    held = {"results/run/eval_eval_comparison.png"}
    files = SimpleNamespace(get_file_from_path=lambda uri: object() if uri in held else None)
    page = SimpleNamespace(file=SimpleNamespace(src_uri="results/learning_run.md"))
    text = ("Plots: [grpo_env.png](run/grpo_env.png), [eval_eval_comparison.png](run/eval_eval_comparison.png)\n\n"
            "![held-out results](run/eval_eval_comparison.png)\n\nSee [the page](learning.md).")
    out = hook.on_page_markdown(text, page, None, files).splitlines()
    assert out[0] == ("Plots: `grpo_env.png`, [eval_eval_comparison.png](run/eval_eval_comparison.png) "
                      + hook.NOT_IN_SITE)
    assert out[1:] == text.splitlines()[1:]  # images and other links untouched
    assert "learning_page.py --figures" in hook.NOT_IN_SITE


@pytest.mark.parametrize("every", ["", "1"])
def test_the_hook_adds_the_shown_figures_or_every_one(tmp_path, monkeypatch, every):
    hook = _hook()
    drawn = tmp_path / "cache"
    drawn.mkdir()
    for name in ("eval_eval_comparison.png", "grpo_env.png"):
        (drawn / name).write_bytes((RESULTS / "pythonmath" / "text_only_sft_perf.png").read_bytes())
    monkeypatch.setattr(hook, "draw", lambda root, wanted: {f"results/run/{p.name}": p for p in drawn.glob("*.png")
                                                           if wanted is None or f"results/run/{p.name}" in wanted})
    monkeypatch.setenv("AGENTRL_ALL_FIGURES", every)
    page = tmp_path / "learning_run.md"
    page.write_text("![chart](run/eval_eval_comparison.png)\n", encoding="utf-8")

    class Files(list):
        def documentation_pages(self):
            return [SimpleNamespace(abs_src_path=str(page), src_uri="results/learning_run.md")]

        def get_file_from_path(self, uri):
            return None

    monkeypatch.setattr(hook.File, "generated", staticmethod(lambda config, uri, abs_src_path: (uri, abs_src_path)))
    files = hook.on_files(Files(), SimpleNamespace(config_file_path=str(ROOT / "mkdocs.yml")))
    added = dict(files)
    if every:
        assert set(added) == {"results/run/eval_eval_comparison.png", "results/run/grpo_env.png"}
    else:
        assert set(added) == {"results/run/eval_eval_comparison.png"}  # the one a page shows, compact
        assert Path(added["results/run/eval_eval_comparison.png"]).parent.name == "site"
