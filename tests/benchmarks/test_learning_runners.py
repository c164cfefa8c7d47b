"""The learning runners: the fixed held-out sets, ``experiment.py run tooluse --quick`` (a learning run),
``experiment.py run compare_algorithms --quick`` and the results page, end to end on a tiny random model. No learning
figure is asserted (a tiny random model learns nothing in a few steps); what is checked is that each runner
evaluates the tasks it says, records what the page needs, reads finished runs back, and that the page shows only
what the run directories hold.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

import harness.commands as commands
import harness.compare_exec as compare_exec
import harness.experiment_cli as cli
import harness.heldout as heldout_module
import harness.heldout_draw as draw
import pytest
from harness.data import family_table
from harness.experiments import experiment
from harness.heldout import path_for_env as heldout_path
from harness.layout import SETS, set_name
from helpers import ROOT

BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def heldout():
    return heldout_module


def _ledger_beside_sets(folder: Path) -> Path:
    """A ledger in ``folder`` beside copies of the committed sets (the ledger recognises the sets in its folder):
    the runners' tests never write benchmarks/heldout/ledger.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in (ROOT / "benchmarks" / "heldout").glob("*.json*"):
        if f.name != "ledger.jsonl":
            shutil.copyfile(f, folder / f.name)
    return folder / "ledger.jsonl"


# ---------------------------------------------------------------------------------------------- held-out sets


V1 = ["tooluse", "search", "pythonmath"]
V2 = ["tooluse_v2", "search_v2", "pythonmath_v2"]
ENVS = {"tooluse": "AgentRL/ToolUse-v0", "search": "AgentRL/Search-v0", "pythonmath": "AgentRL/PythonMath-v0"}
#: Where a set later than v2 is each env's current one (ToolUse-v0: tooluse_v3, issue 30).
CURRENT = {"tooluse": "tooluse_v3"}


@pytest.mark.parametrize("name", [*V1, "tooluse_v2", "tooluse_v3", "tooluse_v4", "tooluse_v5", "search_v2",
                                  # their generator scans 400,000 train tasks (~20 s): see the fast check below
                                  pytest.param("pythonmath_v2", marks=pytest.mark.slow),
                                  pytest.param("pythonmath_v3", marks=pytest.mark.slow),
                                  pytest.param("pythonmath_v4", marks=pytest.mark.slow),
                                  pytest.param("pythonmath_v5", marks=pytest.mark.slow)])
def test_committed_heldout_set_equals_its_generator_today(heldout, name):
    spec = heldout.SPECS[name]
    assert heldout.check(spec) is None, heldout.check(spec)
    meta = json.loads(spec.meta_path.read_text())
    tasks = heldout.read(name)
    assert len(tasks) == meta["tasks"] and meta["ids"] == [str(t["id"]) for t in tasks]
    assert len(set(meta["ids"])) == len(tasks) == (meta.get("available", draw.SIZE))
    assert meta["env"] == spec.env and "fixed before tuning" in meta["status"]
    assert meta["generator_command"] == f"python benchmarks/heldout.py write --only {name}"
    assert meta["primary_metric"] == ("macro_em" if spec.env == "AgentRL/Search-v0" else "average_at_n")


def test_v1_sets_are_marked_burnt_and_every_env_evaluates_on_its_v2_set(heldout):
    from agentrl.algos.evaluation.ledger import sidecars

    metas = sidecars(SETS)  # what the ledger recognises a set by
    for v1, v2 in zip(V1, V2, strict=True):
        assert metas[v1]["burnt"] and "burnt" not in metas[v2]
        assert metas[v2]["fixed_before_tuning"] is True and metas[v2]["train_text_overlap_total"] == 0
        assert metas[v2]["train_text_overlap"] == {}
        assert metas[v2]["sha256"] == hashlib.sha256(heldout.SPECS[v2].path.read_bytes()).hexdigest()
        current = CURRENT.get(v1, v2)
        assert experiment(ENVS[v1]).heldout == current and heldout.path_for_env(ENVS[v1]) == heldout.SPECS[current].path
        assert heldout.path_for_env(ENVS[v1], v1) == heldout.SPECS[v1].path  # still selectable by name
    assert len(heldout.read("tooluse_v2")) == len(heldout.read("pythonmath_v2")) == 128
    assert set(metas["tooluse_v2"]["left_out_families"]) == {"convert", "power", "stock", "stock_total", "stock_value"}


