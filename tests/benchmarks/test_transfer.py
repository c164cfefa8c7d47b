"""The transfer experiment: its declaration names only real benchmark parts, the runner writes per-task records (and a
ledger row) for each declared set through the evaluation path on a tiny random model, keeps every measurement (a
set is skipped, or measured again beside the first, never over it), and the page generates from the records and
regenerates byte for byte. No figure is asserted: a tiny random model scores nothing."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import harness.transfer_exec as transfer_exec
import pytest
from harness import export
from harness.layout import LEDGER
from harness.transfer import (
    ARMS,
    COMPARISONS,
    PROCEDURAL_FAMILIES,
    SETS,
    TRANSFER_DATA,
    TRANSFER_PAGE,
    arm,
    transfer_set,
)
from harness.transfer_page import render
from helpers import peft_copy, save_model_dir, tiny_train_model

# ---------------------------------------------------------------------------------------------- the declaration


@pytest.mark.parametrize("s", [s for s in SETS if s.env == "AgentRL/BFCL-v0"], ids=lambda s: s.name)
def test_each_bfcl_set_is_a_real_category_of_the_declared_size(s):
    from agentrl.envs.bfcl.loading import require_bfcl

    require_bfcl()
    from bfcl_eval.constants.category_mapping import ALL_CATEGORIES
    from bfcl_eval.utils import load_dataset_entry

    category = s.env_kwargs["category"]
    assert category in ALL_CATEGORIES
    assert len(load_dataset_entry(category)) == s.size  # BFCL's own data file, whether or not our env plays it
    assert s.first is None or s.first < s.size


def test_the_tau2_set_is_a_solo_domain_with_the_declared_tasks():
    from agentrl.envs import make_text_env
    from agentrl.envs.tau_bench.loader import DOMAINS

    [s] = [s for s in SETS if s.env == "AgentRL/TauBench-v0"]
    assert DOMAINS[s.env_kwargs["domain"]] is True  # tau2-bench has a solo mode for it: no user server needed
    env = make_text_env(s.env, dict(s.env_kwargs))
    assert env.solo and len(env.test_ids) == s.size
    assert [t["id"] for t in transfer_exec.select_tasks(s)] == sorted(env.test_ids, key=transfer_exec.natural_key)


def test_humaneval_is_every_problem_in_the_package_order():
    from agentrl.envs.humaneval.env import load_problems

    s = transfer_set("humaneval")
    assert s.size == len(load_problems()) == 164
    assert [t["id"] for t in transfer_exec.select_tasks(s)] == list(load_problems())


def test_subsets_are_the_first_tasks_by_id_and_names_resolve():
    s = transfer_set("bfcl_multiple")
    assert [t["id"] for t in transfer_exec.select_tasks(s)][:3] == ["multiple_0", "multiple_1", "multiple_2"]
    assert transfer_exec.natural_key("HumanEval/100") > transfer_exec.natural_key("HumanEval/99")
    assert {c.a for c in COMPARISONS} | {c.b for c in COMPARISONS} <= set(ARMS)
    with pytest.raises(ValueError, match="declared: bfcl_simple_python"):
        transfer_set("bfcl_simple")
    with pytest.raises(ValueError, match="declared: base, main_sft"):
        arm("grpo")


def test_the_procedural_arms_train_on_every_procedural_family_with_the_main_jobs_recipe():
    import shlex

    from agentrl.algos.cli import build_parser
    from agentrl.algos.cli_train import build_main_job_config
    from agentrl.algos.recipes.main_job import MainJobConfig
    from agentrl.envs.tool_use.procedural import FAMILIES

    assert set(PROCEDURAL_FAMILIES) == set(FAMILIES)
    for name in ("procedural_sft", "procedural"):
        argv = shlex.split(arm(name)["made_by"])
        assert argv[:2] == ["agentrl", "main-job"]
        cfg = build_main_job_config(build_parser().parse_args(argv[1:]))
        assert cfg.env_kwargs == {"families": list(PROCEDURAL_FAMILIES)}
        assert cfg.stages.sft["env_kwargs"] == {"families": list(PROCEDURAL_FAMILIES)}
        default = MainJobConfig()  # nothing else changed: the main job's recipe and budgets
        assert cfg.stages.rl == default.stages.rl and {**cfg.stages.sft, "env_kwargs": {}} == \
            {**default.stages.sft, "env_kwargs": {}}
        assert {k: v for k, v in vars(cfg).items() if k not in ("env_kwargs", "stages", "out")} == \
            {k: v for k, v in vars(default).items() if k not in ("env_kwargs", "stages", "out")}


# ---------------------------------------------------------------------------------------------- runner and page


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random model folder and two LoRA adapters on it (the SFT and GRPO arms)."""
    from agentrl.algos.models import load_tokenizer
    from agentrl.algos.models.lora import save_adapter

    tokenizer = load_tokenizer("smollm2-135m")
    root = tmp_path_factory.mktemp("transfer")
    base = tiny_train_model(tokenizer, stop_scale=8.0)
    model_dir = save_model_dir(root / "model", base, tokenizer)
    adapters = {name: str(save_adapter(peft_copy(base, seed), root / name / "adapter")) for name, seed in
                (("main_sft", 1), ("main_grpo", 2))}
    (root / "main_sft" / "config.json").write_text(json.dumps({"algo": "sft", "steps": 16, "lr": 5e-4}))
    return str(model_dir), adapters


