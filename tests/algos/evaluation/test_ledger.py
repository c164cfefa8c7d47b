"""The held-out sets' ledger: a row in the file the caller names for every evaluation on a fixed set (found by
content), none otherwise, and nothing anywhere without a ledger."""

from __future__ import annotations

import json
import shutil
import sys
import types

import pytest
from helpers import ROOT

import agentrl.algos.evaluation.evaluate as ev
from agentrl.algos.evaluation import ledger
from agentrl.algos.rollout.trajectory import Trajectory

SETS = ROOT / "benchmarks" / "heldout"


def _set(name: str) -> list[dict]:
    return [json.loads(line) for line in (SETS / f"{name}.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture
def collect_half(monkeypatch):
    """A stand-in collector: the even-numbered tasks are answered correctly by every sample, the others
    never."""
    def collect(env, policy, tasks, group_size, config=None, *, env_kwargs=None, progress=False):
        return [Trajectory(token_ids=[1], loss_mask=[1], logprobs=[0.0], prompt_len=0, reward=0.0, group_id=g,
                           task=task, metrics={"correct": float(g % 2 == 0)})
                for g, task in enumerate(tasks) for _ in range(group_size)]

    mod = types.ModuleType("agentrl.algos.rollout.collector")
    mod.collect = collect
    monkeypatch.setitem(sys.modules, "agentrl.algos.rollout.collector", mod)


@pytest.fixture
def ledger_file(tmp_path):
    """A ledger in a folder holding copies of the fixed sets ``search`` and ``tooluse`` (sets are looked up
    beside the ledger file)."""
    folder = tmp_path / "sets"
    folder.mkdir()
    for name in ("search", "tooluse"):
        for suffix in (".jsonl", ".json"):
            shutil.copyfile(SETS / f"{name}{suffix}", folder / f"{name}{suffix}")
    return folder / "ledger.jsonl"


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_without_a_ledger_nothing_is_written_anywhere(collect_half, tmp_path, monkeypatch):
    """``ledger=None`` (the default): an evaluation of a fixed set's tasks records no row, neither in the
    repository's ledger nor in the working directory."""
    monkeypatch.chdir(tmp_path)
    repo_before, tmp_before = _files(SETS), _files(tmp_path)
    report = ev.evaluate("AgentRL/ToolUse-v0", object(), _set("tooluse")[:8], n=1, progress=False)
    assert _files(SETS) == repo_before and _files(tmp_path) == tmp_before
    assert "ledger" not in report.settings


def test_a_ledger_path_gets_exactly_one_row(collect_half, ledger_file):
    repo_before = _files(SETS)
    report = ev.evaluate("AgentRL/ToolUse-v0", object(), _set("tooluse"), n=1, progress=False,
                         ledger=ledger_file)
    [row] = ledger.read(ledger_file)
    assert row["set"] == "tooluse" and report.settings["ledger"] == {"id": row["id"], "set": "tooluse"}
    assert _files(SETS) == repo_before  # the repository's ledger is untouched
    assert ledger.read(ledger_file.parent / "absent.jsonl") == []


def test_a_copy_of_a_fixed_set_is_recognised_by_content(collect_half, tmp_path, ledger_file):
    tasks = _set("search")
    copy = tmp_path / "elsewhere.jsonl"
    copy.write_text(ledger.dumps(tasks))  # the set under another name: still the set
    from agentrl.envs.datasets import load_rows

    report = ev.evaluate("AgentRL/Search-v0", object(), load_rows(copy), n=2, progress=False,
                         ledger=ledger_file, ledger_fields={"adapter": "base"}, out=tmp_path / "eval" / "x.jsonl")
    [row] = ledger.read(ledger_file)
    meta = json.loads((SETS / "search.json").read_text())
    assert row["set"] == "search" and row["set_sha256"] == meta["sha256"]
    assert row["tasks"] == row["set_tasks"] == 128
    assert row["primary_metric"] == "macro_em" and row["adapter"] == "base" and row["n"] == 2
    assert row["weights"] is None  # object() has no local weights
    assert len(row["per_task"]) == 128 and row["per_task"][tasks[0]["id"]] == 1.0
    assert set(row["scores"]["by_family"]) == {"fanoutqa", "wiki_description"}
    assert row["scores"]["average_at_n"] == pytest.approx(report.average_at_n)
    assert row["commit"] is None and row["dirty"] is None  # the ledger's folder (tmp) is in no git checkout
    assert row["command"] and row["config_sha256"] and row["time"].endswith("+00:00")
    assert report.settings["ledger"] == {"id": row["id"], "set": "search"}
    summary = json.loads((tmp_path / "eval" / "x.summary.json").read_text())
    assert summary["settings"]["ledger"]["id"] == row["id"]


def test_subsets_are_recorded_as_such_and_other_tasks_not_at_all(collect_half, ledger_file):
    tasks = _set("tooluse")
    ev.evaluate("AgentRL/ToolUse-v0", object(), tasks[:8], n=1, progress=False, ledger=ledger_file)
    [row] = ledger.read(ledger_file)
    assert row["set"] == "tooluse" and row["tasks"] == 8 and row["set_tasks"] == 128
    assert row["primary_metric"] == "average_at_n"
    changed = [dict(tasks[0], answer="-1"), *tasks[1:8]]  # same ids, other content: not the set
    ev.evaluate("AgentRL/ToolUse-v0", object(), changed, n=1, progress=False, ledger=ledger_file)
    ev.evaluate("AgentRL/ToolUse-v0", object(), [{"id": "x", "family": "add"}], n=1, progress=False,
                ledger=ledger_file)
    ev.evaluate("AgentRL/ToolUse-v0", object(), tasks[:8], n=1, progress=False)  # no ledger: no row
    assert len(ledger.read(ledger_file)) == 1


def test_the_commit_is_read_once_per_checkout(monkeypatch):
    """A runner reads the commit at its start; a commit made while it runs is not what its rows name."""
    first = ledger.git_state(SETS)
    assert ledger.git_state(ROOT) == first  # the same checkout: the same (cached) state
    monkeypatch.setattr(ledger.subprocess, "run", lambda *a, **k: pytest.fail("read the commit again"))
    assert ledger.git_state(SETS) == first


def test_weights_fingerprint_tells_weights_apart():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(8, 4)
    policy = types.SimpleNamespace(model=model)
    first = ledger.weights_fingerprint(policy)
    assert first == ledger.weights_fingerprint(policy)
    with torch.no_grad():
        model.weight.add_(0.01)
    assert ledger.weights_fingerprint(policy) != first


def test_command_line_and_adapter_hash(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # a script is shown relative to the working directory
    assert ledger.command_line(["/usr/bin/agentrl", "eval", "--tasks-file", "a b.jsonl"]) == \
        "agentrl eval --tasks-file 'a b.jsonl'"
    assert ledger.command_line([str(ROOT / "benchmarks" / "learning.py"), "--quick"]) == \
        "python benchmarks/learning.py --quick"
    (tmp_path / "adapter_model.safetensors").write_bytes(b"1")
    first = ledger.adapter_sha256(tmp_path)
    (tmp_path / "adapter_model.safetensors").write_bytes(b"2")
    assert ledger.adapter_sha256(tmp_path) != first


def test_macro_em_averages_data_sources_as_the_pages_and_the_report_do():
    """Macro-EM is one figure everywhere: the unweighted mean over data sources of each source's mean score (the
    results pages' bootstrap, ``summarize``'s Macro-EM, Search-R1's papers), not a mean over task families.
    Here source "math" holds 3 solved "add" tasks and 1 unsolved "mul" task: by source (0.75 + 0.5) / 2, by
    family (add 1.0, mul 0.0, quiz 0.0) it would be 1/3."""
    from agentrl.algos.evaluation.intervals import metric_value
    from agentrl.algos.evaluation.report import summarize

    tasks = [{"id": "a1", "family": "add", "data_source": "math"}, {"id": "a2", "family": "add", "data_source": "math"},
             {"id": "a3", "family": "add", "data_source": "math"}, {"id": "m1", "family": "mul", "data_source": "math"},
             {"id": "q1", "family": "add", "data_source": "quiz"}, {"id": "q2", "data_source": "quiz"}]
    correct = [1, 1, 1, 0, 1, 0]
    trajs = [Trajectory(token_ids=[1], loss_mask=[1], logprobs=[0.0], prompt_len=0, reward=0.0, group_id=g, task=t,
                        metrics={"correct": float(c)})
             for g, (t, c) in enumerate(zip(tasks, correct, strict=True)) for _ in range(2)]
    rows = ledger.task_scores(trajs)
    got = ledger.scores(rows)
    assert got["macro_em"] == pytest.approx((0.75 + 0.5) / 2)
    assert got["macro_em"] == pytest.approx(summarize(trajs, 2).macro_em)
    assert got["macro_em"] == pytest.approx(metric_value(correct, "macro_em", [t["data_source"] for t in tasks]))
    assert got["by_family"] == {"add": 1.0, "mul": 0.0, "quiz": 0.0}  # per family, as before
    # without data sources the families are the groups (ToolUse-v0's rows), as the pages group them
    plain = [{"id": t["id"], "family": t.get("family", "x")} for t in tasks]
    for tr, t in zip(trajs, [p for p in plain for _ in range(2)], strict=True):
        tr.task = t
    assert ledger.scores(ledger.task_scores(trajs))["macro_em"] == pytest.approx((1.0 + 0.0 + 0.0) / 3)