@pytest.mark.parametrize("name", ["tooluse", "pythonmath"])
def test_generated_heldout_sets_avoid_train_and_evaluated_positions(heldout, name):
    from agentrl.envs.datasets import split_index
    from agentrl.envs.python_math import tasks as python_math
    from agentrl.envs.tool_use import env as tool_use

    module = tool_use if name == "tooluse" else python_math
    tasks = heldout.SPECS[name].make()  # what the file holds (checked equal above)
    indices = [draw.generator_index(t) for t in tasks]
    assert all(i % 2 == 1 for i in indices)  # test split: odd generator indices, never a train index
    evaluated = {split_index(k, "test") for k in range(draw.EVALUATED_TEST_POSITIONS)}
    assert not evaluated & set(indices)
    evaluated_texts = {draw.task_text(t) for t in module.make_tasks(draw.EVALUATED_TEST_POSITIONS, "test")}
    assert not evaluated_texts & {draw.task_text(t) for t in tasks}


@functools.cache
def _train_scan_texts(env, full=True):
    """The train-split question texts a v2 set must not share, scanned here with the env's generator directly
    (once per process: the four PythonMath sets share it)."""
    from agentrl.envs.python_math import tasks as python_math
    from agentrl.envs.tool_use import env as tool_use

    n = draw.TRAIN_SCAN
    if env == "tooluse":
        return {t["query"] for t in tool_use.make_tasks(n, "train")}
    tasks = python_math.make_tasks(n, "train", tiers=[1, 2])  # the learning preset's mixture
    tasks += python_math.make_tasks(32, "train", start=1_000_000, tiers=[1, 2])  # the tier probe
    if full:  # the default mixture (all tiers): 200,000 more tasks
        tasks += python_math.make_tasks(n, "train")
    return {t["question"] for t in tasks}


@pytest.mark.parametrize("name", ["tooluse_v2", "pythonmath_v2", "pythonmath_v3", "pythonmath_v4", "pythonmath_v5",
                                  pytest.param("pythonmath_v2_full_scan", marks=pytest.mark.slow)])
def test_v2_generated_set_shares_no_text_with_train_evaluated_positions_or_v1(heldout, name):
    """Issue 28: fresh test positions, no question text in the train split's scan, at a test position evaluated
    before, in the v1 set or (pythonmath_v3-v5, issue 30) in the earlier sets; the left-out (memorisable) families are
    absent."""
    from agentrl.envs.datasets import split_index
    from agentrl.envs.python_math import tasks as python_math
    from agentrl.envs.tool_use import env as tool_use

    full = name.endswith("_full_scan")
    name = name.removesuffix("_full_scan")
    v1 = name.split("_v")[0]
    start, earlier = {"pythonmath_v3": (draw.START_PYTHONMATH_V3, ["pythonmath_v2"]),
                      "pythonmath_v4": (draw.START_PYTHONMATH_V4, ["pythonmath_v2", "pythonmath_v3"]),
                      "pythonmath_v5": (draw.START_PYTHONMATH_V5, ["pythonmath_v2", "pythonmath_v3",
                                                                      "pythonmath_v4"]),
                      }.get(name, (draw.START_V2, []))
    module = tool_use if v1 == "tooluse" else python_math
    meta = json.loads(heldout.SPECS[name].meta_path.read_text())
    tasks = heldout.read(name)
    texts = [draw.task_text(t) for t in tasks]
    assert len(set(texts)) == len(tasks) == 128
    indices = [draw.generator_index(t) for t in tasks]
    assert all(i % 2 == 1 and i >= split_index(start, "test") for i in indices)  # fresh test positions
    assert indices == sorted(indices) and [module.make_task(i) for i in indices] == tasks  # the generator's own
    assert meta["left_out_families"] and not {t["family"] for t in tasks} & set(meta["left_out_families"])
    assert not set(texts) & _train_scan_texts(v1, full=full)
    assert not set(texts) & {draw.task_text(t) for s in [v1, *earlier] for t in heldout.read(s)}
    tiers = [None, [3], [1, 2]] if v1 == "pythonmath" else [None]
    evaluated = {draw.task_text(t) for k in tiers
                 for t in (module.make_tasks(draw.EVALUATED_TEST_POSITIONS, "test", **({"tiers": k} if k else {})))}
    assert not set(texts) & evaluated


