"""``benchmarks/edge_mix.py``: pass rate and signal per candidate family on a train-split sample, and the 10-90 %
band that says which families sit at the edge of competence (issue 59 part 4).

The band logic is checked on groups whose outcome is set by hand (a random-init model solves nothing, so a tiny
run alone cannot tell a right band from a wrong one); the tiny run checks the rows, the sample file (train split
only, replayed by ``--sample``) and the table."""

from __future__ import annotations

import json

import edge_mix  # noqa: E402  (benchmarks/ is on pytest's pythonpath)
import pytest


def _group(gid: int, outcomes: list[float], task: dict) -> list:
    """A group of episodes: reward 1 and correct for 1.0, reward 0 or -0.1 (format) and not correct otherwise;
    None: an episode that ended in an env error."""
    from agentrl.algos.rollout.trajectory import Trajectory

    return [Trajectory([1], [1], [0.0], 0, 0.0 if r is None else r, gid, task,
                       termination="error" if r is None else "answered",
                       metrics={"correct": float(r == 1.0), "format_ok": float(r is not None and r >= 0)})
            for r in outcomes]


def test_the_band_holds_pass_rates_from_10_to_90_percent_bounds_included():
    assert edge_mix.BAND == (0.10, 0.90)
    for p in (0.10, 0.11, 0.5, 0.89, 0.90):
        assert edge_mix.in_band(p), p
    for p in (0.0, 0.0999, 0.9001, 1.0):
        assert not edge_mix.in_band(p), p


def test_a_candidates_row_counts_successes_signal_groups_and_places_it_against_the_band():
    task = {"family": "stock_total", "query": "q", "answer": "1"}
    trajs = (_group(0, [1.0, 1.0, 1.0, 1.0], task) + _group(1, [0.0, 0.0, 0.0, 0.0], task)
             + _group(2, [1.0, 0.0, 0.0, 0.0], task) + _group(3, [0.0, 0.0, -0.1, None], task))
    row = edge_mix.summarize("stock_total", "default", {}, trajs)
    assert (row["tasks"], row["episodes"], row["errors"]) == (4, 15, 1)  # the error episode is left out
    assert row["pass_rate"] == 5 / 15 and row["in_band"]
    # signal: unequal rewards (group 3's format error differs from its wrong answers), as the sampler counts it
    assert row["signal_share"] == 2 / 4 and (row["all_pass_groups"], row["all_fail_groups"]) == (1, 1)
    assert row["by_key"] == {"stock_total": 5 / 15}
    solved = edge_mix.summarize("multiply", "default", {}, _group(0, [1.0] * 8, task) + _group(1, [1.0] * 7 + [0.0],
                                                                                             task))
    assert solved["pass_rate"] == 15 / 16 and not solved["in_band"]  # 94 %: too easy, though one group has signal
    failed = edge_mix.summarize("depth", "axis:depth", {}, _group(0, [0.0] * 7 + [1.0], task) + _group(1, [0.0] * 8,
                                                                                                     task))
    assert failed["pass_rate"] == 1 / 16 and not failed["in_band"]  # 6 %: too hard
    result = {"command": "c", "date": "d", "policy": "p", "group_size": 4, "seconds": {"measure": 1.0},
              "collector": {"temperature": 1.0, "max_turns": 4, "max_new_tokens": 96}, "machine": ["- CPU: x"],
              "band": list(edge_mix.BAND), "rows": [row, solved, failed]}
    body = [line for line in edge_mix.table(result) if line.startswith("| `")]
    assert [line.split(" | ")[-1] for line in body] == ["**yes** |", "no |", "no |"]
    assert body[0].startswith("| `stock_total` | default | 4 x 4 | 33% | 50% | 1 / 1 |")


def test_candidates_cover_the_default_axis_procedural_and_dial_families_and_refuse_unknown_names():
    from agentrl.envs.tool_use.axes import AXIS_FAMILIES
    from agentrl.envs.tool_use.env import FAMILIES
    from agentrl.envs.tool_use.procedural import FAMILIES as PROCEDURAL

    every = edge_mix.candidates()
    names = [c.name for c in every]
    assert len(names) == len(set(names))
    assert set(FAMILIES) | set(PROCEDURAL) | {f for fams in AXIS_FAMILIES.values() for f in fams} < set(names)
    assert "stock_total" in names and {c.kind for c in every if c.env_kwargs} == {"dial"}
    assert [c.name for c in edge_mix.pick(["recombination"])] == list(AXIS_FAMILIES["recombination"])
    with pytest.raises(SystemExit, match="no candidate"):
        edge_mix.pick(["stock_totl"])


def test_a_tiny_run_reports_each_candidate_on_a_train_split_sample_that_replays(tmp_path, tiny_dir, capsys):
    pytest.importorskip("torch")
    shape = ["--model", str(tiny_dir), "--device", "cpu", "--dtype", "fp32", "--group-size", "2",
             "stages.rl.collector.max_new_tokens=4", "stages.rl.collector.max_turns=1"]
    sample, out = tmp_path / "sample.jsonl", tmp_path / "result.json"
    result = edge_mix.main([*shape, "--tasks", "2", "--candidates", "stock_total", "depth", "procedural_none",
                            "failure_rate=0.2", "--sample-out", str(sample), "--out", str(out)])
    names = ["stock_total", "add_multiply_add", "add_multiply_add_multiply", "stock_value_fee", "stock_total_value",
             "procedural_none", "failure_rate=0.2"]
    assert [r["candidate"] for r in result["rows"]] == names
    for r in result["rows"]:
        assert (r["tasks"], r["episodes"]) == (2, 4)
        assert r["in_band"] == (0.1 <= r["pass_rate"] <= 0.9)
    assert json.loads(out.read_text())["rows"] == result["rows"]
    records = [json.loads(line) for line in sample.read_text().splitlines()]
    assert len(records) == 2 * len(names)
    assert all(int(r["task"]["id"].rsplit("-", 1)[1]) % 2 == 0 for r in records)  # even indices: the train split
    assert {r["candidate"]: r["env_kwargs"] for r in records}["failure_rate=0.2"] == {"failure_rate": 0.2}
    printed = capsys.readouterr().out
    assert "python benchmarks/edge_mix.py --model" in printed and "- CPU:" in printed
    assert [line.split(" | ")[0] for line in printed.splitlines() if line.startswith("| `")] == \
        [f"| `{n}`" for n in names]
    # the committed sample replays: the same tasks, the same collector seeds, so the same rows
    again = edge_mix.main([*shape, "--sample", str(sample), "--candidates", "stock_total", "failure_rate=0.2"])
    assert again["rows"] == [result["rows"][0], result["rows"][-1]]


def test_train_cold_start_trains_the_main_jobs_sft_stage_first_and_never_over_an_earlier_one(tmp_path, tiny_dir):
    pytest.importorskip("torch")
    args = ["--model", str(tiny_dir), "--device", "cpu", "--dtype", "fp32", "--group-size", "2", "--tasks", "1",
            "--candidates", "multiply", "--train-cold-start", "--work", str(tmp_path / "work"),
            "stages.rl.collector.max_new_tokens=4", "stages.rl.collector.max_turns=1", "stages.sft.steps=1",
            "stages.sft.sft.num_demos=2", "stages.sft.sft.batch_size=2"]
    result = edge_mix.main(args)
    assert (tmp_path / "work" / "sft" / "adapter").is_dir() and "cold_start" in result["seconds"]
    assert "the main job's cold start (1 SFT steps" in result["policy"]
    from agentrl.algos.training.checkpoint import RunExists

    with pytest.raises(RunExists):
        edge_mix.main(args)
