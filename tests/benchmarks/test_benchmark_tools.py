"""The pure parts of the benchmark scripts: output parsing (run_all), the naive baseline (memory), tables (learning).

The benchmarks themselves print figures and never assert; these tests check that what they compute and report
is right.
"""

from __future__ import annotations

import json

import harness.failure_modes as fm
import harness.suite as run_all
import pytest
from harness.machine import machine
from harness.results_page import tables
from harness.tables import extra_table
from helpers import ROOT, load_benchmark

BENCH = ROOT / "benchmarks"


_load = load_benchmark


def test_tables_finds_each_markdown_table():
    text = "intro\n| a | b |\n|---|---:|\n| 1 | 2 |\nbetween\n| x |\n|---|\n\n| lone row |\ntail"
    found = tables(text)
    assert found == ["| a | b |\n|---|---:|\n| 1 | 2 |", "| x |\n|---|"]  # a single '|' line is not a table


def test_clean_drops_progress_bars_and_loader_noise():
    raw = ("model ready\n"
           "rollout:  10%|#         | 1/10 [00:01<00:09,  1.00it/s]\rrollout: 100%|##########| 10/10 [00:10<00:00,"
           "  1.00it/s]\n"
           "Converting and de-quantizing GGUF tensors...: 100%\n"
           "\n"
           "| a |\n")
    assert run_all.clean(raw) == "model ready\n| a |"


def test_quick_arguments_name_real_options():
    """Every --quick argument list only uses flags the script's parser defines."""
    for name, args in run_all.QUICK_ARGS.items():
        source = (BENCH / f"{name}.py").read_text()
        for flag in (a for a in args if a.startswith("--")):
            assert f'"{flag}"' in source, f"{name}.py has no {flag} option"


def test_machine_description_names_cpu_ram_and_versions():
    text = "\n".join(machine())
    for needle in ("CPU:", "RAM:", "torch", "transformers", "load average", "git commit"):
        assert needle in text


def test_naive_baseline_matches_chunked_logprobs():
    """The memory benchmark compares two ways of computing the same numbers."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl.algos.objectives.logprobs import token_logprobs

    memory = _load("memory")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    ids = torch.randint(0, 97, (3, 11))
    mask = torch.ones_like(ids)
    naive = memory.naive_logprobs(model, ids, mask)
    chunked = token_logprobs(model, ids, mask, chunk_size=4)
    assert naive.shape == chunked.shape == ids.shape
    assert torch.allclose(naive, chunked, atol=1e-5)
    assert torch.all(naive[:, 0] == 0)


def test_memory_episodes_reads_saved_rows_and_names_bad_lines(tmp_path):
    """memory.py --episodes: the first n episodes' token ids and masks; a malformed line is named by file:line."""
    import json

    memory = _load("memory")
    good = tmp_path / "eps.jsonl"
    good.write_text("\n".join(json.dumps({"token_ids": list(range(k, k + 5)), "loss_mask": [0, 0, 1, 1, 1],
                                          "reward": 1.0}) for k in range(3)) + "\n")
    seqs, masks = memory.load_episodes(str(good), 2)
    assert seqs == [[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]] and masks == [[0, 0, 1, 1, 1]] * 2
    with pytest.raises(SystemExit, match="3 episodes, --rows asks for 4"):
        memory.load_episodes(str(good), 4)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text().splitlines()[0] + "\n{\"token_ids\": [1, 2]}\n")
    with pytest.raises(SystemExit, match=r"bad.jsonl:2: not an episode"):
        memory.load_episodes(str(bad), 2)


def test_reward_of_the_trl_comparison():
    trl_bench = _load("train_vs_trl")
    assert trl_bench.distinct_word_share("") == 0.0
    assert trl_bench.distinct_word_share("a b a b") == 0.5
    assert trl_bench.distinct_word_share("The the THE") == 1 / 3


def test_learning_extra_table_reports_rates():
    from agentrl.algos.evaluation.report import EvalReport

    rows = [("base", EvalReport(n=4, num_tasks=2, tool_use_rate=0.25, valid_tool_call_rate=0.5, mean_reward=-0.1,
                                env_metrics={"self_correction": 0.125})),
            ("RL", EvalReport(n=4, num_tasks=2, tool_use_rate=1.0, valid_tool_call_rate=1.0, mean_reward=0.75))]
    table = extra_table(rows).splitlines()
    assert table[0].endswith("| Self-correction |")
    assert table[2] == "| base | 25.0% | 50.0% | -0.100 | 0.0% | 12.5% |"
    assert table[3] == "| RL | 100.0% | 100.0% | +0.750 | 0.0% | 0.0% |"