def test_search_heldout_set_is_unevaluated_dev_questions(heldout):
    from agentrl.envs.search.questions import load_bundled, split_of

    tasks = heldout.read("search")
    ids = {t["id"] for t in tasks}
    train = load_bundled("train")
    assert all(split_of(i) == "dev" for i in ids)
    assert not ids & {t["id"] for t in train}
    assert not ids & {t["id"] for t in draw.search_evaluated()}
    texts = {draw.task_text(t).strip().lower() for t in tasks}
    assert not texts & {draw.task_text(t).strip().lower() for t in train}
    assert {t["data_source"] for t in tasks} == {"fanoutqa", "wiki_description"}  # both sources, for Macro-EM


def test_search_v2_set_shares_no_question_with_train_evaluated_draws_or_v1(heldout):
    from agentrl.envs.search.questions import load_bundled, split_of

    def norm(t):
        return draw.task_text(t).strip().lower()

    tasks, v1, train = heldout.read("search_v2"), heldout.read("search"), load_bundled("train")
    ids, texts = {t["id"] for t in tasks}, {norm(t) for t in tasks}
    assert len(ids) == len(texts) == len(tasks) == 106  # every dev question left: fewer than 128
    assert all(split_of(i) == "dev" for i in ids)
    assert not ids & ({t["id"] for t in train} | {t["id"] for t in draw.search_evaluated()} | {t["id"] for t in v1})
    assert not texts & ({norm(t) for t in train} | {norm(t) for t in v1} | {norm(t) for t in draw.search_evaluated()})
    # fanoutqa's 14 dev questions were all used by the evaluated draws and v1: one source left (Macro-EM = its EM)
    assert {t["data_source"] for t in tasks} == {"wiki_description"}


@functools.cache
def _tooluse_train_queries(items):
    """The queries of ToolUse-v0's first TRAIN_SCAN train tasks with ``items`` stock items (once per process: the
    three sets of that world share them)."""
    from agentrl.envs.tool_use import env as tool_use

    return frozenset(t["query"] for t in tool_use.make_tasks(draw.TRAIN_SCAN, "train", items=items))


@pytest.mark.parametrize(("name", "earlier_sets"), [("tooluse_v3", ("tooluse", "tooluse_v2")),
                                                    ("tooluse_v4", ("tooluse", "tooluse_v2", "tooluse_v3")),
                                                    ("tooluse_v5", ("tooluse", "tooluse_v2", "tooluse_v3",
                                                                    "tooluse_v4"))])
def test_v3_and_v4_hold_the_chains_in_a_question_space_training_does_not_cover(heldout, name, earlier_sets):
    """Issue 30: tooluse_v3, tooluse_v4 and tooluse_v5 are drawn from ToolUse-v0 with items=999, hold the multi-call
    stock families, share no question text with that world's train scan, the earlier sets or the evaluated positions,
    and say their world."""
    from agentrl.envs.tool_use import env as tool_use

    meta = json.loads(heldout.SPECS[name].meta_path.read_text())
    tasks = heldout.read(name)
    assert meta["env_kwargs"] == {"items": 999} and meta["fixed_before_tuning"] and meta["train_text_overlap"] == {}
    assert heldout.set_env_kwargs(heldout.SPECS[name].path) == {"items": 999}
    assert heldout.set_env_kwargs(heldout.SPECS["tooluse_v2"].path) == {}
    assert {"stock_total", "stock_value"} <= {t["family"] for t in tasks}
    assert all(t["items"] == 999 and draw.generator_index(t) % 2 == 1 for t in tasks)
    texts = {t["query"] for t in tasks}
    train = _tooluse_train_queries(999)
    earlier = {t["query"] for earlier_set in earlier_sets for t in heldout.read(earlier_set)}
    evaluated = {t["query"] for t in tool_use.make_tasks(draw.EVALUATED_TEST_POSITIONS, "test")}
    assert not texts & (train | earlier | evaluated)


