"""The learning runners: the fixed held-out sets, ``learning.py --quick``, ``compare_algorithms.py --quick`` and the
results page, end to end on a tiny random model. No learning figure is asserted (a tiny random model learns
nothing in a few steps); what is checked is that each runner evaluates the tasks it says, records what the page
needs, reads finished runs back, and that the page shows only what the run directories hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import ROOT, load_benchmark, save_model_dir

BENCH = ROOT / "benchmarks"


_load = load_benchmark


@pytest.fixture(scope="module")
def heldout():
    return _load("heldout")


# ---------------------------------------------------------------------------------------------- held-out sets


@pytest.mark.parametrize("name", ["tooluse", "search", "pythonmath"])
def test_committed_heldout_set_equals_its_generator_today(heldout, name):
    spec = heldout.SPECS[name]
    if name == "pythonmath" and not spec.path.is_file():
        pytest.skip("benchmarks/heldout/pythonmath.jsonl is not written yet (python benchmarks/heldout.py write "
                    "--only pythonmath, after the PythonMath-v0 generator is final)")
    assert heldout.check(spec) is None, heldout.check(spec)
    meta = json.loads(spec.meta_path.read_text())
    tasks = heldout.read(name)
    assert len(tasks) == meta["tasks"] == heldout.SIZE == 128
    assert meta["ids"] == [str(t["id"]) for t in tasks] and len(set(meta["ids"])) == 128
    assert meta["env"] == spec.env and "fixed before tuning" in meta["status"]
    assert meta["generator_command"] == f"python benchmarks/heldout.py write --only {name}"


@pytest.mark.parametrize("name", ["tooluse", "pythonmath"])
def test_generated_heldout_sets_avoid_train_and_evaluated_positions(heldout, name):
    from agentrl.envs import tool_use
    from agentrl.envs.datasets import split_index
    from agentrl.envs.python_math import tasks as python_math

    module = tool_use if name == "tooluse" else python_math
    tasks = heldout.SPECS[name].make()  # what the file holds (checked equal above)
    indices = [heldout.generator_index(t) for t in tasks]
    assert all(i % 2 == 1 for i in indices)  # test split: odd generator indices, never a train index
    evaluated = {split_index(k, "test") for k in range(heldout.EVALUATED_TEST_POSITIONS)}
    assert not evaluated & set(indices)
    evaluated_texts = {heldout.task_text(t) for t in module.make_tasks(heldout.EVALUATED_TEST_POSITIONS, "test")}
    assert not evaluated_texts & {heldout.task_text(t) for t in tasks}


def test_search_heldout_set_is_unevaluated_dev_questions(heldout):
    from agentrl.envs.search.questions import load_bundled, split_of

    tasks = heldout.read("search")
    ids = {t["id"] for t in tasks}
    train = load_bundled("train")
    assert all(split_of(i) == "dev" for i in ids)
    assert not ids & {t["id"] for t in train}
    assert not ids & {t["id"] for t in heldout.search_evaluated()}
    texts = {heldout.task_text(t).strip().lower() for t in tasks}
    assert not texts & {heldout.task_text(t).strip().lower() for t in train}
    assert {t["data_source"] for t in tasks} == {"fanoutqa", "wiki_description"}  # both sources, for Macro-EM


# ---------------------------------------------------------------------------------------------- main job


def test_eval_tasks_file_errors_name_the_key(tmp_path):
    from agentrl.algos.recipes.main_job import MainJobConfig, eval_task_list, peak_rss_gib

    with pytest.raises(ValueError, match="eval_tasks_file"):
        eval_task_list(MainJobConfig(eval_tasks_file=str(tmp_path / "missing.jsonl")))
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "query": "q", "answer": "1"}\n{"id": "b", "query": "r", "answer": "2"}\n')
    assert [t["id"] for t in eval_task_list(MainJobConfig(eval_tasks_file=str(path), eval_tasks=1))] == ["a", "b"]
    if os.path.exists("/proc/self/status"):
        assert peak_rss_gib() > 0


# ---------------------------------------------------------------------------------------------- runners


@pytest.fixture(scope="module")
def stopping_model_dir(tmp_path_factory, tokenizer):
    """A tiny model that ends its replies soon (``end_scale``), saved as a folder."""
    from agentrl.algos.models import tiny_model

    return str(save_model_dir(tmp_path_factory.mktemp("tiny"), tiny_model(tokenizer, end_scale=5.0), tokenizer))


@pytest.fixture(scope="module")
def quick_runs(stopping_model_dir, tmp_path_factory):
    """learning.py --quick (ToolUse-v0) and compare_algorithms.py --quick into one runs/ folder."""
    root = tmp_path_factory.mktemp("learning")
    runs, results = root / "runs", root / "results"
    learning, compare = _load("learning"), _load("compare_algorithms")
    assert learning.main(["--quick", "--model", stopping_model_dir, "--out", str(runs / "learning-tooluse-quick"),
                          "--results", str(results), "progress=false", "report_to=none"]) == 0
    cmp_args = ["--quick", "--model", stopping_model_dir, "--out", str(runs / "compare-algorithms-quick"), "--results",
                str(results), "--seeds", "0,1", "--max-steps", "1", "--eval-points", "0.5,1"]
    assert compare.main(cmp_args) == 0
    return {"runs": runs, "results": results, "cmp_args": cmp_args, "compare": compare, "learning": learning}


def test_learning_quick_evaluates_the_fixed_set_and_records_memory(quick_runs, heldout):
    from agentrl.algos.rollout.trajectory import load_trajectories

    out = quick_runs["runs"] / "learning-tooluse-quick"
    summary = json.loads((out / "learning.json").read_text())
    first = [t["id"] for t in heldout.read("tooluse")[:8]]  # --quick: the first rows of the fixed set
    assert [t["id"] for t in heldout.read(out / "heldout-quick.jsonl")] == first
    for stage in ("base", "sft", "rl", "sft_control"):
        assert sorted({t.task["id"] for t in load_trajectories(out / "eval" / f"{stage}.jsonl")}) == sorted(first)
    assert summary["heldout_file"].endswith("heldout-quick.jsonl") and summary["peak_rss_gib"] > 0
    assert [label for label, _ in summary["rows"]] == ["base", "SFT (cold start)", "RL (GRPO)",
                                                       "SFT control (same time)"]
    assert "peak RSS" in (out / "results.md").read_text()


def test_compare_quick_shares_one_cold_start_and_reads_finished_runs_back(quick_runs, heldout):
    out = quick_runs["runs"] / "compare-algorithms-quick"
    summary = json.loads((out / "compare.json").read_text())
    adapter = out / "cold_start" / "adapter"
    assert set(summary["runs"]) == {"grpo", "ppo", "dpo", "sft"}
    for algo, runs in summary["runs"].items():
        assert [r["seed"] for r in runs] == [0, 1]
        for r in runs:
            assert r["steps"] == 1 and [p["fraction"] for p in r["points"]] == [0.5, 1.0]
            config = json.loads((out / f"{algo}-s{r['seed']}" / "config.json").read_text())
            assert config["algo"] == algo and Path(config["adapter"]) == adapter and config["seed"] == r["seed"]
            if algo == "ppo":  # two epochs by default: one would be Dr. GRPO's objective again
                assert config["ppo"]["epochs"] == 2
    assert summary["tasks"] == 4 and summary["heldout_file"] == "benchmarks/heldout/tooluse.jsonl"
    assert set(summary["aggregate"]["grpo"]) >= {"mean", "min", "max", "beat", "diagnostics", "by_family"}
    plots = quick_runs["results"] / "compare_algorithms_quick"
    assert (plots / "heldout_vs_time.png").stat().st_size > 0 and (plots / "reward_vs_step.png").stat().st_size > 0
    page = (quick_runs["results"] / "learning_compare_algorithms_quick.md").read_text()
    assert "| PPO (clip-higher) |" in page and "heldout_vs_time.png" in page
    assert summary["sections"]["ppo"] == ["epochs=2"] and "PPO settings: `epochs=2`" in page
    # a second invocation reads every finished run back instead of training again
    done = {p: p.stat().st_mtime_ns for p in out.glob("*-s*/result.json")}
    assert len(done) == 8
    assert quick_runs["compare"].main(quick_runs["cmp_args"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("*-s*/result.json")} == done
    with pytest.raises(SystemExit, match="minutes"):  # runs of another budget are never mixed in
        quick_runs["compare"].main([*quick_runs["cmp_args"], "--minutes", "0.5"])


def test_page_fills_sections_from_run_dirs_only(quick_runs):
    import learning_page

    path = learning_page.write_page(quick_runs["runs"], quick_runs["results"], quick=True)
    text = path.read_text()
    assert path.name == "learning-quick.md"
    assert "python benchmarks/learning.py --quick" in text  # the ToolUse section, from its learning.json
    assert "Not run yet (no `" in text and "learning-search-quick/learning.json" in text  # never made up
    assert "learning-pythonmath-quick/learning.json" in text
    assert "| online DPO |" in text and "only the first 4 of the committed fixed set's 128 tasks" in text
    assert "not a committed fixed set" in text  # --quick's subset file is flagged as not a held-out result
    assert "benchmarks/heldout/tooluse.jsonl" in text and "fixed" in text


def test_all_runs_every_env_then_the_comparison_then_the_page(quick_runs, monkeypatch, tmp_path):
    learning = quick_runs["learning"]
    cmds = learning.all_commands(True, "m", Path("r"), "res")
    scripts = [Path(c[1]).name for c in cmds]
    assert scripts == ["learning.py"] * len(learning.PRESETS) + ["compare_algorithms.py"]
    assert [c[c.index("--env") + 1] for c in cmds[:-1]] == list(learning.PRESETS)
    assert all(c[-5:] == ["--quick", "--model", "m", "--results", "res"] for c in cmds)
    ran = []
    monkeypatch.setattr(learning.subprocess, "run",
                        lambda cmd, cwd=None: ran.append(cmd) or type("R", (), {"returncode": 0})())
    assert learning.main(["--all", "--quick", "--runs", str(tmp_path), "--results", str(tmp_path / "res")]) == 0
    assert len(ran) == len(cmds) and (tmp_path / "res" / "learning-quick.md").is_file()


def test_pythonmath_quick_runs_the_text_only_pipeline_beside_the_tool_one(stopping_model_dir, tmp_path):
    """ReTool's comparison: the same stages with the tool switched off, in <out>/text_only, as extra rows."""
    from agentrl.algos.rollout.trajectory import load_trajectories

    learning = _load("learning")
    out = tmp_path / "runs" / "learning-pythonmath-quick"
    assert learning.main(["--env", "AgentRL/PythonMath-v0", "--quick", "--model", stopping_model_dir, "--out", str(out),
                          "--results", str(tmp_path / "results"), "progress=false", "report_to=none"]) == 0
    summary = json.loads((out / "learning.json").read_text())
    assert [label for label, _ in summary["rows"]] == ["base", "SFT (cold start)", "RL (GRPO)", "base, text-only",
                                                       "SFT text-only (cold start)", "RL text-only (GRPO)"]
    assert summary["config"]["env_kwargs"] == {"tiers": [1, 2]}
    text_cfg = json.loads((out / "text_only" / "grpo" / "config.json").read_text())
    assert text_cfg["env_kwargs"] == {"tiers": [1, 2], "tools_enabled": False}
    for stage in ("base", "sft", "rl"):  # both pipelines evaluate the same held-out tasks
        ids = [sorted({t.task["id"] for t in load_trajectories(d / "eval" / f"{stage}.jsonl")}) for d in (out, out / "text_only")]
        assert ids[0] == ids[1] and len(ids[0]) == 4
    tier_rows = summary["tier_table"].splitlines()
    assert tier_rows[0].startswith("| Model | tier ") and len(tier_rows) == 2 + 6  # head, rule, six stages
    page = (tmp_path / "results" / "learning_pythonmath_quick.md").read_text()
    assert "Code interpreter vs text-only, both after RL" in page and "Per tier" in page
