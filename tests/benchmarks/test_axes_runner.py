"""The axes runner (benchmarks/axes.py, harness.axes_run): pieces in the one layout (a cell's folder, each of its
evaluations ``<set>-<mode>.jsonl`` beside its meta in it), skipped when finished,
redone when killed, a budget that stops before a piece it cannot finish; end to end on a tiny random model (no
learning figure is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import axes_run
from harness.axes_run import Piece, estimate, finished, parse_cells, plan, schedule, status_lines
from harness.experiments import AXES, LR_CHOICE, RUNNABLE


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_executor(clock: FakeClock, seconds: dict[str, float], calls: list[str]):
    def execute(piece: Piece, folder: Path) -> dict:
        assert folder.is_dir() and not any(folder.iterdir())  # an emptied folder
        calls.append(piece.key)
        clock.now += seconds.get(piece.kind, 10.0)
        (folder / "tasks.jsonl").write_text('{"id": "t", "score": 1.0}\n')
        return {"what": piece.key}
    return execute


def meta_of(data: Path, key: str) -> Path:
    """A finished piece's meta: a training piece's ``<folder>/meta.json``, an evaluation's ``<key>.meta.json``."""
    return data / key / "meta.json" if (data / key).is_dir() else data / f"{key}.meta.json"


def test_the_plan_is_the_declaration_in_running_order():
    pieces = plan(AXES)
    keys = [p.key for p in pieces]
    assert keys[0] == "cold_start" and keys[1] == "cold_start/train-greedy"
    # the train sample, then each set greedy and sampled, then each public benchmark set greedy only
    per_model = 1 + 2 * len(AXES.sets) + len(AXES.transfer)
    assert len(pieces) == (1 + len(AXES.arms) * len(AXES.seeds)) * (1 + per_model)
    assert Piece("sft-s1/bfcl_multiple-greedy", "eval:transfer", ("cold_start", "sft-s1")) in pieces
    assert not any(k.endswith("bfcl_multiple-sampled") for k in keys)
    assert keys.index("grpo-s0") < keys.index("sft-s0") < keys.index("grpo-s1")
    assert Piece("rft-s2/tooluse_axis_depth-sampled", "eval:sampled", ("cold_start", "rft-s2")) in pieces
    lr = plan(LR_CHOICE)  # the train-split sample only, greedy
    assert {p.kind for p in lr} == {"cold_start", "eval:train", *(f"cell:{a}" for a in LR_CHOICE.arms)}
    assert set(RUNNABLE) == {"axes", "lr_choice", "lr_edge", "edge"}


def test_cells_and_sets_are_checked_against_the_declaration():
    assert parse_cells("grpo:0, sft:2", AXES) == [("grpo", 0), ("sft", 2)]
    with pytest.raises(ValueError, match=r"'ppo:0' is not a declared .*arms grpo, sft, rft, seeds 0, 1, 2"):
        parse_cells("ppo:0", AXES)
    with pytest.raises(ValueError, match="not a declared"):
        parse_cells("grpo:7", AXES)
    with pytest.raises(ValueError, match="--sets: tooluse_v3 not declared"):
        plan(AXES, sets=["tooluse_v3"])


def test_finished_pieces_are_skipped_and_a_killed_one_is_redone(tmp_path):
    pieces = plan(AXES, [("grpo", 0)], ["tooluse_v5"])
    clock, calls = FakeClock(), []
    out = schedule(pieces, tmp_path, fake_executor(clock, {}, calls), AXES, clock=clock)
    assert out.ran == [p.key for p in pieces] == calls and not out.skipped
    meta = json.loads((tmp_path / "grpo-s0/meta.json").read_text())
    assert meta == {"key": "grpo-s0", "kind": "cell:grpo", "what": "grpo-s0", "wall_seconds": 10.0}
    assert json.loads((tmp_path / "grpo-s0/tooluse_v5-sampled.meta.json").read_text())["key"] == \
        "grpo-s0/tooluse_v5-sampled"  # an evaluation: its records in its cell's folder, its meta beside them
    assert (tmp_path / "grpo-s0/tooluse_v5-sampled.jsonl").read_text() == '{"id": "t", "score": 1.0}\n'
    # kill one piece part-way: its records without its meta (stale ones)
    (tmp_path / "grpo-s0/tooluse_v5-sampled.meta.json").unlink()
    (tmp_path / "grpo-s0/tooluse_v5-sampled.jsonl").write_text("stale")
    calls.clear()
    out = schedule(pieces, tmp_path, fake_executor(clock, {}, calls), AXES, clock=clock)
    assert calls == ["grpo-s0/tooluse_v5-sampled"] and len(out.skipped) == len(pieces) - 1
    assert (tmp_path / "grpo-s0/tooluse_v5-sampled.jsonl").read_text() == '{"id": "t", "score": 1.0}\n'
    assert (tmp_path / "grpo-s0/tooluse_v5-greedy.meta.json").is_file()  # its neighbours in the folder stay