def test_learning_runner_takes_the_v2_set_and_old_sets_by_name():
    assert heldout_path("AgentRL/ToolUse-v0").name == "tooluse_v3.jsonl"
    assert heldout_path("AgentRL/Search-v0").name == "search_v2.jsonl"
    assert heldout_path("AgentRL/PythonMath-v0").name == "pythonmath_v2.jsonl"
    assert heldout_path("AgentRL/ToolUse-v0", "tooluse").name == "tooluse.jsonl"
    with pytest.raises(ValueError, match="not AgentRL/ToolUse-v0"):
        heldout_path("AgentRL/ToolUse-v0", "search_v2")


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
def quick_runs(stopping_model_dir, tmp_path_factory):
    """experiment.py run tooluse --quick and run compare_algorithms --quick into one runs/ folder."""
    root = tmp_path_factory.mktemp("learning")
    runs, results = root / "runs", root / "results"
    ledger = _ledger_beside_sets(root / "sets")
    repo_ledger = (ROOT / "benchmarks" / "heldout" / "ledger.jsonl").read_bytes()
    assert cli.main(["run", "tooluse", "--quick", "--model", stopping_model_dir,
                     "--out", str(runs / "learning-tooluse-quick"), "--results", str(results), "--ledger", str(ledger),
                     "progress=false", "report_to=none"]) == 0
    cmp_args = ["--quick", "--model", stopping_model_dir, "--out", str(runs / "compare-algorithms-quick"), "--results",
                str(results), "--seeds", "0,1", "--max-steps", "1", "--eval-points", "0.5,1",
                "--algos", "grpo,ppo,dpo,sft,grpo_turns", "--ledger", str(ledger)]
    assert cli.main(["run", "compare_algorithms", *cmp_args]) == 0
    assert (ROOT / "benchmarks" / "heldout" / "ledger.jsonl").read_bytes() == repo_ledger  # written where told
    return {"runs": runs, "results": results, "cmp_args": cmp_args, "ledger": ledger}


def test_learning_quick_evaluates_the_fixed_set_and_records_memory(quick_runs, heldout):
    from agentrl.algos.rollout.trajectory import load_trajectories

    out = quick_runs["runs"] / "learning-tooluse-quick"
    summary = json.loads((out / "learning.json").read_text())
    first = [t["id"] for t in heldout.read("tooluse_v3")[:8]]  # --quick: the first rows of the fixed set
    assert [t["id"] for t in heldout.read(out / "heldout-quick.jsonl")] == first
    for stage in ("base", "sft", "rl", "sft_control"):
        assert sorted({t.task["id"] for t in load_trajectories(out / "eval" / f"{stage}.jsonl")}) == sorted(first)
    assert summary["heldout_file"].endswith("heldout-quick.jsonl") and summary["peak_rss_gib"] > 0
    assert [label for label, _ in summary["rows"]] == ["base", "SFT (cold start)", "RL (GRPO)",
                                                       "SFT control (same time)"]
    assert "peak RSS" in (out / "results.md").read_text()
    # the control buys with "the same time" what the cold start's SFT would: the same settings, memory budget too
    cold, control = (json.loads((out / stage / "config.json").read_text()) for stage in ("sft", "sft_control"))
    for key in ("algo", "lr", "dtype", "memory_budget_gb", "micro_batch_tokens", "gradient_checkpointing", "sft",
                "lora", "env_kwargs", "seed", "attn_implementation"):
        assert control[key] == cold[key], key


