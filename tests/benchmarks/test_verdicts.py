"""The tie rule, the cold-start check of cross-run rows and the seed-spread cell (harness.data, harness.tables)."""

from __future__ import annotations

import json

import pytest
from harness.data import COLD_START, judged, same_cold_start, sign_test_p
from harness.record import Comparison
from harness.tables import seed_spread, verdict


def test_sign_test_matches_exact_binomial_values():
    assert sign_test_p(2, 9) == pytest.approx(0.0654296875)  # the audit's main RL-vs-control row: p = 0.065
    assert sign_test_p(0, 5) == pytest.approx(0.0625) and sign_test_p(0, 6) == pytest.approx(0.03125)
    assert sign_test_p(0, 0) == 1.0 and sign_test_p(3, 3) == 1.0


def _scores(a_wins: int, b_wins: int, same: int = 100) -> tuple[dict[str, float], dict[str, float]]:
    a = {f"w{i}": 1.0 for i in range(a_wins)} | {f"l{i}": 0.0 for i in range(b_wins)}
    b = {f"w{i}": 0.0 for i in range(a_wins)} | {f"l{i}": 1.0 for i in range(b_wins)}
    both = {f"s{i}": float(i % 2) for i in range(same)}
    return a | both, b | both


@pytest.mark.parametrize(("a_wins", "b_wins", "tie"), [(0, 0, True), (0, 1, True), (2, 9, True), (0, 12, False),
                                                      (20, 0, False)])
def test_tie_when_the_interval_holds_0_or_the_discordant_tasks_are_too_few(a_wins, b_wins, tie):
    a, b = _scores(a_wins, b_wins)
    [(cmp, j)] = judged({"A": a, "B": b}, [Comparison("A", "B", 0.0, strict=True)])
    assert (j.better, j.worse) == (a_wins, b_wins) and j.tie is tie
    assert verdict(j).startswith("**tie**") is tie


def test_a_row_against_another_cold_start_gets_no_verdict(tmp_path):
    def run(folder, scores):
        (tmp_path / folder / "sft-s0").mkdir(parents=True)
        (tmp_path / folder / "sft-s0" / "set.jsonl").write_text("".join(
            json.dumps({"id": t, "score": s}) + "\n" for t, s in scores.items()))
        return {"evals": {COLD_START: "sft-s0/set.jsonl"}}, tmp_path / folder

    one, same, other = run("one", {"t1": 1.0, "t2": 0.0}), run("same", {"t1": 1.0, "t2": 0.0}), run(
        "other", {"t1": 1.0, "t2": 1.0})
    assert same_cold_start(*one, *same) and not same_cold_start(*one, *other)
    a, b = _scores(20, 0)
    [(_, j)] = judged({"A": a, "B": b}, [Comparison("A", "B", 0.0)], incomparable=frozenset({"B"}))
    assert verdict(j) == "no verdict (the cold starts differ)"


def test_seed_spread_cell():
    assert seed_spread(([0.70, 0.74, 0.78], [0.80])) == "A 4.0, B 1 seed"
    assert seed_spread(None) == "–"


def test_the_learning_page_opens_with_its_summary_and_keeps_diagnostics_apart():
    from harness.experiments import RECORDS
    from harness.heldout import AXIS_SETS, set_status
    from harness.layout import RESULTS

    DIAGNOSTIC_RUNS = {name for name, r in RECORDS.items() if r.diagnostic}  # the records' own fields
    UNDECLARED = {name for name, r in RECORDS.items() if r.undeclared}

    text = (RESULTS / "learning.md").read_text(encoding="utf-8")  # byte-checked against the data elsewhere
    assert text.index("## Summary") < text.index("## Held-out sets") < text.index("## Diagnostics and failed")
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert not any(f"`{name}`" in summary for name in DIAGNOSTIC_RUNS)  # diagnostics are not evidence there
    diagnostics = text.split("## Diagnostics and failed configurations", 1)[1].split("\n## ", 1)[0]
    assert diagnostics.count("**Diagnostic:**") == len(DIAGNOSTIC_RUNS)
    assert text.count("**Not declared before it ran**") == len(UNDECLARED)
    assert set_status("tooluse") == "burnt" and set_status("tooluse_v3").startswith("used to choose")
    assert all(set_status(name) == "clean" for name in AXIS_SETS)


def test_the_algorithms_comparison_judges_grpo_against_rejection_sampling_with_the_seed_spread(tmp_path):
    from harness.data import compare_judged

    def write(name, scores):  # the one layout: <arm>-s<seed>/<set>.jsonl, the cold start's cold_start/<set>.jsonl
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "tooluse_v3.jsonl").write_text("".join(
            json.dumps({"id": f"t{i}", "score": s}) + "\n" for i, s in enumerate(scores)))

    write("cold_start", [0.0] * 10)
    for seed, ones in ((0, 4), (1, 6)):
        write(f"grpo-s{seed}", [1.0] * ones + [0.0] * (10 - ones))
        write(f"rft-s{seed}", [1.0] * 5 + [0.0] * 5)
    summary = {"heldout_file": "benchmarks/heldout/tooluse_v3.jsonl",
               "runs": {"grpo": [{"seed": 0}, {"seed": 1}], "rft": [{"seed": 0}, {"seed": 1}]},
               "labels": {"grpo": "GRPO", "rft": "RFT"}}
    judged_rows = {(cmp.a, cmp.b): j for cmp, j in compare_judged(summary, tmp_path)}
    assert set(judged_rows) == {("GRPO", "cold start"), ("RFT", "cold start"), ("GRPO", "RFT")}  # never RFT vs RFT
    j = judged_rows[("GRPO", "RFT")]
    assert j.spread == ([0.4, 0.6], [0.5, 0.5]) and seed_spread(j.spread) == "A 14.1, B 0.0"
    assert j.tie  # equal means: the interval holds 0