@pytest.fixture
def short_budgets(monkeypatch):
    """Replies of at most 8 tokens and 2 turns: the tiny model's text is noise, only the path is under test."""
    from agentrl.algos.rollout.collector import CollectorConfig

    monkeypatch.setattr(transfer_exec, "collector_config",
                        lambda s: CollectorConfig(max_turns=min(2, s.max_turns), max_new_tokens=8, temperature=0.0))


def options(tmp_path: Path, model: str, **kw) -> transfer_exec.Options:
    return transfer_exec.Options(**{"arm": "base", "model": model, "data": tmp_path / "data", "out": tmp_path / "runs",
                                   "ledger": tmp_path / "ledger.jsonl", "limit": 2, "progress": False, **kw})


def test_the_runner_writes_records_and_ledger_rows_and_the_page_reads_them(tiny, short_budgets, tmp_path,
                                                                            only_export_writes):
    model, adapters = tiny
    only_export_writes.append((tmp_path / "data").resolve())  # records and metas through harness.export alone
    outcome = transfer_exec.run(options(tmp_path, model))
    runnable = [s.name for s in SETS if not s.requires]
    for name in runnable:
        assert outcome[name] == f"written {(tmp_path / 'data' / 'base-s0' / name).as_posix()}.jsonl", outcome
    for s in SETS:
        if s.requires and not outcome[s.name].startswith("written"):
            assert outcome[s.name].startswith("not run: ")  # the env's own one-line error
    written = [s.name for s in SETS if outcome[s.name].startswith("written")]  # with the sets that need more, once
    for name in written:
        rows = [json.loads(line) for line in (tmp_path / "data" / "base-s0" / f"{name}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(set(r) >= {"id", "score", "reward", "called_tool", "format_ok", "reply"}
                                      for r in rows)
        assert [r["id"] for r in rows] == [t["id"] for t in transfer_exec.select_tasks(transfer_set(name))[:2]]
        meta = json.loads((tmp_path / "data" / "base-s0" / f"{name}.meta.json").read_text())
        assert meta["limit"] == 2 and meta["adapter"] is None and meta["decoding"]["temperature"] == 0.0
        assert {"commit", "dirty", "seconds", "packages", "command"} <= set(meta)
    ledger = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert sorted(r["set"] for r in ledger) == sorted(f"transfer/{n}" for n in written)
    assert {r["adapter"] for r in ledger} == {"base"} and all(r["tasks"] == 2 for r in ledger)

    for name in ("main_sft", "main_grpo"):
        transfer_exec.run(options(tmp_path, model, arm=name, adapter=adapters[name],
                                 sets=("bfcl_multiple", "bfcl_irrelevance")))
    meta = json.loads((tmp_path / "data" / "main_sft-s0" / "bfcl_multiple.meta.json").read_text())
    assert meta["adapter"] == adapters["main_sft"] and len(meta["adapter_sha256"]) == 16
    assert meta["adapter_run"]["algo"] == "sft" and meta["adapter_run"]["steps"] == 16  # its run's config.json
    page = render(tmp_path / "data", tmp_path / "ledger.jsonl")
    assert page == render(tmp_path / "data", tmp_path / "ledger.jsonl")
    assert "| `bfcl_multiple` | `base` | `base` | 2 | 1 | " in page  # the ledger's rows, one evaluation each
    assert "| `bfcl_multiple` | `main_grpo` | `" in page
    assert page.count("**smoke test, first 2: not a result**") == len(written) + 4
    judged = [line for line in page.splitlines() if line.startswith("| BFCL multiple | main job: GRPO | main job: SFT")]
    assert len(judged) == 1 and ("tie" in judged[0] or "met" in judged[0] or "missed" in judged[0]), judged
    assert "| BFCL parallel | main job: GRPO | main job: SFT cold start |  |  | not run |" in page
    assert "| procedural tools: SFT -> GRPO | not run |" in page


def test_regrade_grades_the_stored_cut_replies_and_leaves_the_rest(tokenizer, tmp_path, monkeypatch):
    import dataclasses

    from harness.transfer_regrade import regrade_cut
    from helpers import ScriptedPolicy

    from agentrl.algos.rollout.collector import CollectorConfig, collect
    from agentrl.envs.bfcl.base import BFCLBase
    from agentrl.envs.bfcl.env import BFCLEnv

    s = transfer_set("bfcl_irrelevance")
    tasks = transfer_exec.select_tasks(s)[:3]
    env = BFCLEnv(category="irrelevance")
    config = CollectorConfig(max_new_tokens=64, max_turns=1, temperature=0.0)

    def measured(end_token: bool, task_list):  # the ground-truth refusal, cut (no end token) or not
        policy = ScriptedPolicy(tokenizer, [], end_token=end_token)
        policy.actions = {t["question"][0][-1]["content"]: env.demo_actions(t) for t in task_list}
        return collect(s.env, policy, task_list, 1, config, env_kwargs=dict(s.env_kwargs))

    monkeypatch.setattr(BFCLBase, "grades_cut_replies", False)  # as the collector graded up to 070684b
    old = measured(False, tasks[:2]) + measured(True, tasks[2:])
    monkeypatch.undo()
    assert [t.termination for t in old] == ["truncated", "truncated", "answered"]
    data, out = tmp_path / "data" / "base-s0", tmp_path / "runs" / "base"
    data.mkdir(parents=True), out.mkdir(parents=True)
    rows = transfer_exec.records(old)
    (data / f"{s.name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    meta = {"model": "smollm2-135m", "collector": dataclasses.asdict(config),
            "scores": {"score": 1 / 3, "called_tool": 0.0, "format_ok": 1 / 3}}
    (data / f"{s.name}.meta.json").write_text(json.dumps(meta))
    (out / f"{s.name}.episodes.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in old))

    outcome = regrade_cut(tmp_path / "data", tmp_path / "runs", "the command")
    assert list(outcome.values()) == ["2 of 2 cut replies re-graded; score 33.3% -> 100.0%"]
    new = [json.loads(line) for line in (data / f"{s.name}.jsonl").read_text().splitlines()]
    assert [r["score"] for r in new] == [1.0, 1.0, 1.0] and new[2] == rows[2]  # the uncut one untouched
    assert [r["reply"] for r in new] == [r["reply"] for r in rows]  # the same replies, graded again
    meta = json.loads((data / f"{s.name}.meta.json").read_text())
    assert meta["scores"]["score"] == 1.0 and meta["regraded"]["scores_before"]["score"] == 1 / 3
    assert (meta["regraded"]["cut"], meta["regraded"]["changed"], meta["regraded"]["command"]) == (2, 2, "the command")
    assert (out / f"{s.name}.episodes.before-regrade.jsonl").is_file()
    assert regrade_cut(tmp_path / "data", tmp_path / "runs", "again") == {}  # done once


def write_records(folder: Path, arm_name: str, set_name: str, scores: list[float], called: list[bool],
                  adapter_run: dict | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"t{i}", "score": sc, "reward": sc, "called_tool": c, "format_ok": c, "reply": ""}
            for i, (sc, c) in enumerate(zip(scores, called, strict=True))]
    (folder / f"{set_name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{set_name}.meta.json").write_text(json.dumps({"commit": "0123456789abcdef", "dirty": False,
                                                              "adapter_run": adapter_run}))


def test_the_page_judges_paired_records_with_the_learning_pages_rules(tmp_path):
    """GRPO right on 30 of 40 tasks where SFT is right on 10 (and never wrong where SFT is right): met, decided;
    on irrelevance one task apart: a tie; the base model never calls: its 0 is explained."""
    data = tmp_path / "data"
    n = 40
    write_records(data / "main_sft-s0", "main_sft", "bfcl_multiple", [1.0] * 10 + [0.0] * 30, [True] * n)
    write_records(data / "main_grpo-s0", "main_grpo", "bfcl_multiple", [1.0] * 30 + [0.0] * 10, [True] * n,
                  adapter_run={"algo": "grpo", "steps": 16, "lr": 2e-4})
    write_records(data / "main_sft-s0", "main_sft", "bfcl_irrelevance", [1.0] * 5 + [0.0] * 35, [False] * n)
    write_records(data / "main_grpo-s0", "main_grpo", "bfcl_irrelevance", [1.0] * 6 + [0.0] * 34, [False] * n)
    write_records(data / "base-s0", "base", "bfcl_multiple", [0.0] * n, [False] * n)
    page = render(data, tmp_path / "no-ledger.jsonl")
    assert "## The ledger" in page and page.rstrip().endswith("None yet.")
    assert ("| BFCL multiple | main job: GRPO | main job: SFT cold start | 75.0% | 25.0% | +50.0 [" in page)
    [line] = [x for x in page.splitlines() if x.startswith("| BFCL multiple | main job: GRPO |")]
    assert line.endswith("| 20 / 0 | **met** (decided) |"), line
    [line] = [x for x in page.splitlines() if x.startswith("| BFCL irrelevance | main job: GRPO |")]
    assert "**tie** (1 vs 0 tasks" in line, line
    assert re.search(r"^- \*\*main job: GRPO vs main job: SFT cold start\*\* \(A is B trained further in the same "
                     r"run: 16 GRPO steps at lr 2\.0e-4; more training, not the same time\): BFCL multiple "
                     r"\+50\.0 \[[^]]+\] met; BFCL irrelevance \+2\.5 \[[^]]+\] tie; not judged: BFCL simple_python, "
                     r"BFCL parallel,", page, re.M)
    assert ("- **procedural tools: SFT -> GRPO vs procedural tools: SFT cold start**: not measured yet." in page)
    assert "- base (SmolLM2-135M) scores 0: no episode called a tool (0% of final replies parsed)." in page
    assert "- **base (SmolLM2-135M)** scores 0 on every set it was measured on (1)" in page
    assert "| main job: SFT cold start | 25.0% [" in page and "| 100.0% | 100.0% | 40 | commit `0123456789` |" in page


def test_a_measured_set_is_skipped_and_a_redo_is_kept_beside_it(tiny, short_budgets, tmp_path):
    model, _ = tiny
    o = options(tmp_path, model, sets=("bfcl_irrelevance",))
    transfer_exec.run(o)
    first = tmp_path / "data" / "base-s0" / "bfcl_irrelevance.jsonl"
    before = first.read_bytes()
    os.utime(first, (0, 0))
    assert transfer_exec.run(o)["bfcl_irrelevance"].startswith("skipped: ")
    o.redo = True
    assert transfer_exec.run(o)["bfcl_irrelevance"].endswith("bfcl_irrelevance.redo1.jsonl")
    assert transfer_exec.run(o)["bfcl_irrelevance"].endswith("bfcl_irrelevance.redo2.jsonl")
    assert first.read_bytes() == before and first.stat().st_mtime == 0  # the first measurement untouched
    with pytest.raises(FileExistsError):
        export.write_new(first, "")
    killed = tmp_path / "data" / "base-s0" / "bfcl_irrelevance.redo3.meta.json"
    killed.write_text("{}")  # a run killed after its meta, before its records: not a measurement
    assert transfer_exec.run(o)["bfcl_irrelevance"].endswith("bfcl_irrelevance.redo3.jsonl")
    assert json.loads(killed.read_text())["set"] == "bfcl_irrelevance"
    assert not {"key", "kind", "wall_seconds"} & set(json.loads(killed.read_text()))  # the runner's own meta only
    page = render(tmp_path / "data", tmp_path / "ledger.jsonl")
    assert "## Measured again" in page
    assert page.count("- `base` on `bfcl_irrelevance`: ") == 3
    assert "| `bfcl_irrelevance` | `base` | `base` | 2 | **4** | " in page  # the ledger has all four


def test_an_arm_is_one_set_of_weights(tiny, short_budgets, tmp_path):
    model, adapters = tiny
    transfer_exec.run(options(tmp_path, model, arm="main_sft", adapter=adapters["main_sft"],
                             sets=("bfcl_irrelevance",)))
    # other weights under the same arm: refused before anything loads, naming what the arm already holds
    with pytest.raises(ValueError, match=r"holds measurements of other weights \(adapter sha256 [0-9a-f]{16}, "
                                         r"trained at None: bfcl_irrelevance\).*declare this training run"):
        transfer_exec.run(options(tmp_path, model, arm="main_sft", adapter=adapters["main_grpo"],
                                 sets=("bfcl_multiple",)))
    assert not (tmp_path / "data" / "main_sft-s0" / "bfcl_multiple.meta.json").exists()
    # the same weights go on with the arm's other sets
    done = transfer_exec.run(options(tmp_path, model, arm="main_sft", adapter=adapters["main_sft"],
                                    sets=("bfcl_multiple",)))
    assert done["bfcl_multiple"].startswith("written")


def test_the_sets_are_pieces_of_the_one_runner_and_a_budget_stops_between_them(tmp_path, monkeypatch):
    """A measured set is a finished piece (skipped, its time the estimate of the next); a budget stops before a set
    that would not fit, before any model loads; a run without it goes on where that one stopped."""
    import harness.axes_run as axes_run

    ran = []
    monkeypatch.setattr(transfer_exec.Evaluations, "load", lambda self: pytest.fail("no model for a stopped run"))
    real = axes_run.schedule
    monkeypatch.setattr(transfer_exec, "schedule", lambda pieces, *a, **kw: ran.append(pieces) or real(pieces, *a,
                                                                                                         **kw))
    folder = tmp_path / "data" / "base-s0"
    write_records(folder, "base", "bfcl_irrelevance", [1.0, 0.0], [True, True])
    meta = json.loads((folder / "bfcl_irrelevance.meta.json").read_text())
    (folder / "bfcl_irrelevance.meta.json").write_text(json.dumps({**meta, "seconds": 90.0}))
    o = transfer_exec.Options(arm="base", data=tmp_path / "data", out=tmp_path / "runs", limit=2, progress=False,
                              sets=("bfcl_irrelevance", "bfcl_multiple"), budget_minutes=1.0)
    outcome = transfer_exec.run(o)
    assert [[(p.key, p.kind) for p in pieces] for pieces in ran] == \
        [[("base-s0/bfcl_irrelevance", "eval:transfer"), ("base-s0/bfcl_multiple", "eval:transfer")]]
    assert outcome["bfcl_irrelevance"].startswith("skipped: ") and outcome["bfcl_irrelevance"].endswith(
        "bfcl_irrelevance.jsonl exists (--redo measures it again)")
    assert outcome["bfcl_multiple"] == "not run: --budget-minutes stopped before it (run again to go on)"
    assert not (folder / "bfcl_multiple.meta.json").exists()  # 90 s expected (the measured set's), 60 s left
    o.redo = True
    assert list(transfer_exec.plan(o, [transfer_set("bfcl_irrelevance")], folder)[0]) == \
        ["base-s0/bfcl_irrelevance.redo1"]  # --redo: a new piece beside the measured one


def test_bad_requests_fail_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="--arm main_grpo needs --adapter"):
        transfer_exec.check_options(transfer_exec.Options(arm="main_grpo"))
    with pytest.raises(ValueError, match="--arm base is the base model: it takes no --adapter"):
        transfer_exec.check_options(transfer_exec.Options(arm="base", adapter=str(tmp_path)))
    with pytest.raises(ValueError, match="no adapter_config.json"):
        transfer_exec.check_options(transfer_exec.Options(arm="main_sft", adapter=str(tmp_path)))
    with pytest.raises(ValueError, match="--limit is for smoke tests"):
        transfer_exec.check_options(transfer_exec.Options(arm="base", limit=2, data=TRANSFER_DATA))
    with pytest.raises(ValueError, match="unknown transfer set 'humaneval_plus'"):
        transfer_exec.check_options(transfer_exec.Options(arm="base", sets=("humaneval_plus",)))