def test_compare_quick_shares_one_cold_start_and_reads_finished_runs_back(quick_runs, heldout):
    from agentrl.algos.evaluation.ledger import git_state

    out = quick_runs["runs"] / "compare-algorithms-quick"
    summary = json.loads((out / "compare.json").read_text())
    adapter = out / "cold_start" / "adapter"
    assert set(summary["runs"]) == {"grpo", "ppo", "dpo", "sft", "grpo_turns"}
    for algo, runs in summary["runs"].items():
        assert [r["seed"] for r in runs] == [0, 1]
        for r in runs:
            assert r["steps"] == 1 and [p["fraction"] for p in r["points"]] == [0.5, 1.0]
            config = json.loads((out / f"{algo}-s{r['seed']}" / "config.json").read_text())
            assert (config["algo"] == algo.removesuffix("_turns") and Path(config["adapter"]) == adapter
                    and config["seed"] == r["seed"])
            if algo == "ppo":  # two epochs by default: one would be Dr. GRPO's objective again
                assert config["ppo"]["epochs"] == 2
            if algo == "grpo_turns":  # an option: GRPO with the turn-level advantage, the main job's GRPO otherwise
                assert config["algo"] == "grpo" and config["grpo"]["turn_weight"] == 1.0
                assert config["grpo"]["scale_std"] is False
            elif algo == "grpo":
                assert config["grpo"]["turn_weight"] == 0
    assert summary["tasks"] == 4 and summary["heldout_file"] == "benchmarks/heldout/tooluse_v3.jsonl"
    # as learning.py records
    assert summary["commit"] == git_state(ROOT)["commit"] and isinstance(summary["dirty"], bool)
    assert set(summary["aggregate"]["grpo"]) >= {"mean", "min", "max", "beat", "diagnostics", "by_family"}
    plots = quick_runs["results"] / "compare_algorithms_quick"
    assert (plots / "heldout_vs_time.png").stat().st_size > 0 and (plots / "reward_vs_step.png").stat().st_size > 0
    page = (quick_runs["results"] / "learning_compare_algorithms_quick.md").read_text()
    assert "| PPO (clip-higher) |" in page and "heldout_vs_time.png" in page
    assert summary["sections"]["ppo"] == ["epochs=2"] and "PPO settings: `epochs=2`" in page
    # each algorithm against the cold start, each RL algorithm against SFT-continued, with its interval and verdict
    for row in ("| GRPO (Dr. GRPO) vs cold start |", "| SFT-continued vs cold start |",
                "| online DPO vs SFT-continued |", "| PPO (clip-higher) vs SFT-continued |",
                "| GRPO + turn credit (turn_weight=1) vs GRPO (Dr. GRPO) |"):
        assert row in page and "| > +0 | **" in page.split(row, 1)[1].splitlines()[0]
    assert "| SFT-continued vs SFT-continued |" not in page
    # where each RL algorithm's learning signal was, per family, from the committed metrics (SFT has no rollouts)
    assert "Where online DPO's signal was" in page and "Where SFT-continued's" not in page
    # an algorithm that did not beat the cold start has its note with the run's diagnostics, every one of them
    assert "- **GRPO (Dr. GRPO)** did not beat" in page and "- **online DPO** did not beat" in page
    # a second invocation reads every finished run back instead of training again
    done = {p: p.stat().st_mtime_ns for p in out.glob("*-s*/result.json")}
    assert len(done) == 10
    assert cli.main(["run", "compare_algorithms", *quick_runs["cmp_args"]]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("*-s*/result.json")} == done
    with pytest.raises(SystemExit, match="minutes"):  # runs of another budget are never mixed in
        cli.main(["run", "compare_algorithms", *quick_runs["cmp_args"], "--minutes", "0.5"])


def test_a_comparison_run_ends_at_the_step_count_nearest_its_budget():
    takes_step = compare_exec.takes_step

    def steps_in(budget: float, step_seconds: float, max_steps: int | None = None) -> int:
        clock, steps = 0.0, 0
        while takes_step(clock, steps, budget, max_steps):
            clock, steps = clock + step_seconds, steps + 1
        return steps

    assert steps_in(100, 30) == 3  # 90 s is nearer 100 than 120 s
    assert steps_in(100, 45) == 2  # 90 s, not 135
    assert steps_in(100, 60) == 2  # 120 s is nearer 100 than 60 s
    assert steps_in(1, 60) == 1  # a run always takes its first step
    assert steps_in(100, 10, max_steps=4) == 4


def test_a_comparison_option_changes_only_its_settings(tmp_path):
    from agentrl.algos.recipes.main_job import MainJobConfig

    runner = object.__new__(compare_exec.Executor)  # train_config needs the settings only, not the model
    runner.cfg, runner.sections = MainJobConfig(), {"ppo": [], "dpo": []}
    plain = runner.train_config("grpo", 0, tmp_path / "adapter", tmp_path / "plain")
    low = runner.train_config("grpo_lr2e-5", 0, tmp_path / "adapter", tmp_path / "low")
    turns = runner.train_config("grpo_turns", 0, tmp_path / "adapter", tmp_path / "turns")
    assert plain.lr == MainJobConfig().stages.rl["lr"] == 6e-5 and low.lr == 2e-5 and turns.lr == plain.lr
    assert low.algo == turns.algo == "grpo" and low.algorithm == plain.algorithm
    assert turns.algorithm.turn_weight == 1.0 and plain.algorithm.turn_weight == 0
    ppo = runner.train_config("ppo", 0, tmp_path / "adapter", tmp_path / "ppo")
    assert ppo.algo == "ppo" and ppo.lr == plain.lr and ppo.group_size == plain.group_size
    guided = runner.train_config("grpo_guided", 0, tmp_path / "adapter", tmp_path / "guided")
    with pytest.raises(SystemExit, match=r"^--algos grpo_relift: grpo.guidance=relift: .* at least 16x .* <= 0.62 "):
        runner.train_config("grpo_relift", 0, tmp_path / "adapter", tmp_path / "relift")  # groups of 8: refused
    runner.cfg = MainJobConfig(stages={"rl": {"group_size": 4}})  # 8x: allowed
    plain = runner.train_config("grpo", 0, tmp_path / "adapter", tmp_path / "plain")
    guided = runner.train_config("grpo_guided", 0, tmp_path / "adapter", tmp_path / "guided")
    relift = runner.train_config("grpo_relift", 0, tmp_path / "adapter", tmp_path / "relift")
    assert [c.algorithm.guidance for c in (plain, guided, relift)] == ["none", "luffy", "relift"]
    assert guided.lr == relift.lr == plain.lr
    assert dataclasses.replace(guided.algorithm, guidance="none") == plain.algorithm


