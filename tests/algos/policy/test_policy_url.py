"""``agentrl train|eval --policy-url``: rollouts sampled by an OpenAI-compatible server (here the bundled reference
server on 127.0.0.1) with the trainer's LoRA adapter hot-swapped there after every optimizer step."""

from __future__ import annotations

import json
import re

import pytest
from helpers import record_adapter_swaps, save_model_dir, served_models, tiny_train_model

from agentrl.algos import cli
from agentrl.algos.models import load_model
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.policy.openai import OpenAIPolicy
from agentrl.algos.policy.server import serve_policy


@pytest.fixture(scope="module")
def train_model_dir(tmp_path_factory, tokenizer):
    return save_model_dir(tmp_path_factory.mktemp("tiny"), tiny_train_model(tokenizer), tokenizer)


@pytest.fixture
def server(train_model_dir):
    model, tok = load_model(str(train_model_dir), dtype="fp32", device="cpu")
    with serve_policy(HFPolicy(model, tok), model_name="tiny-base", enable_lora=True) as srv:
        yield srv


def test_train_with_policy_url_hot_swaps_the_adapter_each_step(server, train_model_dir, tmp_path, monkeypatch, capsys):
    swaps = record_adapter_swaps(monkeypatch, server.url)
    run = tmp_path / "run"
    assert cli.main(["train", "--algo", "grpo", "--env", "Test/Score-v0", "--model", str(train_model_dir),
                     "--out", str(run),
                     "--policy-url", server.url, "--adapter-dir", str(tmp_path / "adapters"), "--device", "cpu",
                     "--dtype", "fp32", "steps=2", "tasks_per_step=4", "group_size=4", "lr=5e-4",
                     "collector.max_new_tokens=12", "collector.max_turns=1", "progress=false",
                     "report_to=none"]) == 0
    assert "rollouts on http://127.0.0.1" in capsys.readouterr().out
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert [r["train/optimizer_steps"] for r in records] == [1, 1]  # (the seed gives both steps a learning signal)
    # one load at the start, one after each optimizer step; each time the server lists only the newest
    prefix = re.fullmatch(r"(tiny-base-[0-9a-f]{8}-r0)-v1", swaps[0][0]).group(1)  # the run's own id, rank 0
    assert [name for name, _ in swaps] == [f"{prefix}-v1", f"{prefix}-v2", f"{prefix}-v3"]
    assert all(listed == ["tiny-base", name] for name, listed in swaps)
    # closing the run unloaded its last adapter and deleted the folder it wrote (the run's own is in run/adapter)
    assert served_models(server.url) == ["tiny-base"] and not list((tmp_path / "adapters").iterdir())
    for r in records:
        # the server sampled with the trainer's current weights (step 2: the adapter swapped in after step 1):
        # its logprobs are the trainer's up to fp32 rounding
        assert 0 <= r["train/logprob_gap"] < 1e-4
        # a server policy: the rollout correction is on ('auto' -> 'tis'), its weights ~1 here
        assert r["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-3) and r["train/is_clipped_frac"] == 0
        assert r["train/ratio_mean"] == pytest.approx(1.0)


def test_eval_with_policy_url_serves_the_adapter_folder(server, train_model_dir, tmp_path, capsys, monkeypatch):
    loads = []  # (adapter name, what the server lists once it is loaded), for every load of every command
    real = OpenAIPolicy._switch_adapter

    def recorded(self, name, path, *, owned):
        real(self, name, path, owned=owned)
        loads.append((name, served_models(server.url)))

    monkeypatch.setattr(OpenAIPolicy, "_switch_adapter", recorded)
    run = tmp_path / "run"
    assert cli.main(["train", "--algo", "grpo", "--env", "Test/Score-v0", "--model", str(train_model_dir),
                     "--out", str(run),
                     "--device", "cpu", "--dtype", "fp32", "steps=1", "tasks_per_step=2", "group_size=2",
                     "collector.max_new_tokens=4", "collector.max_turns=1", "progress=false",
                     "report_to=none"]) == 0
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps({"id": str(i), "query": f"Say {i}."}) for i in range(3)) + "\n")
    out = tmp_path / "eval.jsonl"
    assert cli.main(["eval", "--env", "Test/Score-v0", "--model", str(train_model_dir), "--policy-url", server.url,
                     "--adapter", str(run / "adapter"), "--tasks-file", str(tasks), "--max-new-tokens", "4",
                     "--max-turns", "1", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 3
    [(name, listed)] = loads
    assert re.fullmatch(r"tiny-base-[0-9a-f]{8}-r0-v1", name) and listed == ["tiny-base", name]
    assert served_models(server.url) == ["tiny-base"]  # unloaded when the command ended
    assert (run / "adapter" / "adapter_config.json").is_file()  # the user's folder is never deleted

    # What a user types next against the same server: train through it, then resume that run. Each command's
    # adapters get names of their own, so none is refused as "already loaded".
    for resume in ([], ["--resume"]):
        assert cli.main(["train", "--algo", "grpo", "--env", "Test/Score-v0", "--model", str(train_model_dir),
                         "--out", str(tmp_path / "served"), "--policy-url", server.url, *resume,
                         "--adapter-dir", str(tmp_path / "adapters"), "--device", "cpu", "--dtype", "fp32",
                         f"steps={2 if resume else 1}", "tasks_per_step=2", "group_size=2",
                         "collector.max_new_tokens=4", "collector.max_turns=1", "progress=false",
                         "report_to=none"]) == 0, capsys.readouterr().err
    names = [name for name, _ in loads]
    assert len(names) == len(set(names)) == 4, names  # the eval's, the run's, the resumed run's two
    assert served_models(server.url) == ["tiny-base"]


def test_policy_url_without_a_server_is_a_clear_error(train_model_dir, capsys):
    assert cli.main(["eval", "--env", "AgentRL/ToolUse-v0", "--model", str(train_model_dir),
                     "--policy-url", "http://127.0.0.1:9", "--tasks", "1"]) == 2
    assert "--policy-url: cannot list the models" in capsys.readouterr().err
