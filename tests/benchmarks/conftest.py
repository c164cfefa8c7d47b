"""Fixtures of the harness's tests."""

from __future__ import annotations

import builtins
import inspect
import io
import os
from pathlib import Path

import pytest


@pytest.fixture
def only_export_writes(monkeypatch):
    """The one writer of committed data (issue 58): while the test runs, a file that harness code opens for
    writing, renames, replaces or removes under any folder added to the returned list fails the test unless
    ``harness/export.py`` is on the call stack (the test's own writes, with no harness frame, are its set-up).
    Creating an empty folder is not counted; ``shutil.rmtree``'s removals by directory handle are not seen."""
    import harness.export

    guarded: list[Path] = []
    writer = Path(harness.export.__file__).resolve()

    def check(path, what: str) -> None:
        if isinstance(path, int) or not guarded:
            return
        p = Path(os.fsdecode(path)).resolve()
        if not any(p == g or g in p.parents for g in guarded):
            return
        frames = {Path(f.filename).resolve() for f in inspect.stack(0)}
        if any(f.parent == writer.parent for f in frames) and writer not in frames:
            raise AssertionError(f"{what} {p}: committed data is written by harness/export.py only")

    real_open = io.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wxa+"):
            check(file, f"open(mode={mode!r})")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", guarded_open)
    monkeypatch.setattr(builtins, "open", guarded_open)
    for name, which in (("rename", -1), ("replace", -1), ("unlink", 0), ("remove", 0), ("rmdir", 0)):
        real = getattr(os, name)

        def wrapped(*args, _real=real, _name=name, _which=which, **kwargs):
            check(args[_which], _name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, wrapped)
    return guarded


@pytest.fixture(scope="module")
def stopping_model_dir(tmp_path_factory, tokenizer):
    """A tiny model that ends its replies soon (``end_scale``), saved as a folder."""
    from helpers import save_model_dir

    from agentrl.algos.models import tiny_model

    return str(save_model_dir(tmp_path_factory.mktemp("tiny"), tiny_model(tokenizer, end_scale=5.0), tokenizer))


@pytest.fixture
def small_stages() -> list[str]:
    """``MainJobConfig`` overrides that make every stage of a runner's end-to-end test a few tiny steps."""
    return ["stages.sft.sft.num_demos=2", "stages.sft.steps=1", "stages.sft.sft.batch_size=2",
            "stages.rl.collector.max_new_tokens=8", "stages.rl.collector.max_turns=2", "stages.rl.tasks_per_step=1",
            "stages.rl.group_size=2", "eval_n=1"]