def test_a_run_read_back_without_its_commit_takes_it_from_its_ledger_row(tmp_path):
    run_dir = tmp_path / "grpo-s0"
    result = {"points": [{"fraction": 1.0}], "final": {"average_at_n": 0.25}}
    ledger = tmp_path / "ledger.jsonl"
    assert compare_exec.ledger_commit(run_dir, result, ledger) == {}  # no ledger yet
    assert compare_exec.ledger_commit(run_dir, result, None) == {}  # none given
    rows = [{"id": "a", "commit": "c1", "dirty": False, "out": str(run_dir / "eval" / "at-1.jsonl"),
             "scores": {"average_at_n": 0.5}},  # another score: another evaluation of that file
            {"id": "b", "commit": "c2", "dirty": False, "out": str(tmp_path / "ppo-s0" / "eval" / "at-1.jsonl"),
             "scores": {"average_at_n": 0.25}},  # another run
            {"id": "c", "commit": "c3", "dirty": False, "out": str(run_dir / "eval" / "at-1.jsonl"),
             "scores": {"average_at_n": 0.25}}]
    ledger.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert compare_exec.ledger_commit(run_dir, result, ledger) == {"commit": "c3", "dirty": False,
                                                      "commit_from": "ledger row c (its final evaluation)"}


def test_page_fills_sections_from_committed_data_only(quick_runs):
    import harness.pages as learning_page

    ledger_file = quick_runs["ledger"]
    results = quick_runs["results"]
    data = results / "data"
    exported = data / "tooluse_quick"  # learning.py copied the run's data at its end
    # the one layout: <arm>-s<seed>/<set>.jsonl beside the run's meta (learning.json), metrics in the trained arms'
    # (--quick evaluates the first rows of tooluse_v3, written to heldout-quick.jsonl: that is its set)
    assert {p.relative_to(exported).as_posix() for p in exported.glob("*/*.jsonl")} == {
        "base-s0/heldout-quick.jsonl", "sft-s0/heldout-quick.jsonl", "rl-s0/heldout-quick.jsonl",
        "sft_control-s0/heldout-quick.jsonl", "sft-s0/metrics.jsonl", "rl-s0/metrics.jsonl",
        "sft_control-s0/metrics.jsonl"}
    assert json.loads((exported / "learning.json").read_text())["evals"]["RL (GRPO)"] == "rl-s0/heldout-quick.jsonl"
    # compare_algorithms.py copied its data at its end too, as learning.py does
    assert (data / "compare_algorithms_quick" / "compare.json").is_file()
    compared = data / "compare_algorithms_quick"
    name = set_name(json.loads((compared / "compare.json").read_text())["heldout_file"])
    cells = {f"{algo}-s{seed}" for algo in ("grpo", "ppo", "dpo", "sft", "grpo_turns") for seed in (0, 1)}
    assert {p.parent.name for p in compared.glob("*/metrics.jsonl")} == cells
    assert {p.parent.name for p in compared.glob(f"*/{name}.jsonl")} == {"cold_start", *cells}
    shutil.rmtree(results / "compare_algorithms_quick")  # the comparison's plots are drawn from that data
    (results / "learning_compare_algorithms_quick.md").unlink()  # and the comparison's own page is written from it
    run_page = (results / "learning_tooluse_quick.md").read_text()  # the run's own page, written at its end
    (results / "learning_tooluse_quick.md").unlink()  # is a function of its committed data too
    path = learning_page.write_page(data, results, quick=True, ledger=ledger_file)
    assert not (results / "compare_algorithms_quick").exists()  # the page draws no figure (the site's build does)
    from harness.figures import experiment_figures

    drawn = experiment_figures(data / "compare_algorithms_quick", results / "compare_algorithms_quick")
    assert {p.name for p in drawn} == {"heldout_vs_time.png", "reward_vs_step.png"}
    assert "| online DPO vs SFT-continued |" in (results / "learning_compare_algorithms_quick.md").read_text()
    assert (results / "learning_tooluse_quick.md").read_text() == run_page
    text = path.read_text()
    assert path.name == "learning-quick.md"
    assert "python benchmarks/experiment.py run tooluse --quick" in text  # the ToolUse section, from its learning.json
    assert "Not run yet: no committed data in" in text and "data/search_quick/" in text  # never made up
    assert "data/pythonmath_quick/" in text
    assert "| online DPO |" in text and "only the first 4 of the committed fixed set's 128 tasks" in text
    assert "did not record it" not in text  # compare.json carries its own commit: none taken at copy time
    assert "not a committed fixed set" in text  # --quick's subset file is flagged as not a held-out result
    assert "benchmarks/heldout/tooluse_v3.jsonl" in text and "fixed" in text
    assert "| RL (GRPO) vs SFT (cold start) |" in text and "95% interval" in text  # comparisons from per-task data
    assert "| GRPO (Dr. GRPO) vs SFT-continued |" in text  # the algorithms' comparisons, from their per-task data
    assert "| 8 of 128 |" in text and "| 4 of 128 |" in text  # the ledger saw both runners' evaluations
    assert learning_page.write_page(data, results, quick=True, ledger=ledger_file).read_text() == text


