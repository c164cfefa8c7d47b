"""The real vLLM engine (CPU build, its own virtualenv ``.venv-vllm``; docs/engines.md): ``agentrl eval --engine vllm``
equals the in-process greedy eval, GRPO hot-swaps its LoRA adapter there, eval and train share one server.

The engine must be installed (the README's test command does it): without it these tests fail, they never skip.
Where its python comes from (and the error without one) is tested without vLLM in test_engine.py.
One server serves the module (``server``); ``test_eval_with_engine_*`` starts its own through ``--engine vllm``.
The model is a tiny random Llama with the real tokenizer; hidden size 128 (head size 32: vLLM's CPU attention has
no kernel for head size 8, the ``tiny_dir`` fixture's).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from helpers import TESTS, adapter_loads, free_port, record_adapter_swaps, save_model_dir, served_models

from agentrl.algos import cli
from agentrl.algos.models import load_tokenizer, tiny_model
from agentrl.algos.policy.engine import VLLMEngine
from agentrl.algos.policy.engine_node import SMALL_MACHINE_CPUS, cpu_thread_binding
from agentrl.algos.training.checkpoint import latest_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    # end_scale 6: sampled replies end at varied lengths within 12 tokens, so GRPO groups get a signal
    return save_model_dir(tmp_path_factory.mktemp("tiny128"), tiny_model(tokenizer, hidden_size=128, end_scale=6.0),
                          tokenizer)


@pytest.fixture(scope="module")
def greedy_dir(tmp_path_factory, tokenizer):
    # no end-token boost: greedy replies run to their budget, a long token-for-token comparison
    return save_model_dir(tmp_path_factory.mktemp("tiny128g"), tiny_model(tokenizer, hidden_size=128), tokenizer)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    with VLLMEngine(model_dir, served_model_name="tiny", dtype="fp32", max_lora_rank=16,
                    log_path=tmp_path_factory.mktemp("engine") / "vllm.log", startup_timeout_s=600) as engine:
        yield engine


@pytest.fixture
def tasks_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps({"id": str(i), "query": f"Say {i} things."}) for i in range(4)) + "\n")
    return path


def _episodes(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _train_args(run, model_dir, *extra, steps=2):
    return ["train", "--algo", "grpo", "--env", "Test/Score-v0", "--model", str(model_dir), "--out", str(run),
            "--device", "cpu", "--dtype", "fp32", *extra, f"steps={steps}", "tasks_per_step=4", "group_size=4",
            "lr=5e-4", "collector.max_new_tokens=12", "collector.max_turns=1", "progress=false", "report_to=none"]


def _train(run, model_dir, tmp_path, *extra, steps=2):
    return cli.main(_train_args(run, model_dir, *extra, steps=steps))


def _cli_env():
    """The environment of an ``agentrl`` subprocess: tests/ importable (helpers registers "Test/Score-v0"), one
    thread per process (the server and the trainers share 2 cores)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1"}


#: ``python -c`` of an ``agentrl`` process that knows "Test/Score-v0" (registered by importing helpers)
_CLI = "import sys, helpers; from agentrl.algos import cli; sys.exit(cli.main(sys.argv[1:]))"


