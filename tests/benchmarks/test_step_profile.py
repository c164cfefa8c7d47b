"""``benchmarks/step_profile.py``: one GRPO step of a tiny shape, split into phases that account for its wall time.

No timing targets: what is checked is that every phase is found (a wrapper that stops matching the library's
calls leaves its phase at zero calls and fails here), that the phases add up to the step, and that the FLOP
counts hang together."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import step_profile  # noqa: E402  (benchmarks/ is on pytest's pythonpath)

TINY = ["--tiny", "--tasks", "2", "--group-size", "2", "--max-new-tokens", "8", "--max-turns", "2",
        "--gradient-checkpointing", "true"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "profile.json"
    result = step_profile.main([*TINY, "--out", str(out)])
    return result, json.loads(out.read_text())


def test_every_phase_is_found_and_timed(profiled):
    result, _ = profiled
    phases = result["phases"]
    assert list(phases) == list(step_profile.PHASES)
    for name, p in phases.items():
        assert p["seconds"] >= 0 and p["flops"] >= 0, name
        assert p["calls"] >= 1 and p["seconds"] > 0, f"phase {name!r} was never entered: its wrapper missed"


def test_phases_sum_to_the_step_wall_time(profiled):
    result, _ = profiled
    total = sum(p["seconds"] for p in result["phases"].values())
    assert total == pytest.approx(result["wall_s"], rel=0.02)
    # the trainer's own clock (time/step, taken inside Trainer.step) agrees with the phases' sum
    assert total == pytest.approx(result["trainer_step_s"], rel=0.15, abs=0.05)
    assert sum(p["share"] for p in result["phases"].values()) == pytest.approx(1.0, abs=0.02)


def test_flops_and_tokens_hang_together(profiled):
    result, _ = profiled
    p = result["phases"]
    assert result["shape"]["gradient_checkpointing"] is True
    for name in ("decode", "prefill", "forward", "recompute", "backward"):
        assert p[name]["flops"] > 0 and p[name]["tokens"] > 0, name
    # every layer checkpoints: the backward pass replays each forward layer once, over the same tokens
    assert p["recompute"]["tokens"] == p["forward"]["tokens"] == p["backward"]["tokens"]
    assert p["recompute"]["flops"] == pytest.approx(p["backward"]["flops"])
    # the forward's FLOPs are the decoder's (= the backward's) plus the LM head's
    assert p["forward"]["flops"] > p["backward"]["flops"]
    # 4 episodes, 8 tokens per reply at most: at most 4 x 2 x 8 decode rows (one per sampled token after the first)
    assert p["decode"]["tokens"] <= 4 * 2 * 8
    for name in ("env", "optimizer", "LoRA refresh", "other"):
        assert p[name]["flops"] == 0 and p[name]["over_ideal"] == pytest.approx(p[name]["seconds"])
    assert result["matmul"]["fp32"] > 0
    assert result["largest_gap"] == max(p, key=lambda n: p[n]["over_ideal"])
    assert result["step"]["train/groups"] == 2 and result["step"]["train/skipped_groups"] == 0  # every group trains


def test_profiler_ops_are_attributed_to_phases(profiled):
    result, _ = profiled
    ops = result["ops_by_phase"]
    for name in ("decode", "prefill", "forward", "recompute", "backward", "optimizer"):
        assert ops.get(name) and all(o["self_s"] >= 0 and o["calls"] >= 1 for o in ops[name]), name
    assert not any(o["op"].startswith("phase/") for found in ops.values() for o in found)
    # the backward pass's autograd ops are found inside the backward range (the CPU engine runs on this thread)
    assert any("backward" in o["op"].lower() for o in ops["backward"])


def test_json_and_table(profiled, capsys):
    result, written = profiled
    assert written["phases"].keys() == result["phases"].keys()
    lines = step_profile.table(result)
    assert lines[0].startswith("| phase | s | share |")
    rows = {line.split(" | ")[0].removeprefix("| ") for line in lines[2:]}
    assert rows == {*step_profile.PHASES, "**step**"}
    assert sum("**largest gap**" in line for line in lines) == 1
    assert len({line.count("|") for line in lines}) == 1  # every row has the header's columns


def test_bad_shape_is_refused(capsys):
    with pytest.raises(SystemExit):
        step_profile.main(["--tiny", "--tasks", "0"])
    assert "--tasks must be >= 1, got 0" in capsys.readouterr().err