def test_the_old_scripts_write_the_pages_and_name_the_command_that_runs(quick_runs, capsys):
    """learning.py and compare_algorithms.py run no experiment (issue 58): without --page each names, in one line,
    the experiment.py command of the run it was asked for and exits with status 2, running nothing."""
    assert commands.learning_main(["--env", "AgentRL/PythonMath-v0", "--variant", "sft48", "--quick", "x=1"]) == 2
    assert capsys.readouterr().err == ("learning.py runs no experiment since issue 58: python benchmarks/experiment.py "
                                       "run pythonmath_sft48 --quick x=1 (its pieces resume; python "
                                       "benchmarks/experiment.py list names every experiment)\n")
    assert commands.learning_main(["--all"]) == 2 and "run tooluse --all" in capsys.readouterr().err
    assert commands.compare_main(["--seeds", "0,1"]) == 2
    assert "python benchmarks/experiment.py run compare_algorithms --seeds 0,1 " in capsys.readouterr().err
    results = quick_runs["results"]  # --page still writes the pages from the committed data
    page = results / "learning-quick.md"
    for main in (commands.learning_main, commands.compare_main):
        page.unlink(missing_ok=True)
        assert main(["--page", "--quick", "--results", str(results), "--ledger", str(quick_runs["ledger"])]) == 0
        assert "| online DPO |" in page.read_text() and "## ToolUse-v0" in page.read_text()


