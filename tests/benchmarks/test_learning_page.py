"""The learning page is a function of committed data: the committed page regenerates byte for byte, and a page
filled from a small crafted dataset shows each comparison's interval, verdict, command, commit and selection."""

from __future__ import annotations

import json
import re
from pathlib import Path

import harness.pages as page
import harness.results_page as results_page
import harness.tables as tables
from harness.compare_page import compare_section
from harness.data import comparison_dirs, selections
from helpers import ROOT

from agentrl.algos.evaluation.report import EvalReport


def test_the_committed_page_regenerates_byte_identically_from_committed_data(tmp_path):
    out = page.write_page(out=tmp_path / "learning.md")  # docs/results/data + benchmarks/heldout/ledger.jsonl
    committed = ROOT / "docs" / "results" / "learning.md"
    assert out.read_bytes() == committed.read_bytes(), (
        "docs/results/learning.md differs from what its committed data gives: run python benchmarks/learning.py "
        "--page and commit it with the data")


def test_the_readme_summary_is_the_one_the_committed_data_gives():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = page.README_MARKS
    block = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert block == page.readme_summary(), (
        "README.md's learning summary differs from what docs/results/data gives: run python benchmarks/learning.py "
        "--page and commit README.md with the data")


def test_the_readme_summary_is_three_sentences_and_a_link_that_say_what_the_learning_page_s_table_says():
    """Issue 61: the README's results are three sentences and a link; every figure in them is one of the learning
    page's summary table (:func:`harness.axes_page.readme_rows`: the same data, judged the same way)."""
    from harness.axes_page import readme_rows
    from harness.experiments import AXES
    from harness.layout import DATA

    summary = page.readme_summary()
    assert "|" not in summary and "\n" not in summary and summary.count("](") == 1
    assert summary.endswith("[docs/results.md](docs/results.md).")
    assert len(re.findall(r"\.(?= [A-Z])", summary)) == 3  # three sentences, then the link
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in readme_rows(DATA / AXES.name)
            if r.startswith("| ") and not r.startswith("| Set: ")}
    own = [rows[f"`{s}`"] for s in AXES.sets]
    for i, other in enumerate(("SFT-continued", "rejection sampling")):  # the table's verdict columns, counted
        kinds = [re.search(r"\*\*(\w+)\*\*", r[4 + i]).group(1) for r in own]
        counted = " and ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds), key=lambda k: (-kinds.count(k), k)))
        assert f"against {other} {counted}" in summary
    bfcl = rows["BFCL simple_python"]  # the first public benchmark set: cold start, GRPO, SFT-continued, RFT
    assert f"GRPO scored {bfcl[1].split()[0]}% (cold start {bfcl[0]}%)" in summary
    for i, other in enumerate(("SFT-continued", "rejection sampling")):
        diff, interval = bfcl[4 + i].split(";")[0].split(" ", 1)
        assert f"{other} at {bfcl[2 + i].split()[0]}% ({diff} points, 95% interval {interval}," in summary
    counted = page.declared_runs_table()[-1]
    assert "Before it, " + counted[0].lower() + counted[1:-1] + " (one seed" in summary


def test_the_declared_runs_table_lists_only_runs_declared_before_they_ran_one_row_each():
    from harness.experiments import RECORDS

    DIAGNOSTIC_RUNS = {name for name, r in RECORDS.items() if r.diagnostic}
    UNDECLARED = {name for name, r in RECORDS.items() if r.undeclared}

    lines = page.declared_runs_table()
    table = "\n".join(lines)
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| Run ")]
    assert 0 < len(rows) <= 8
    names = {line.split("|")[1].strip() for line in rows}
    assert len(names) == len(rows)  # one row per run
    for folder in UNDECLARED | set(DIAGNOSTIC_RUNS):  # e.g. tooluse_credit -> `credit`; the plain runs have none
        variant = folder.split("_", 1)[1] if "_" in folder else None
        if variant is not None and not folder.startswith("compare_"):
            assert f"`{variant}`" not in table, folder
    assert not any(n.startswith(("ToolUse-v0 (", "Search-v0 (", "PythonMath-v0 (")) for n in names)  # undeclared
    assert lines[-1].startswith(f"{len(rows)} runs declared before they ran")