def test_eval_with_engine_equals_the_in_process_greedy_eval(greedy_dir, tasks_file, tmp_path, capsys):
    common = ["eval", "--env", "Test/Score-v0", "--model", str(greedy_dir), "--tasks-file", str(tasks_file),
              "--temperature", "0", "--max-new-tokens", "16", "--max-turns", "1", "--dtype", "fp32"]
    local, served = tmp_path / "local" / "eval.jsonl", tmp_path / "engine" / "eval.jsonl"
    assert cli.main([*common, "--device", "cpu", "--out", str(local)]) == 0
    assert cli.main([*common, "--engine", "vllm", "--out", str(served)]) == 0
    a, b = _episodes(local), _episodes(served)
    assert len(a) == len(b) == 4
    for x, y in zip(a, b, strict=True):
        assert x["token_ids"] == y["token_ids"]  # prompt and greedy reply, token for token
        assert x["reward"] == y["reward"]
        gap = max(abs(p - q) for p, q in zip(x["logprobs"], y["logprobs"], strict=True))
        assert gap < 1e-3, gap  # the greedy tokens' logprobs agree too (fp32 both sides)
        print(f"logprob gap {gap:.2e}")
    log = (served.parent / "vllm.log").read_text()
    assert "vllm.entrypoints.openai.api_server" in log and "--dtype float32" in log
    port = log.split("--port ", 1)[1].split()[0]
    with pytest.raises(requests.ConnectionError):  # the engine was stopped with the command
        requests.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_train_with_engine_starts_trains_through_and_stops_its_server(model_dir, tmp_path):
    """``agentrl train --engine vllm``: one command starts the server (log in the run folder), samples every
    rollout there with the trainer's adapter hot-swapped, and leaves neither the server nor adapter folders."""
    run = tmp_path / "run"
    assert _train(run, model_dir, tmp_path, "--engine", "vllm", "--engine-args", "--max-num-seqs 32") == 0
    assert [r["step"] for r in _episodes(run / "metrics.jsonl")] == [1, 2]
    assert (run / "adapter" / "adapter_config.json").is_file()
    log = (run / "vllm.log").read_text()
    assert "--max-num-seqs 32" in log and "--enable-lora" in log  # --engine-args reached the server
    assert len(adapter_loads(run / "vllm.log", 0)) == 3  # the start, then after each optimizer step
    assert not list(run.glob("served-adapters-r*"))
    port = log.split("--port ", 1)[1].split()[0]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_grpo_hot_swaps_its_adapter_on_the_engine(server, model_dir, tmp_path, monkeypatch, capsys):
    swaps = record_adapter_swaps(monkeypatch, server.url)
    run = tmp_path / "run"
    assert _train(run, model_dir, tmp_path, "--policy-url", server.url, "--adapter-dir", str(tmp_path / "ad")) == 0
    records = _episodes(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert [r["train/optimizer_steps"] for r in records] == [1, 1], [
        {k: v for k, v in r.items() if k.startswith(("rollout/", "reward/"))} for r in records]
    assert len(swaps) == 3  # the start, then after each optimizer step; the server lists the newest only
    assert all(listed == ["tiny", name] for name, listed in swaps)
    for r in records:  # vLLM sampled with the trainer's weights: its logprobs are the trainer's up to rounding
        assert 0 <= r["train/logprob_gap"] < 1e-3, r["train/logprob_gap"]
    assert served_models(server.url) == ["tiny"]  # the run unloaded its last adapter: the server is as it was


def test_seeded_sampling_of_many_long_prompts_at_once(server):
    # vLLM's CPU build (0.32) killed its engine ("CPU Generator does not use offset") when a seeded request's prompt
    # was prefilled in chunks: it rewinds the request's generator for the discarded token, which a CPU generator
    # cannot do. A GRPO step (64 seeded episodes of ~800-token prompts) hit it at once; the managed engine now starts
    # without chunked prefill.
    from concurrent.futures import ThreadPoolExecutor

    def complete(i):
        body = {"model": "tiny", "prompt": [100 + (i + k) % 500 for k in range(1500)], "max_tokens": 4,
                "temperature": 1.0, "seed": i}
        return requests.post(f"{server.url}/v1/completions", json=body, timeout=300)

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(complete, range(12)))
    assert [r.status_code for r in answers] == [200] * 12, answers[0].text[:300]
    assert requests.get(f"{server.url}/health", timeout=10).status_code == 200


def test_eval_then_train_on_one_server(server, model_dir, tasks_file, tmp_path, capsys):
    # each client names its adapters apart (OpenAIPolicy's run id): a second one never reloads a loaded name
    run = tmp_path / "first"
    assert _train(run, model_dir, tmp_path, steps=1) == 0  # in process: an adapter to evaluate
    assert cli.main(["eval", "--env", "Test/Score-v0", "--model", str(model_dir), "--policy-url", server.url,
                     "--adapter", str(run / "adapter"), "--tasks-file", str(tasks_file), "--max-new-tokens", "8",
                     "--max-turns", "1", "--out", str(tmp_path / "e.jsonl")]) == 0
    assert _train(tmp_path / "second", model_dir, tmp_path, "--policy-url", server.url, steps=1) == 0
    assert len(_episodes(tmp_path / "second" / "metrics.jsonl")) == 1
    assert served_models(server.url) == ["tiny"]  # neither the eval's adapter nor the run's stays loaded