def test_pythonmath_quick_runs_the_text_only_pipeline_beside_the_tool_one(stopping_model_dir, tmp_path):
    """ReTool's comparison: the same stages with the tool switched off, in <out>/text_only, as extra rows."""
    from agentrl.algos.rollout.trajectory import load_trajectories

    out = tmp_path / "runs" / "learning-pythonmath-quick"
    ledger = _ledger_beside_sets(tmp_path / "sets")
    assert cli.main(["run", "pythonmath", "--quick", "--model", stopping_model_dir, "--out",
                     str(out), "--results", str(tmp_path / "results"), "--ledger", str(ledger),
                     "progress=false", "report_to=none"]) == 0
    summary = json.loads((out / "learning.json").read_text())
    assert [label for label, _ in summary["rows"]] == ["base", "SFT (cold start)", "RL (GRPO)",
                                                       "SFT control (same time)", "base, text-only",
                                                       "SFT text-only (cold start)", "RL text-only (GRPO)"]
    assert summary["config"]["env_kwargs"] == {"tiers": [1, 2]}
    text_cfg = json.loads((out / "text_only" / "grpo" / "config.json").read_text())
    assert text_cfg["env_kwargs"] == {"tiers": [1, 2], "tools_enabled": False}
    for stage in ("base", "sft", "rl"):  # both pipelines evaluate the same held-out tasks
        ids = [sorted({t.task["id"] for t in load_trajectories(d / "eval" / f"{stage}.jsonl")})
               for d in (out, out / "text_only")]
        assert ids[0] == ids[1] and len(ids[0]) == 4
    data = tmp_path / "results" / "data" / "pythonmath_quick"  # the committed data: per-task scores of each row
    tier_rows = family_table(json.loads((data / "learning.json").read_text()), data, "tier").splitlines()
    assert tier_rows[0].startswith("| Model | tier ") and len(tier_rows) == 2 + 7  # head, rule, seven stages
    page = (tmp_path / "results" / "learning_pythonmath_quick.md").read_text()
    assert "Code interpreter vs text-only, both after RL" in page and "Per tier" in page


def test_pythonmath_no_text_only_keeps_the_control_and_trains_no_second_model(stopping_model_dir, tmp_path):
    out = tmp_path / "runs" / "learning-pythonmath-quick"
    ledger = _ledger_beside_sets(tmp_path / "sets")
    assert cli.main(["run", "pythonmath", "--quick", "--no-text-only", "--model",
                     stopping_model_dir, "--out", str(out), "--results", str(tmp_path / "results"),
                     "--ledger", str(ledger), "progress=false", "report_to=none"]) == 0
    summary = json.loads((out / "learning.json").read_text())
    assert [label for label, _ in summary["rows"]] == ["base", "SFT (cold start)", "RL (GRPO)",
                                                       "SFT control (same time)"]
    assert not (out / "text_only").exists()
    assert "Code interpreter vs text-only" not in (tmp_path / "results" / "learning_pythonmath_quick.md").read_text()


def test_a_variant_reuses_the_cold_start_and_gets_its_own_section(quick_runs, stopping_model_dir):
    """--variant NAME --reuse-cold-start DIR: the plain run's base and cold start are read back (no new ledger rows
    for them), only RL and the control run; the page gives the variant a section comparing it with the plain RL."""
    import harness.pages as learning_page

    from agentrl.algos.evaluation.ledger import read

    runs, results, ledger_file = quick_runs["runs"], quick_runs["results"], quick_runs["ledger"]
    plain = runs / "learning-tooluse-quick"
    before = len(read(ledger_file))
    out = runs / "learning-tooluse-guided-quick"
    assert cli.main(["run", "tooluse_guided", "--quick", "--model", stopping_model_dir,
                     "--reuse-cold-start", str(plain), "--out", str(out), "--results", str(results),
                     "--ledger", str(ledger_file), "progress=false", "report_to=none"]) == 0
    assert (out / "eval" / "sft.jsonl").read_bytes() == (plain / "eval" / "sft.jsonl").read_bytes()
    assert json.loads((out / "grpo" / "config.json").read_text())["grpo"]["guidance"] == "luffy"
    new = [r for r in read(ledger_file)[before:]]
    assert len(new) == 2  # the RL and the control evaluations; base and cold start were read back
    summary = json.loads((results / "data" / "tooluse_guided_quick" / "learning.json").read_text())
    assert summary["variant"] == "guided" and "grpo.guidance=luffy" in summary["overrides"]
    assert summary["cold_start_from"] == str(plain)
    text = learning_page.write_page(results / "data", results, quick=True, ledger=ledger_file).read_text()
    title = next(line for line in text.splitlines() if line.startswith("## ToolUse-v0, variant `guided`: "))
    assert "grpo.guidance=luffy" in title
    assert "read back from" in text and "| RL (GRPO) vs the plain recipe's RL (GRPO) |" in text
    with pytest.raises(SystemExit, match="no finished cold start"):
        cli.main(["run", "tooluse_relift", "--quick", "--reuse-cold-start", str(out / "nowhere"),
                  "--out", str(runs / "x"), "--ledger", str(ledger_file)])
    with pytest.raises(SystemExit, match="no experiment 'tooluse_x'; declared: "):  # a run is of a declared record
        cli.main(["run", "tooluse_x", "--quick", "--out", str(runs / "x")])
