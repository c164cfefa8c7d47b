"""The equal-updates cut in the axes runner (issue 59 part 5; ``Record.cut_updates``): each cell keeps its
adapter after its U-th weight-changing update (its final one when it made fewer) and new pieces evaluate it greedily
on every set; experiments without a cut plan what they planned before. End to end on a tiny random model (no
learning figure is asserted)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import MappingProxyType

import pytest
from harness import axes_run
from harness.axes_run import CUT, Piece, estimate, finished, is_update, plan, schedule, status_lines
from harness.experiments import AXES, EDGE, LR_CHOICE, LR_EDGE

#: sha256 (first 16 hex) of ``[[key, kind, needs], ...]`` of the finished experiments' plans as the runner made them
#: before the cut existed (computed from the runner at 8b5ce4e): without ``cut_updates`` they plan exactly those.
PLANS_BEFORE = {"axes": (170, "4eb99274c9bc7e7d"), "lr_choice": (20, "1a78ecee157c6c8d")}
CUT_AXES = dataclasses.replace(AXES, name="axes_cut", cut_updates=2)


def digest(pieces: list[Piece]) -> str:
    return hashlib.sha256(json.dumps([[p.key, p.kind, list(p.needs)] for p in pieces]).encode()).hexdigest()[:16]


@pytest.mark.parametrize("exp", [AXES, LR_CHOICE], ids=lambda e: e.name)
def test_an_experiment_without_a_cut_plans_what_it_planned_before(exp):
    assert exp.cut_updates is None
    pieces = plan(exp)
    assert (len(pieces), digest(pieces)) == PLANS_BEFORE[exp.name]


@pytest.mark.parametrize("exp", [AXES, LR_CHOICE, LR_EDGE], ids=lambda e: e.name)
def test_only_a_declared_cut_adds_pieces_and_only_cut_ones(exp):
    pieces = plan(exp)
    assert not any(CUT in p.key or p.kind.startswith("eval:cut-") for p in pieces)
    with_cut = plan(dataclasses.replace(exp, cut_updates=1))
    assert [p for p in with_cut if not p.kind.startswith("eval:cut-")] == pieces
    assert len(with_cut) - len(pieces) == len(exp.arms) * len(exp.seeds) * (1 + len(exp.sets) + len(exp.transfer))


def test_each_cell_is_followed_by_its_evaluations_then_its_cuts_greedy_on_every_set():
    pieces = plan(EDGE)
    keys = [p.key for p in pieces]
    sets = ["train", *EDGE.sets, *EDGE.transfer]
    cells = [f"{a}-s{s}" for s in EDGE.seeds for a in EDGE.arms]
    assert len(pieces) == len(plan(dataclasses.replace(EDGE, cut_updates=None))) + len(cells) * len(sets)
    for cell in cells:
        cut = [p for p in pieces if p.key.startswith(f"{cell}/") and p.key.endswith(f"-{CUT}")]
        assert [p.key for p in cut] == [f"{cell}/{s}-{CUT}" for s in sets]
        assert all(p.needs == ("cold_start", cell) for p in cut)
        assert {p.kind for p in cut} == {"eval:cut-train", "eval:cut-greedy", "eval:cut-transfer"}
        assert [p.kind for p in cut if p.kind == "eval:cut-transfer"] == ["eval:cut-transfer"] * len(EDGE.transfer)
        # after the cell's own evaluations, before the next cell
        own = [k for k in keys if k.startswith(f"{cell}/") and not k.endswith(CUT)]
        assert max(keys.index(k) for k in own) < keys.index(cut[0].key) == keys.index(cell) + len(own) + 1
    assert not any(k.startswith("cold_start/") and k.endswith(CUT) for k in keys)  # the cold start has no cut
    assert not any("sampled" in k for k in keys if k.endswith(CUT))
    # a selection of sets selects the cut's sets too
    some = plan(EDGE, [("sft", 1)], ["tooluse_v5"])
    assert [p.key for p in some if p.key.endswith(CUT)] == ["sft-s1/train-cut-greedy", "sft-s1/tooluse_v5-cut-greedy"]


def test_a_weight_changing_update_is_a_step_with_an_optimizer_step():
    assert is_update({"train/optimizer_steps": 1, "train/groups": 8, "train/skipped_groups": 7})
    assert not is_update({"train/optimizer_steps": 0, "train/groups": 8, "train/skipped_groups": 8})
    assert not is_update({})
    # AXES's committed GRPO seed 0: 78 steps, 20 of them changed the weights (RESULTS-AUDIT: 20 / 25 / 14)
    data = Path(__file__).resolve().parents[2] / "docs/results/data/axes/grpo-s0/metrics.jsonl"
    steps = [json.loads(line) for line in data.read_text().splitlines()]
    assert (len(steps), sum(map(is_update, steps))) == (78, 20)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_executor(clock: FakeClock, calls: list[str], seconds: float = 10.0):
    def execute(piece: Piece, folder: Path) -> dict:
        assert folder.is_dir() and not any(folder.iterdir())
        calls.append(piece.key)
        clock.now += seconds
        (folder / "tasks.jsonl").write_text(json.dumps({"id": "t", "score": 1.0, "of": piece.key}) + "\n")
        return {"what": piece.key}
    return execute


def test_cut_pieces_wait_for_their_cell_are_skipped_when_present_and_redone_when_killed(tmp_path):
    pieces = plan(CUT_AXES, [("grpo", 0)], ["tooluse_v5"])
    cut_keys = ["grpo-s0/train-cut-greedy", "grpo-s0/tooluse_v5-cut-greedy"]
    clock, calls = FakeClock(), []
    without_cell = [p for p in pieces if p.key != "grpo-s0"]
    out = schedule(without_cell, tmp_path, fake_executor(clock, calls), CUT_AXES, clock=clock)
    assert set(cut_keys) <= set(out.blocked) and not set(cut_keys) & set(calls)
    out = schedule(pieces, tmp_path, fake_executor(clock, calls), CUT_AXES, clock=clock)
    assert out.ran[-2:] == cut_keys and out.ran[0] == "grpo-s0"
    meta = json.loads((tmp_path / "grpo-s0/tooluse_v5-cut-greedy.meta.json").read_text())
    assert meta["kind"] == "eval:cut-greedy" and meta["key"] == "grpo-s0/tooluse_v5-cut-greedy"
    assert json.loads((tmp_path / "grpo-s0/tooluse_v5-cut-greedy.jsonl").read_text())["of"] == meta["key"]
    lines = status_lines(CUT_AXES, tmp_path)
    assert "  done     grpo-s0/tooluse_v5-cut-greedy (0.2 min)" in lines
    assert any(line.startswith("  not run  sft-s0/tooluse_axis_depth-cut-greedy") for line in lines)
    calls.clear()  # killed: records without a meta
    (tmp_path / "grpo-s0/train-cut-greedy.meta.json").unlink()
    (tmp_path / "grpo-s0/train-cut-greedy.jsonl").write_text("stale")
    out = schedule(pieces, tmp_path, fake_executor(clock, calls), CUT_AXES, clock=clock)
    assert calls == ["grpo-s0/train-cut-greedy"] and len(out.skipped) == len(pieces) - 1
    assert "stale" not in (tmp_path / "grpo-s0/train-cut-greedy.jsonl").read_text()


def test_a_cut_is_estimated_as_the_final_adapters_evaluation_until_one_of_its_kind_ran():
    piece = Piece("sft-s0/tooluse_v5-cut-greedy", "eval:cut-greedy")
    assert estimate(piece, {}, CUT_AXES) == axes_run.PRIOR_SECONDS["eval:greedy"]
    assert estimate(Piece("x", "eval:cut-transfer"), {}, CUT_AXES) == axes_run.PRIOR_SECONDS["eval:transfer"]
    done = {"a": {"kind": "eval:greedy", "wall_seconds": 50.0}}
    assert estimate(piece, done, CUT_AXES) == 50.0
    # a copy of the final adapter's records (the cut was the final adapter) took no time: it estimates nothing
    done["b"] = {"kind": "eval:cut-greedy", "wall_seconds": 0.1, "same_as": "grpo-s0/tooluse_v5-greedy"}
    assert estimate(piece, done, CUT_AXES) == 50.0
    done["c"] = {"kind": "eval:cut-greedy", "wall_seconds": 70.0}
    assert estimate(piece, done, CUT_AXES) == 70.0


def test_the_page_shows_each_arm_at_the_cut_and_judges_the_cut_apart(tmp_path):
    from harness.axes_page import axes_section, label

    def write(key: str, meta: dict, scores: list[float] | None = None) -> None:
        path = tmp_path / key / "meta.json" if scores is None else tmp_path / f"{key}.meta.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, **meta}))
        if scores is not None:
            (tmp_path / f"{key}.jsonl").write_text("".join(json.dumps({"id": f"t{i}", "score": x}) + "\n"
                                                           for i, x in enumerate(scores)))

    write("cold_start", {"steps": 48, "train_seconds": 600})
    write("cold_start/tooluse_v5-greedy", {}, [0.5] * 20)
    write("grpo-s0", {"steps": 9, "train_seconds": 900, "cut": {"updates": 2, "cell_updates": 1, "step": 9,
                                                                 "train_seconds": 900, "final": True}})
    write("sft-s0", {"steps": 80, "train_seconds": 900, "cut": {"updates": 2, "cell_updates": 80, "step": 2,
                                                                "train_seconds": 24, "final": False}})
    for cell, final, cut in (("grpo-s0", 0.6, 0.6), ("sft-s0", 0.4, 0.0)):
        write(f"{cell}/tooluse_v5-greedy", {}, [final] * 20)
        write(f"{cell}/tooluse_v5-{CUT}", {}, [cut] * 20)
    text = "\n".join(axes_section(tmp_path, CUT_AXES))
    grpo, sft = label("grpo"), label("sft")
    assert f"| {grpo} | 9 steps, 15.0 min; 1 updates, cut = final | not run | not run |" in text
    assert f"| {sft} | 80 steps, 15.0 min; cut at step 2 (0.4 min) | not run | not run |" in text
    assert f"| {grpo} at the cut (2 updates) | 60.0 / not run / not run | 60.0 (1 seed) | – | – |" in text
    assert f"| {sft} at the cut (2 updates) | 0.0 / not run / not run | 0.0 (1 seed) | – | – |" in text
    assert f"| {grpo} vs {sft} | 60.0 | 40.0 | +20.0" in text  # the wall-clock reading
    assert f"| {grpo} at the cut (2 updates) vs {sft} at the cut (2 updates) | 60.0 | 0.0 | +60.0" in text
    assert f"| {grpo} at the cut (2 updates) vs cold start" not in text  # the cut is read against the other arms
    assert "at the cut" not in "\n".join(axes_section(tmp_path, dataclasses.replace(CUT_AXES, cut_updates=None)))


#: AXES with a cut after 1 update in cells of 2 steps, greedy only (a smoke test of the mechanics, not a result).
TINY = dataclasses.replace(AXES, name="tiny_cut", minutes=0.0, steps=2, cut_updates=1,
                           sampled=MappingProxyType({}))


def test_end_to_end_a_cell_saves_its_cut_and_the_cut_is_evaluated(stopping_model_dir, small_stages, tmp_path, capsys,
                                                                  monkeypatch, only_export_writes):
    from harness import axes_cli
    from harness.axes_cli import main

    from agentrl.algos.evaluation.ledger import adapter_sha256

    monkeypatch.setattr(axes_run, "RUNNABLE", {TINY.name: TINY})
    monkeypatch.setattr(axes_cli, "RUNNABLE", {TINY.name: TINY})
    data, work = tmp_path / "data", tmp_path / "work"
    only_export_writes.append(data.resolve())
    args = ["run", "--experiment", TINY.name, "--model", stopping_model_dir, "--data", str(data), "--work", str(work),
            "--tasks", "2", "--cells", "sft:0,grpo:0", "--sets", "tooluse_axis_depth,bfcl_multiple",
            "--ledger", str(tmp_path / "ledger.jsonl"), *small_stages]
    assert main(args) == 0
    done = finished(data)
    assert set(done) == {p.key for p in plan(TINY, [("sft", 0), ("grpo", 0)], ["tooluse_axis_depth", "bfcl_multiple"])}
    for cell in ("sft-s0", "grpo-s0"):
        meta, cut = done[cell], done[cell]["cut"]
        steps = [json.loads(x) for x in (data / cell / "metrics.jsonl").read_text().splitlines()]
        updates = [i + 1 for i, m in enumerate(steps) if is_update(m)]  # the steps that changed the weights
        assert meta["steps"] == 2 and cut["updates"] == 1 and cut["cell_updates"] == len(updates)
        assert cut["final"] is (not updates)
        assert cut["step"] == (updates[0] if updates else 2) and 0 < cut["train_seconds"] <= meta["train_seconds"]
        assert cut["adapter_sha256"] == adapter_sha256(work / "cells" / cell / "adapter_cut")
        assert meta["adapter_sha256"] == adapter_sha256(work / "cells" / cell / "adapter")
        for s in ("train", "tooluse_axis_depth", "bfcl_multiple"):
            ev = done[f"{cell}/{s}-{CUT}"]
            assert ev["adapter_sha256"] == cut["adapter_sha256"] and ev["mode"] == CUT
            assert ev.get("same_as") == (f"{cell}/{s}-greedy" if cut["adapter_sha256"] == meta["adapter_sha256"]
                                         else None)
    sft = done["sft-s0"]["cut"]  # every SFT step updates: the cut is step 1's adapter, not the final (step 2's)
    assert sft["step"] == 1 and not sft["final"] and sft["adapter_sha256"] != done["sft-s0"]["adapter_sha256"]
    assert "same_as" not in done[f"sft-s0/bfcl_multiple-{CUT}"]
    bfcl = done[f"sft-s0/bfcl_multiple-{CUT}"]
    assert bfcl["benchmark"] == "BFCL multiple" and bfcl["tasks"] == 2 and bfcl["collector"]["temperature"] == 0.0
    train = done[f"sft-s0/train-{CUT}"]
    assert train["tasks"] == 2 and train["temperature"] == 0.0 and train["kl_to_base"]["tokens"] > 0
    assert [json.loads(x)["id"] for x in (data / f"sft-s0/tooluse_axis_depth-{CUT}.jsonl").read_text().splitlines()] \
        == [json.loads(x)["id"] for x in (data / "sft-s0/tooluse_axis_depth-greedy.jsonl").read_text().splitlines()]
    # resumed: nothing redone; a killed cut evaluation alone is redone, from the cut adapter
    stamps = {k: (data / k / "meta.json" if (data / k).is_dir() else data / f"{k}.meta.json").stat().st_mtime_ns
              for k in done}
    (data / f"sft-s0/tooluse_axis_depth-{CUT}.meta.json").unlink()
    capsys.readouterr()
    assert main(args) == 0
    assert "ran 1, already there" in capsys.readouterr().out
    again = finished(data)
    assert again[f"sft-s0/tooluse_axis_depth-{CUT}"]["adapter_sha256"] == sft["adapter_sha256"]
    assert {k: (data / k / "meta.json" if (data / k).is_dir() else data / f"{k}.meta.json").stat().st_mtime_ns
            for k in done if k != f"sft-s0/tooluse_axis_depth-{CUT}"} == \
        {k: v for k, v in stamps.items() if k != f"sft-s0/tooluse_axis_depth-{CUT}"}
    # another run's cut adapter in the work folder: refused before it is evaluated
    (data / f"sft-s0/train-{CUT}.meta.json").unlink()
    weights = next((work / "cells/sft-s0/adapter_cut").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes() + b" ")
    with pytest.raises(SystemExit, match=r"adapter_cut is not the equal-updates cut adapter the finished piece"):
        main(args)