_LEARNING_PAGE = """# Learning results

## Held-out sets

| Set | Env |
|---|---|
| `tooluse_v2` | ToolUse |

## ToolUse-v0: the main job

Command: `python benchmarks/learning.py` (commit `abc`).

Held-out: 128 tasks of `benchmarks/heldout/tooluse_v2.jsonl` (the committed fixed set `tooluse_v2`).

| Model | Average@1 |
|---|---:|
| RL (GRPO) | 90.0% |

| Comparison | A | B | A - B (points) | 95% interval | Goal | Verdict |
|---|---:|---:|---:|---|---|---|
| RL vs SFT | 90.0% | 60.0% | +30.0 | [+20.0, +40.0] | >= +15 | **met** (decided) |

Per task family (Average@N):

| Model | add |
|---|---:|
| RL | 95% |

Command: `python benchmarks/learning.py`, commit `abc`.

## Search-v0

Not run yet: no committed data in `docs/results/data/search/`.

## Every configuration judged on each held-out set (the ledger)

| Time | Command |
|---|---|
| t | `agentrl eval` |
"""


def test_learning_only_embeds_just_the_page_generated_from_committed_data(tmp_path):
    results = tmp_path / "results"
    (results / "archive").mkdir(parents=True)
    (results / "learning.md").write_text(_LEARNING_PAGE, encoding="utf-8")
    # a page written straight from a run directory, and an archived one: figures without committed data
    (results / "learning_x.md").write_text("# Proof X\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", encoding="utf-8")
    (results / "archive" / "learning_y.md").write_text("# Proof Y\n\n| c |\n|---|\n| 3 |\n", encoding="utf-8")
    page = tmp_path / "results.md"
    page.write_text("# Benchmarks\n\n## Benchmarks\n\nkept\n\n## Proof of learning\n\n### Old\n\nstale\n",
                    encoding="utf-8")
    assert run_all.main(["--learning-only", "--out", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "kept" in text and "stale" not in text and text.count("## Proof of learning") == 1
    assert "Proof X" not in text and "| 1 | 2 |" not in text and "Proof Y" not in text and "| 3 |" not in text
    assert "[results/learning.md](results/learning.md)" in text
    # the archive left the tree (issue 58): the section says where the history keeps it, and links nothing there
    assert "`git show 6e899db:docs/results/archive/README.md`" in text and "](results/archive/" not in text
    tool_use = text[text.index("### ToolUse-v0: the main job"):text.index("### Search-v0")]
    assert "| RL (GRPO) | 90.0% |" in tool_use and "| RL vs SFT | 90.0% | 60.0% | +30.0 | [+20.0, +40.0]" in tool_use
    assert "| RL | 95% |" not in tool_use  # the per-family table stays on the full page
    assert tool_use.count("Command:") == 1 and "Command: `python benchmarks/learning.py` (commit `abc`)." in tool_use
    assert "Held-out: 128 tasks of `benchmarks/heldout/tooluse_v2.jsonl`" in tool_use
    assert "Not run yet: no committed data in `docs/results/data/search/`." in text
    assert "| `tooluse_v2` | ToolUse |" not in text and "`agentrl eval`" not in text  # sets and ledger: not embedded
    (results / "archive" / "README.md").write_text("# Archive\n", encoding="utf-8")
    # the committed page (every section not run yet on a fresh clone) embeds one entry per experiment
    (results / "learning.md").write_bytes((ROOT / "docs" / "results" / "learning.md").read_bytes())
    assert run_all.main(["--learning-only", "--out", str(page)]) == 0
    learned = page.read_text(encoding="utf-8").split("## Proof of learning", 1)[1]
    committed = (ROOT / "docs" / "results" / "learning.md").read_text(encoding="utf-8")
    experiments = [ln[3:] for ln in committed.splitlines() if ln.startswith("## ")
                   and not ln.startswith(("## Summary", "## Held-out sets", "## Diagnostics and failed",
                                          "## Every configuration", "## Pages without"))]
    # three envs and the algorithm comparison, the three pre-declared experiments with a section (run or not), plus
    # one section per variant run and per earlier comparison kept with committed data
    variants = [e for e in experiments if ", variant `" in e]
    earlier = [e for e in experiments if e.startswith("An earlier algorithms comparison")]
    declared = [e for e in experiments if e.endswith("(pre-declared)")]  # AXES, LR_CHOICE, LR_EDGE, EDGE
    assert len(declared) == 4, declared
    assert len(experiments) - len(variants) - len(earlier) - len(declared) == 4
    committed_variants = [d for d in (ROOT / "docs" / "results" / "data").glob("*/learning.json")
                          if json.loads(d.read_text(encoding="utf-8")).get("variant")]
    from harness.experiments import RECORDS  # diagnostics' sections are in the diagnostics part of the page

    DIAGNOSTIC_RUNS = {name for name, r in RECORDS.items() if r.diagnostic}

    assert len(variants) == len([d for d in committed_variants if d.parent.name not in DIAGNOSTIC_RUNS])
    committed_earlier = [d for d in (ROOT / "docs" / "results" / "data").glob("compare_algorithms_*/compare.json")
                         if not d.parent.name.endswith("_quick") and d.parent.name not in DIAGNOSTIC_RUNS]
    assert len(earlier) == len(committed_earlier)
    # the pre-declared experiments' sections (their pieces, pass@k, decisions) stay on learning.md only
    assert [ln[4:] for ln in learned.splitlines() if ln.startswith("### ")] == [e for e in experiments
                                                                              if e not in declared]
    assert "(`git show 6e899db:docs/results/archive/README.md`): history, not results" in learned
    (results / "learning.md").unlink()
    assert run_all.main(["--learning-only", "--out", str(page)]) == 0
    assert "No results/learning.md yet" in page.read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="does not exist"):
        run_all.main(["--learning-only", "--out", str(tmp_path / "missing.md")])


def test_full_size_runs_are_kept_beside_quick_ones(tmp_path, monkeypatch):
    import datetime

    page = tmp_path / "results.md"
    page.write_text("# Benchmark results\n\n## Benchmarks\n\nquick rows\n\n## Proof of learning\n\nlearned\n",
                    encoding="utf-8")

    def fake(name, out):
        return {"name": name, "command": f"python benchmarks/{name}.py", "rc": 0, "wall": 5.0, "text": out}

    header, started = ["- CPU: a test CPU", "- git commit abc1234"], datetime.datetime(2026, 12, 2, 3, 30)
    run_all.write_full(page, [fake("memory", "| a |\n|---|\n| old |")], header, started)
    run_all.write_full(page, [fake("rollout_throughput", "| r |\n|---|\n| 1 |"),
                              fake("memory", "| a |\n|---|\n| new |")], header, started)
    text = page.read_text(encoding="utf-8")
    assert text.index("quick rows") < text.index("## Full-size runs") < text.index("## Proof of learning")
    assert "| new |" in text and "| old |" not in text and "| 1 |" in text and "learned" in text
    assert text.index("### rollout_throughput (full size)") < text.index("### memory (full size)")
    assert "at commit abc1234; CPU: a test CPU" in text
    # regenerating the quick rows keeps the full-size section as it is
    monkeypatch.setattr(run_all, "run", lambda name, args, timeout: fake(name, "| q |\n|---|\n| quick again |"))
    assert run_all.main(["--quick", "--only", "env_throughput", "--out", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "| quick again |" in text and "quick rows" not in text
    assert text.count("## Full-size runs") == 1 and "| new |" in text and "| 1 |" in text
    assert text.index("## Full-size runs") < text.index("## Proof of learning")


def test_failure_modes_summarise_episodes_into_compact_rows_and_a_table(tmp_path):
    def turn(kind, name=None, answer=None, observation=""):
        return {"parsed": {"kind": kind, "name": name, "answer": answer}, "observation": observation}

    early = {"task": {"id": "a-1", "family": "add_multiply"}, "reward": 0.0,
             "turns": [turn("tool_call", "add", observation="1164"), turn("answer", answer="1164")]}
    chain = {"task": {"id": "s-1", "family": "stock_total"}, "reward": 1.0,
             "turns": [turn("tool_call", "stock", observation="106"), turn("tool_call", "stock", observation="98"),
                       turn("tool_call", "add", observation="204"), turn("answer", answer="204")]}
    silent = {"task": {"id": "d-1", "family": "days"}, "reward": -0.1, "turns": [turn("answer", answer="3")]}
    assert fm.summarise(early) == {"id": "a-1", "family": "add_multiply", "reward": 0.0, "calls": ["add"],
                                   "answer": "first"}
    assert fm.summarise(chain)["answer"] == "last" and fm.summarise(silent)["answer"] is None
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "rl.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (early, chain, silent, early)))
    assert fm.write_rows(run, tmp_path / "data") == ["rl"]
    assert (tmp_path / "data" / "rl-s0" / "calls.jsonl").is_file()  # beside the row's per-task records
    assert fm.table(tmp_path / "data").splitlines()[2:] == ["| rl | 2 | add_multiply | add | first |",
                                                            "| rl | 1 | days | none | - |"]  # failures only
    (run / "eval" / "sft.jsonl").write_text('{"turns": 3}\n')
    with pytest.raises(SystemExit, match="sft.jsonl:1: not a saved episode"):
        fm.write_rows(run, tmp_path / "data")