def test_the_committed_page_regenerates_byte_for_byte():
    assert TRANSFER_PAGE.read_text(encoding="utf-8") == render(TRANSFER_DATA, LEDGER), \
        "docs/results/transfer.md is stale: python benchmarks/transfer.py --page"


def test_a_comparison_across_runs_is_shown_without_a_verdict(tmp_path):
    """The procedural run's GRPO against the main job's cold start: other training data and another cold start,
    so however large the difference, the page gives no verdict (as the learning pages do for such rows)."""
    data = tmp_path / "data"
    n = 40
    write_records(data / "main_sft-s0", "main_sft", "bfcl_multiple", [1.0] * 10 + [0.0] * 30, [True] * n)
    write_records(data / "procedural-s0", "procedural", "bfcl_multiple", [1.0] * 30 + [0.0] * 10, [True] * n)
    page = render(data, tmp_path / "no-ledger.jsonl")
    [line] = [x for x in page.splitlines()
              if x.startswith("| BFCL multiple | procedural tools: SFT -> GRPO | main job: SFT cold start |")]
    assert line.endswith("| 20 / 0 | no verdict (the cold starts differ) |"), line
    assert re.search(r"^- \*\*procedural tools: SFT -> GRPO vs main job: SFT cold start\*\* \(from another run, with "
                     r"other training data and another cold start: no verdict\): BFCL multiple \+50\.0 \[[^]]+\] "
                     r"no verdict;", page, re.M)
    assert " met" not in line