def test_the_budget_stops_before_a_piece_that_would_not_fit_estimated_from_what_ran(tmp_path):
    pieces = plan(AXES, [("grpo", 0), ("sft", 0)], ["tooluse_v5"])
    clock, calls = FakeClock(), []
    seconds = {"cold_start": 100.0, "cell:grpo": 900.0, "cell:sft": 900.0}
    # nothing ran yet: the cold start's prior (1150 s) does not fit in 1000 s
    out = schedule(pieces, tmp_path, fake_executor(clock, seconds, calls), AXES, budget_seconds=1000, clock=clock)
    assert calls == [] and out.stopped_before == "cold_start"
    assert estimate(pieces[0], {}, AXES) == axes_run.PRIOR_SECONDS["cold_start"]
    # 2000 s: the cold start (100 s), its three evaluations (10 s each; priors 60, 80, 640 s), the grpo cell (prior
    # 960 s, took 900) and its evaluations (now estimated at 10 s) fit; 940 s are left for the sft cell's 960
    out = schedule(pieces, tmp_path, fake_executor(clock, seconds, calls), AXES, budget_seconds=2000, clock=clock)
    assert out.ran == ["cold_start", "cold_start/train-greedy", "cold_start/tooluse_v5-greedy",
                       "cold_start/tooluse_v5-sampled", "grpo-s0", "grpo-s0/train-greedy",
                       "grpo-s0/tooluse_v5-greedy", "grpo-s0/tooluse_v5-sampled"]
    assert out.stopped_before == "sft-s0"
    done = finished(tmp_path)
    # what ran now estimates its kind: the evaluations took 10 s each here, the grpo cell 900 s
    assert estimate(Piece("x", "eval:sampled"), done, AXES) == 10.0
    assert estimate(Piece("x", "cell:grpo"), done, AXES) == 900.0
    # an arm with no finished cell: the finished cells of its algorithm's other arms (LR_CHOICE: other rates)
    lr_done = {"grpo_lr2e-4-s0": {"kind": "cell:grpo_lr2e-4", "wall_seconds": 630.0}}
    assert estimate(Piece("x", "cell:grpo_lr6e-5"), lr_done, LR_CHOICE) == 630.0
    assert estimate(Piece("x", "cell:sft"), {"a": {"kind": "cell:grpo", "wall_seconds": 5.0}}, AXES) == 960.0
    lines = status_lines(AXES, tmp_path)
    assert "  done     grpo-s0 (15.0 min)" in lines and "  not run  sft-s0 (about 16.0 min)" in lines


def test_a_cell_waits_for_its_cold_start(tmp_path):
    pieces = [p for p in plan(AXES, [("grpo", 0)], []) if p.key != "cold_start"]
    clock, calls = FakeClock(), []
    out = schedule(pieces, tmp_path, fake_executor(clock, {}, calls), AXES, clock=clock)
    assert calls == [] and out.blocked == [p.key for p in pieces]