def test_a_killed_run_resumes_on_the_same_server(server, model_dir, tmp_path):
    # SIGKILL once the first checkpoint exists: no close(), the killed run's adapter stays loaded on the server
    run, start = tmp_path / "run", server.log_path.stat().st_size
    args = _train_args(run, model_dir, "--policy-url", server.url, "save_every=1", steps=3)
    proc = subprocess.Popen([sys.executable, "-c", _CLI, *args], env=_cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while latest_checkpoint(run) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, f"the run ended before it was killed:\n{proc.communicate()[0][-3000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    killed = adapter_loads(server.log_path, start)
    assert killed and len(served_models(server.url)) > 1  # its adapter is still there
    assert any((run / "served-adapters-r0").iterdir())  # and its folder, in the run (was: a /tmp folder, never freed)
    assert latest_checkpoint(run).name != "step-000003"
    resumed = subprocess.run([sys.executable, "-c", _CLI, *args, "--resume"], env=_cli_env(), capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    records = _episodes(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert latest_checkpoint(run).name == "step-000003"
    names = adapter_loads(server.log_path, start)
    assert len(names) > len(killed) and len(set(names)) == len(names), names  # no name was loaded twice
    assert served_models(server.url) == ["tiny"]  # the resumed run unloaded what the killed one left too
    assert not list(run.glob("served-adapters-r*"))  # the record of loaded adapters is gone with the run's policy


def test_two_ranks_train_against_one_server(server, model_dir, tmp_path):
    run, start = tmp_path / "run", server.log_path.stat().st_size
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "--no-python", sys.executable, "-c", _CLI,
           *_train_args(run, model_dir, "--policy-url", server.url, steps=2)]
    done = subprocess.run(cmd, env=_cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]  # torchrun exits 0 only when both ranks did
    records = _episodes(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]  # rank 0 writes, once per step
    names = adapter_loads(server.log_path, start)  # the server's own log: its "Loaded new LoRA adapter" lines
    # each version loaded once for both ranks (was: once per rank, under names with the rank): the start, then
    # after each optimizer step, under one name without a rank
    assert len(names) == 3 and len(set(names)) == 3, names
    assert all(n.endswith(f"-v{v}") and "-r0-" not in n and "-r1-" not in n for v, n in enumerate(names, 1)), names
    assert served_models(server.url) == ["tiny"]
    assert not list(run.glob("served-adapters-r*"))


def test_two_ranks_with_engine_share_one_server_per_node(model_dir, tmp_path):
    """``torchrun --nproc_per_node 2 ... train --engine vllm``: local rank 0 starts the node's one server, both ranks
    train through it, and it is stopped at the end."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "--no-python", sys.executable, "-c", _CLI,
           *_train_args(run, model_dir, "--engine", "vllm", steps=1)]
    done = subprocess.run(cmd, env=_cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    log = (run / "vllm.log").read_text()
    assert log.count("$ ") == 1  # one server started, by local rank 0
    names = adapter_loads(run / "vllm.log", 0)
    assert len(names) == 2 and len(set(names)) == 2, names  # the start and the step: once for both ranks
    assert [r["step"] for r in _episodes(run / "metrics.jsonl")] == [1]
    port = log.split("--port ", 1)[1].split()[0]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_tau2_with_the_policys_own_engine_playing_the_user(tmp_path, capsys):
    """``user_url="policy"``: ``agentrl eval --engine vllm`` on τ²-bench mock with a user, the engine that serves the
    policy (the embedded 135M model) also plays τ²'s user simulator through its chat API (the base model, never the
    adapter): the customer's first message is the engine's chat answer to τ²'s user prompt."""
    out = tmp_path / "tau" / "episodes.jsonl"
    task = tmp_path / "task.jsonl"
    task.write_text('{"id": "create_task_1"}\n')  # opens with τ²'s greeting (two mock tasks open with a history)
    rc = cli.main(["eval", "--engine", "vllm", "--model", "smollm2-135m", "--dtype", "fp32",
                   "--env", "AgentRL/TauBench-v0", "--env-kwargs", '{"domain": "mock", "user_url": "policy"}',
                   "--tasks-file", str(task), "--max-turns", "2", "--max-new-tokens", "48", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err[-2000:]
    episode = _episodes(out)[0]
    log = (out.parent / "vllm.log").read_text()
    assert "POST /v1/chat/completions" in log and "POST /v1/completions" in log, log[-2000:]
    prompt = load_tokenizer("smollm2-135m").decode(episode["token_ids"][: episode["prompt_len"]])
    greeting = "Hi! How can I help you today?<|im_end|>\n<|im_start|>user\n"  # τ²'s agent opens, the customer answers
    assert greeting in prompt, prompt[-1500:]
    assert prompt.split(greeting, 1)[1].split("<|im_end|>")[0].strip(), prompt[-1500:]


def test_the_server_samples_on_every_core_of_a_small_machine(server):
    """On <= SMALL_MACHINE_CPUS usable CPUs the worker's OpenMP threads are bound to all of them (vLLM's auto binding
    reserves one for its scheduler: half of a 2-core machine); the server's own log says which cores it bound."""
    cpus = sorted(os.sched_getaffinity(0))
    log = server.log_path.read_text()
    if len(cpus) > SMALL_MACHINE_CPUS:
        assert "VLLM_CPU_OMP_THREADS_BIND='auto'" in log
    else:
        assert f"core ids={cpus}" in log, log[-2000:]


def test_thread_binding_keeps_the_callers_and_large_machines_default(monkeypatch):
    assert cpu_thread_binding({"VLLM_CPU_OMP_THREADS_BIND": "nobind"}) == {}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(SMALL_MACHINE_CPUS + 1)))
    assert cpu_thread_binding({}) == {}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2})
    assert cpu_thread_binding({}) == {"VLLM_CPU_OMP_THREADS_BIND": "0,2", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def test_an_engine_that_dies_is_an_error_with_its_log_tail(model_dir, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'no such model kind: tiny' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    engine = VLLMEngine(model_dir, python=str(fake), log_path=tmp_path / "vllm.log", startup_timeout_s=30)
    with pytest.raises(RuntimeError, match=r"(?s)exited with code 3.*no such model kind: tiny"):
        engine.start()
    assert engine.proc is None


def test_a_hung_engine_times_out_and_is_killed(model_dir, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho $$ > pid\nexec sleep 600\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    engine = VLLMEngine(model_dir, python=str(fake), log_path=tmp_path / "vllm.log", startup_timeout_s=3)
    with pytest.raises(RuntimeError, match="not healthy"):
        engine.start()
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _group_members(pgid: int) -> list[int]:
    """The running (not zombie) processes of process group ``pgid``."""
    members = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat_file.parent.name))
    return members


_ENGINE_PARENT = ("import sys, time\nfrom agentrl.algos.policy.engine import VLLMEngine\n"
                  "engine = VLLMEngine(sys.argv[1], served_model_name='tiny', dtype='fp32', log_path=sys.argv[2])\n"
                  "print(engine.start().proc.pid, flush=True)\nwhile True:\n    time.sleep(0.1)\n")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signalled_trainer_leaves_no_vllm_process(sig, model_dir, tmp_path):
    """What ``timeout``, Slurm, Docker and Kubernetes send (SIGTERM, later SIGKILL) to the process that started
    the engine: every process of the server's group (the API server and its engine core) is gone soon after."""
    parent = subprocess.Popen([sys.executable, "-c", _ENGINE_PARENT, str(model_dir), str(tmp_path / "vllm.log")],
                              stdout=subprocess.PIPE, text=True, env=_cli_env())
    try:
        group = int(parent.stdout.readline())
        assert len(_group_members(group)) >= 2  # the API server and its engine core
        parent.send_signal(sig)
        parent.wait(60)
        deadline = time.monotonic() + 30
        while _group_members(group) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _group_members(group) == [], f"{signal.Signals(sig).name} of the trainer left vLLM running"
    finally:
        parent.kill()
        parent.wait()
