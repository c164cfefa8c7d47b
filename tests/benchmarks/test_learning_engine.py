"""``benchmarks/experiment.py run tooluse_vllm --engine vllm``: every evaluation and GRPO rollout of the run samples
through one real vLLM server (CPU build, ``.venv-vllm``; docs/engines.md) the run starts and stops; SFT trains in
process.

``--quick`` budgets on a tiny random Llama of hidden size 128 (vLLM's CPU attention has no kernel for the head size of
smaller ones); ``--out``, ``--results``, ``--data`` and ``--ledger`` (beside a copy of the fixed set) are temporary,
so nothing committed changes.
"""

from __future__ import annotations

import json
import shutil

import harness.experiment_cli as cli
import pytest
import requests
from harness.pages import env_section
from helpers import ROOT, adapter_loads, save_model_dir

from agentrl.algos.models import tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    # end_scale 5: replies end on their own now and then, so episodes are short
    return save_model_dir(tmp_path_factory.mktemp("tiny128"), tiny_model(tokenizer, hidden_size=128, end_scale=5.0),
                          tokenizer)


def test_learning_quick_samples_through_one_vllm_server(model_dir, tmp_path):
    out, results, data = tmp_path / "run", tmp_path / "results", tmp_path / "data"
    (tmp_path / "sets").mkdir()
    for name in ("tooluse_v3.jsonl", "tooluse_v3.json"):
        shutil.copyfile(ROOT / "benchmarks" / "heldout" / name, tmp_path / "sets" / name)
    ledger_file = tmp_path / "sets" / "ledger.jsonl"
    assert cli.main(["run", "tooluse_vllm", "--quick", "--engine", "vllm", "--no-control", "--model",
                     str(model_dir), "--out", str(out), "--results", str(results), "--data", str(data),
                     "--ledger", str(ledger_file), "progress=false", "report_to=none"]) == 0
    summary = json.loads((out / "learning.json").read_text())
    assert summary["engine"] == "vllm"
    assert [label for label, _ in summary["rows"]] == ["base", "SFT (cold start)", "RL (GRPO)"]
    for stage in ("base", "sft", "rl"):
        assert (out / "eval" / f"{stage}.summary.json").is_file()
    steps = [json.loads(line)["step"] for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]

    # one server, started by the run: it loaded the cold start's adapter, then the trainer's after each step
    log = (out / "vllm.log").read_text()
    assert log.count("vllm.entrypoints.openai.api_server") >= 1
    names = adapter_loads(out / "vllm.log")
    assert len(names) >= 3 and len(set(names)) == len(names), names
    port = log.split("--port ", 1)[1].split()[0]
    with pytest.raises(requests.ConnectionError):  # stopped at the run's end
        requests.get(f"http://127.0.0.1:{port}/health", timeout=5)

    # every evaluation left its row in the tests' ledger (never benchmarks/heldout/ledger.jsonl)
    assert ledger_file.read_text().count("\n") == 3
    page = (results / "learning_tooluse_vllm_quick.md").read_text()
    assert "Engine vllm" in page
    run = json.loads((data / "tooluse_vllm_quick" / "learning.json").read_text())
    section = "\n".join(env_section("AgentRL/ToolUse-v0", run, data / "tooluse_vllm_quick", True, results, {}))
    assert "engine vllm" in section