def test_the_results_page_embeds_the_committed_learning_page():
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    embedded = text.split(results_page.LEARNING_HEADING, 1)[1].strip()
    assert embedded == "\n".join(results_page.learning_sections(ROOT / "docs")).strip(), (
        "docs/results.md's learning section differs from docs/results/learning.md: run python benchmarks/learning.py "
        "--page (it rewrites both) and commit them")


def _scores(path: Path, correct: list[int], family="add") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"family": family, "id": f"t{i}", "n": 1, "score": float(c)}) + "\n"
                            for i, c in enumerate(correct)))


def _ledger_row(id_, set_name, weights, value, tasks=128):
    return {"id": id_, "time": "2026-01-01T00:00:00+00:00", "commit": "a" * 40, "dirty": False,
            "command": f"agentrl eval --tasks-file benchmarks/heldout/{set_name}.jsonl", "config_sha256": "c1",
            "weights": weights, "adapter": None, "set": set_name, "set_sha256": "s", "tasks": tasks,
            "set_tasks": 128, "n": 1, "temperature": 0.0, "primary_metric": "average_at_n",
            "scores": {"average_at_n": value}}


def test_a_page_from_crafted_data(tmp_path):
    data, results = tmp_path / "data", tmp_path / "results"
    exp = data / "tooluse"
    cold = [1] * 60 + [0] * 40
    rl = [1] * 90 + [0] * 10  # +30 points
    control = [1] * 95 + [0] * 5
    for name, correct in (("sft", cold), ("rl", rl), ("sft_control", control)):
        _scores(exp / f"{name}-s0" / "tooluse.jsonl", correct)  # the one layout: <arm>-s<seed>/<set>.jsonl

    def row(label, correct, ledger_id):
        r = EvalReport(n=1, num_tasks=100, num_samples=100, average_at_n=sum(correct) / 100,
                       pass_at_n=sum(correct) / 100, settings={"ledger": {"id": ledger_id, "set": "tooluse"}})
        return [label, r.to_dict()]

    learning = {
        "env": "AgentRL/ToolUse-v0", "seed": 0, "model": "m", "eval_n": 1, "eval_temperature": 0.0,
        "heldout_file": "benchmarks/heldout/tooluse.jsonl", "heldout_sha256": "x", "command": "python "
        "benchmarks/learning.py", "started": "2026-01-01T00:00+00:00", "invocation_seconds": 60.0,
        "stage_seconds": {"sft": 6.0}, "peak_rss_gib": 1.0, "machine": ["- cpu"], "commit": "b" * 40, "dirty": True,
        "config": {"env_kwargs": {}, "sft_families": [], "sft_demos": 1, "sft_steps": 1, "rl_steps": 1,
                   "rl_tasks_per_step": 1, "rl_group_size": 1, "rl_lr": 1e-4, "max_new_tokens": 8, "max_turns": 1},
        "rows": [row("SFT (cold start)", cold, "r1"), row("RL (GRPO)", rl, "r2"),
                 row("SFT control (same time)", control, "r3")],
        "family_table": None, "tier_table": None,
        "evals": {"SFT (cold start)": "sft-s0/tooluse.jsonl", "RL (GRPO)": "rl-s0/tooluse.jsonl",
                  "SFT control (same time)": "sft_control-s0/tooluse.jsonl"},
    }
    (exp / "learning.json").write_text(json.dumps(learning))
    # GRPO's per-family signal: 'add' has one signal group of 2 in each of 4 steps, its success 25% -> 75%;
    # 'chain' is sampled but never differs
    steps = [{"step": s, "family/groups@add": 2, "family/signal_groups@add": 1, "family/correct@add": c,
              "family/groups@chain": 1, "family/signal_groups@chain": 0, "family/correct@chain": 0.0}
             for s, c in ((1, 0.25), (2, 0.5), (3, 0.5), (4, 0.75))]
    (exp / "rl-s0" / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    ledger = tmp_path / "ledger.jsonl"
    rows = [_ledger_row("r1", "tooluse", "w1", 0.60), _ledger_row("r2", "tooluse", "w2", 0.90),
            _ledger_row("r3", "tooluse", "w3", 0.95), _ledger_row("r4", "tooluse", "w4", 0.99, tasks=8)]
    ledger.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = page.write_page(data, results, ledger=ledger).read_text()
    line = next(x for x in text.splitlines() if x.startswith("| RL (GRPO) vs SFT (cold start) |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:4] == ["90.0%", "60.0%", "+30.0"] and cells[5] == ">= +15" and cells[6].startswith("**met**")
    low, high = (float(v) for v in cells[4].strip("[]").split(","))
    assert 15 < low < 30 < high  # decided: the whole interval is above the goal
    assert cells[6] == "**met** (decided)" and cells[7] == "no"  # the control scored higher: RL was not the best
    control_line = next(x for x in text.splitlines() if x.startswith("| RL (GRPO) vs SFT control (same time) |"))
    # 5 tasks apart, all one way: the interval excludes 0 but an exact sign test gives p = 2/32 >= 0.05: a tie
    assert "**tie** (0 vs 5 tasks, p = 0.062)" in control_line and "> +0" in control_line
    assert "commit `bbbbbbbbbb` (uncommitted changes)" in text and "python benchmarks/learning.py" in text
    # the ledger: three configurations on the whole set (the 8-task row is a subset), the best is selected
    assert "**selected** (best of 3)" in text and "| 8 of 128 |" in text
    assert "Not run yet: no committed data in" in text  # the other envs
    assert selections(rows) == {"r3": 3}
    assert "| add | 8 | 4 (50%) | 25% / 75% |" in text and "| chain | 4 | 0 (0%) | 0% / 0% |" in text
    assert page.write_page(data, results, ledger=ledger).read_text() == text  # a function of the data
    readme = tmp_path / "README.md"
    start, end = page.README_MARKS
    readme.write_text(f"# x\n\n{start}\nstale-block\n{end}\nafter\n")
    page.write_page(data, results, ledger=ledger, readme=readme)
    summary = readme.read_text()
    assert "stale-block" not in summary and summary.endswith(f"{end}\nafter\n")
    # the README's rows are the axes experiment's (none here), and its count of earlier runs lists only runs
    # declared before they ran: a plain "tooluse" folder is one of the undeclared ones, so there is no count
    block = summary.split(start, 1)[1].split(end, 1)[0].strip()
    assert block == "The pre-declared experiment `axes` has not run yet. Results: [docs/results.md](docs/results.md)."


def test_an_engine_run_shows_its_training_beside_the_in_process_run(tmp_path):
    mine, plain = tmp_path / "tooluse_vllm", tmp_path / "tooluse"
    for exp, rewards in ((mine, [0.25, 0.5]), (plain, [0.75])):
        (exp / "rl-s0").mkdir(parents=True)
        (exp / "rl-s0" / "metrics.jsonl").write_text("".join(
            json.dumps({"step": k, "reward/mean": r, "train/logprob_gap": 0.002 * k, "train/logprob_gap_max": 0.5,
                        "train/is_weight_mean": 0.99, "train/is_clipped_frac": 0.0, "time/rollout": 120.0}) + "\n"
            for k, r in enumerate(rewards, 1)))
    plot = tmp_path / "plots" / "curves.png"
    lines = tables.engine_training({"engine": "vllm"}, mine, ({}, plain), plot=plot)
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert rows == ["| 1 | 0.750 | 0.250 | 0.0020 | 0.500 | 0.990 | 0.0000 | 120 |",
                    "| 2 | - | 0.500 | 0.0040 | 0.500 | 0.990 | 0.0000 | 120 |"]  # the plain run had one step
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert tables.engine_training({}, mine, ({}, plain)) == []  # in-process variants get no such table


def test_an_earlier_comparison_kept_with_its_data_gets_its_own_section_after_the_current_one(tmp_path):
    for name in ("compare_algorithms_lr2e-4", "compare_algorithms", "compare_algorithms_quick", "tooluse"):
        (tmp_path / name).mkdir()
    assert [p.name for p in comparison_dirs(tmp_path, quick=False)] == ["compare_algorithms",
                                                                         "compare_algorithms_lr2e-4"]
    assert [p.name for p in comparison_dirs(tmp_path, quick=True)] == ["compare_algorithms_quick"]
    current = compare_section(None, tmp_path / "compare_algorithms", quick=False)
    earlier = compare_section(None, tmp_path / "compare_algorithms_lr2e-4", quick=False)
    assert current[0] == "## The algorithms side by side (ToolUse-v0)"
    assert earlier[0] == "## An earlier algorithms comparison (ToolUse-v0): `lr2e-4`"