def test_end_to_end_on_a_tiny_model_resumes_without_redoing_anything(stopping_model_dir, small_stages, tmp_path, capsys,
                                                                    only_export_writes):
    from harness.axes_cli import main

    data, work = tmp_path / "data", tmp_path / "work"
    only_export_writes.append(data.resolve())  # every piece's files reach the data through harness.export alone
    args = ["run", "--model", stopping_model_dir, "--data", str(data), "--work", str(work), "--tasks", "2",
            "--minutes", "0", "--cells", "grpo:0,rft:0", "--sets", "tooluse_axis_depth,bfcl_multiple",
            "--ledger", str(tmp_path / "ledger.jsonl"), *small_stages]
    assert main(args) == 0
    done = finished(data)
    assert set(done) == {p.key for p in plan(AXES, [("grpo", 0), ("rft", 0)], ["tooluse_axis_depth", "bfcl_multiple"])}
    bfcl = done["rft-s0/bfcl_multiple-greedy"]  # a public benchmark set: its declared decoding, its checker
    assert bfcl["benchmark"] == "BFCL multiple" and bfcl["tasks"] == 2 and bfcl["collector"]["temperature"] == 0.0
    assert bfcl["collector"]["max_new_tokens"] == 256 and bfcl["packages"]["bfcl-eval"] and bfcl["ledger_id"] is None
    assert bfcl["adapter_sha256"] == done["rft-s0"]["adapter_sha256"]
    rows = [json.loads(x) for x in (data / "rft-s0/bfcl_multiple-greedy.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["multiple_0", "multiple_1"] and all(r["n"] == 1 for r in rows)
    cell = done["grpo-s0"]
    assert cell["steps"] == 1 and cell["algo"] == "grpo" and cell["commit"] and cell["machine"]
    assert cell["config"]["env_kwargs"]["families"] == list(AXES.train_families)
    assert cell["config"]["stages"]["rl"]["lr"] == 6e-5 and cell["config"]["stages"]["sft"]["env_kwargs"] == {
        "families": list(AXES.train_families)}
    assert (work / "cells/grpo-s0/adapter/adapter_config.json").is_file()
    sampled = done["grpo-s0/tooluse_axis_depth-sampled"]
    assert sampled["eval_n"] == 8 and sampled["report"]["pass_at_k"]["8"] >= sampled["report"]["pass_at_k"]["1"]
    tasks_file = data / "grpo-s0/tooluse_axis_depth-sampled.jsonl"
    rows = [json.loads(x) for x in tasks_file.read_text().splitlines()]
    assert [r["n"] for r in rows] == [8, 8]
    train = done["cold_start/train-greedy"]
    assert train["tasks"] == 2 and train["kl_to_base"]["tokens"] > 0 and train["kl_to_base"]["token_mean"] >= 0
    assert (data / "train_sample.jsonl").is_file() and (data / "setup.json").is_file()
    assert not (tmp_path / "ledger.jsonl").exists()  # --tasks: a smoke test, no ledger row
    stamps = {k: meta_of(data, k).stat().st_mtime_ns for k in done}
    capsys.readouterr()
    assert main(args) == 0
    assert "ran 0, already there" in capsys.readouterr().out
    assert {k: meta_of(data, k).stat().st_mtime_ns for k in done} == stamps
    with pytest.raises(SystemExit, match=r"other settings \(overrides, pipeline differ\); use another --data"):
        main([*args, "stages.rl.collector.max_turns=3"])
    moved = tmp_path / "moved"  # the work folder moved between sessions: the same settings
    work.rename(moved)
    assert main([*args[:6], str(moved), *args[7:]]) == 0
    # a new checkout without the work folder's cold start: trained again, kept because its bytes are the recorded ones
    import shutil

    shutil.rmtree(moved / "cold_start")
    (data / "cold_start/train-greedy.meta.json").unlink()
    capsys.readouterr()
    assert main([*args[:6], str(moved), *args[7:]]) == 0
    assert "ran 1," in capsys.readouterr().out
    assert finished(data)["cold_start/train-greedy"]["adapter_sha256"] == done["cold_start"]["adapter_sha256"]
    # ... and refused when it comes out another (here: the recorded hash changed), leaving no adapter behind
    shutil.rmtree(moved / "cold_start")
    (data / "cold_start/train-greedy.meta.json").unlink()
    meta = json.loads((data / "cold_start/meta.json").read_text())
    (data / "cold_start/meta.json").write_text(json.dumps({**meta, "adapter_sha256": "0" * 16}))
    with pytest.raises(SystemExit, match=r"trained again here is not the recorded one .*recorded 0{16}"):
        main([*args[:6], str(moved), *args[7:]])
    assert not (moved / "cold_start").exists()
    (data / "cold_start/meta.json").write_text(json.dumps(meta))
    # another run's adapter in the work folder: refused before anything is evaluated from it
    (data / "grpo-s0/train-greedy.meta.json").unlink()
    weights = next((moved / "cells/grpo-s0/adapter").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes() + b" ")
    with pytest.raises(SystemExit, match=r"grpo-s0/adapter is not the adapter the finished piece .*grpo-s0 recorded"):
        main([*args[:6], str(moved), *args[7:]])
