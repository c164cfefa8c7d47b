"""Device and dtype selection (``device="auto"``), attention kernel choice, and the GPU memory metric's CPU path."""

from __future__ import annotations

import sys

import pytest
import torch

from agentrl.algos.evaluation.process_memory import gpu_memory, process_memory
from agentrl.algos.models import default_dtype, load_model, resolve_device
from agentrl.algos.recipes.main_job import MainJobConfig
from agentrl.algos.training.config import TrainConfig


def test_auto_is_cuda_when_torch_sees_one_else_cpu(monkeypatch):
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device(None) == "cpu"
    assert default_dtype("auto") == default_dtype("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"


def test_auto_is_the_default_of_every_config():
    assert TrainConfig().device == "auto" and MainJobConfig().device == "auto"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_load_model_auto_on_a_machine_without_cuda_is_todays_cpu_model(tiny_dir):
    auto, _ = load_model(str(tiny_dir), dtype="fp32")  # device defaults to "auto"
    cpu, _ = load_model(str(tiny_dir), dtype="fp32", device="cpu")
    assert next(auto.parameters()).device.type == "cpu"
    ids = torch.arange(3, 20).view(1, -1)
    with torch.no_grad():
        assert torch.equal(auto(ids).logits, cpu(ids).logits)


def test_attn_implementation_reaches_the_model(tiny_dir):
    eager, _ = load_model(str(tiny_dir), dtype="fp32", device="cpu", attn_implementation="eager")
    sdpa, _ = load_model(str(tiny_dir), dtype="fp32", device="cpu", attn_implementation="sdpa")
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    ids = torch.arange(3, 20).view(1, -1)
    with torch.no_grad():
        torch.testing.assert_close(eager(ids).logits, sdpa(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path")
def test_process_memory_on_cpu_has_rss_and_no_gpu_entries():
    mem = process_memory()
    assert mem["perf/rss_gib"] > 0 and mem["perf/peak_rss_gib"] >= mem["perf/rss_gib"] * 0.5
    assert not [k for k in mem if "gpu" in k]
    assert not torch.cuda.is_initialized()  # measuring never starts CUDA


def test_gpu_memory_reads_the_caching_allocator_once_cuda_is_initialised(monkeypatch):
    """The CUDA branch with the allocator's answers faked (no GPU here): GiB figures under the documented keys."""
    fake = {"memory_allocated": 1 * 2**30, "max_memory_allocated": 3 * 2**30, "memory_reserved": 4 * 2**30,
            "max_memory_reserved": 6 * 2**30}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    for name, value in fake.items():
        monkeypatch.setattr(torch.cuda, name, lambda *a, v=value, **k: v)
    assert gpu_memory() == {"perf/gpu_allocated_gib": 1.0, "perf/gpu_peak_allocated_gib": 3.0,
                                    "perf/gpu_reserved_gib": 4.0, "perf/gpu_peak_reserved_gib": 6.0}
    assert process_memory()["perf/gpu_peak_allocated_gib"] == 3.0
    monkeypatch.setitem(sys.modules, "torch", None)  # torch never imported: nothing, and no import
    assert gpu_memory() == {}
