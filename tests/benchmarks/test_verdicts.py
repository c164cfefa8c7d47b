"""The tie rule, the cold-start check of cross-run rows and the seed-spread cell (harness.data, harness.tables)."""

from __future__ import annotations

import json

import pytest
from harness.data import COLD_START, judged, same_cold_start, sign_test_p
from harness.experiments import Comparison
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
        (tmp_path / folder / "eval").mkdir(parents=True)
        (tmp_path / folder / "eval" / "sft.jsonl").write_text("".join(
            json.dumps({"id": t, "score": s}) + "\n" for t, s in scores.items()))
        return {"evals": {COLD_START: "eval/sft.jsonl"}}, tmp_path / folder

    one, same, other = run("one", {"t1": 1.0, "t2": 0.0}), run("same", {"t1": 1.0, "t2": 0.0}), run(
        "other", {"t1": 1.0, "t2": 1.0})
    assert same_cold_start(*one, *same) and not same_cold_start(*one, *other)
    a, b = _scores(20, 0)
    [(_, j)] = judged({"A": a, "B": b}, [Comparison("A", "B", 0.0)], incomparable=frozenset({"B"}))
    assert verdict(j) == "no verdict (the cold starts differ)"


def test_seed_spread_cell():
    assert seed_spread(([0.70, 0.74, 0.78], [0.80])) == "A 4.0, B 1 seed"
    assert seed_spread(None) == "–"
