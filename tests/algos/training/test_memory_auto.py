"""memory_budget_gb='auto': the memory plan sized from the memory this machine has free (issue 62, part 3).

Most tests run the planner on a stand-in with SmolLM2-135M's shape (30 layers, hidden 576, 3 of 9 heads for keys
and values, bf16, LoRA r=16 on every linear layer) and a stubbed memory reader: no torch, no model."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentrl.algos.config import apply_overrides, config_from_dict
from agentrl.algos.training import memory_plan as mp
from agentrl.algos.training.config import TrainConfig

GIB = 2**30


class _Param:
    def __init__(self, numel: int, trainable: bool):
        self._numel, self.requires_grad = numel, trainable

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return 2  # bf16


class _Model135M:
    """What the planner reads of SmolLM2-135M with a LoRA r=16 all-linear adapter."""

    config = SimpleNamespace(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                             head_dim=64)

    def parameters(self):
        lora = 30 * 16 * (2 * 576 + 2 * (576 + 192) + 3 * (576 + 1536))  # r x (in + out) per adapted linear
        return iter([_Param(134_515_008, False), _Param(lora, True)])


def _reader(gib: float, calls: list | None = None):
    def read(device):
        if calls is not None:
            calls.append(device)
        return int(gib * GIB), "stub"
    return read


def _plan(cfg: TrainConfig, gib: float, **kw) -> tuple[float, str, tuple[bool, int]]:
    model = _Model135M()
    budget, words = mp.resolve_budget(cfg, model, read=_reader(gib), **kw)
    return budget, words, mp.memory_plan(model, gradient_checkpointing=cfg.gradient_checkpointing,
                                         micro_batch_tokens=cfg.micro_batch_tokens, memory_budget_gb=budget)


def test_24_gib_free_turns_checkpointing_off_and_8_gib_keeps_it_on_for_the_135m_shape():
    cfg = TrainConfig(memory_budget_gb="auto")  # grpo, 4 x 8 rows, the in-process sampler with its merged copy
    big, words, (ckpt_big, tokens_big) = _plan(cfg, 24.0)
    small, _, (ckpt_small, tokens_small) = _plan(cfg, 8.0)
    assert (ckpt_big, ckpt_small) == (False, True)
    assert tokens_big == mp.CPU_MICRO_BATCH_CAP  # on a CPU the rest of the budget would only pad
    fixed = mp.memory_plan(_Model135M(), gradient_checkpointing="auto", micro_batch_tokens="auto",
                           memory_budget_gb=TrainConfig().memory_budget_gb)
    assert fixed == (True, mp.CPU_MICRO_BATCH_CAP)  # the fixed default recomputes: it cannot hold the cap without
    # the rule: half of (available - what the run still needs), the needs being the sampler's KV cache at
    # policy_max_batch_tokens, the merged weight copy and the optimizer
    kv = 32768 * 2 * 30 * 3 * 64 * 2
    needs = mp.still_needed(_Model135M(), kv_tokens=32768, policy_copy=True)
    assert needs["KV cache"] == kv and needs["policy copy"] == 134_515_008 * 2 and 0 < needs["optimizer"] < 64 * 2**20
    needed = sum(needs.values())
    assert big == pytest.approx(0.5 * (24 * GIB - needed) / GIB)
    assert small == pytest.approx(0.5 * (8 * GIB - needed) / GIB)
    assert "24.00 GiB available [stub]" in words and f"{big:.2f} GiB" in words


def test_the_budget_stays_within_its_floor_and_cap():
    cfg = TrainConfig(memory_budget_gb="auto")
    assert _plan(cfg, 512.0)[0] == mp.AUTO_CAP_GB == 16.0
    budget, _, (ckpt, tokens) = _plan(cfg, 1.5)  # less free than the run still needs
    assert budget == mp.AUTO_FLOOR_GB == 1.0 and ckpt is True and tokens == 256


def test_what_is_set_aside_follows_the_sampler():
    grpo = TrainConfig(memory_budget_gb="auto")
    with_copy = _plan(grpo, 16.0)[0]
    shared = _plan(TrainConfig(memory_budget_gb="auto", policy_shares_weights=True), 16.0)[0]
    assert shared - with_copy == pytest.approx(0.5 * 134_515_008 * 2 / GIB)  # no merged copy to make
    sft = _plan(TrainConfig(memory_budget_gb="auto", algo="sft"), 16.0)[0]  # no rollouts: no sampler at all
    assert sft - shared == pytest.approx(0.5 * 32768 * 2 * 30 * 3 * 64 * 2 / GIB)
    remote = _plan(grpo, 16.0, policy=object())[0]  # a policy served elsewhere (a vLLM engine): nothing here
    assert remote == pytest.approx(sft)
    # without a bound, the KV cache is every row of a step at its longest (4 x 8 rows x max_total_tokens)
    unbounded = TrainConfig(memory_budget_gb="auto", policy_max_batch_tokens=None, policy_shares_weights=True)
    rows = 4 * 8 * unbounded.collector.max_total_tokens
    assert shared - _plan(unbounded, 16.0)[0] == pytest.approx(0.5 * (rows - 32768) * 2 * 30 * 3 * 64 * 2 / GIB)


def test_ranks_on_one_host_split_its_memory_but_not_a_gpu(monkeypatch):
    cfg = TrainConfig(memory_budget_gb="auto", algo="sft")
    alone = _plan(cfg, 16.0)[0]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert _plan(cfg, 16.0)[0] == pytest.approx(alone / 2, rel=1e-3)
    assert _plan(cfg, 16.0, device="cuda:1")[0] == pytest.approx(alone)


def test_the_reader_is_asked_about_the_plans_device():
    calls: list = []
    mp.resolve_budget(TrainConfig(memory_budget_gb="auto"), _Model135M(), device="cuda:0", read=_reader(40, calls))
    assert calls == ["cuda:0"]


def test_a_reader_that_fails_falls_back_to_the_fixed_default_with_one_line(caplog):
    def broken(device):
        raise OSError("no /proc here")

    with caplog.at_level(logging.INFO, logger=mp.__name__):
        budget, words = mp.resolve_budget(TrainConfig(memory_budget_gb="auto"), _Model135M(), read=broken)
    assert budget == mp.DEFAULT_BUDGET_GB == TrainConfig().memory_budget_gb
    lines = [r for r in caplog.records if r.name == mp.__name__]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "memory_budget_gb=auto" in lines[0].getMessage() and "no /proc here" in lines[0].getMessage()
    assert "unreadable" in words


def test_a_fixed_budget_is_kept_as_it_is():
    calls: list = []
    assert mp.resolve_budget(TrainConfig(memory_budget_gb=3.5), _Model135M(), read=_reader(24, calls)) == (3.5, "3.5")
    assert calls == []  # not even read


def test_the_host_reader_without_psutil_reads_proc_meminfo(monkeypatch):
    if not Path("/proc/meminfo").is_file():
        pytest.skip("no /proc/meminfo")
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    available, source = mp.available_memory()
    assert "/proc/meminfo" in source and available > 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            assert available <= int(line.split()[1]) * 1024


def test_on_a_cuda_device_the_reader_asks_the_device_for_its_free_memory(monkeypatch):
    torch = pytest.importorskip("torch")
    seen: list = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (seen.append(d), (5 * GIB, 80 * GIB))[1])
    device = torch.device("cuda", 1)
    assert mp.available_memory(device) == (5 * GIB, "free on cuda:1, torch.cuda.mem_get_info")
    assert mp.available_memory("cuda")[0] == 5 * GIB and seen == [device, "cuda"]
    assert mp.available_memory(torch.device("cpu"))[0] != 5 * GIB and len(seen) == 2  # the host's, not the GPU's


@pytest.mark.parametrize("cls_name", ["TrainConfig", "MainJobConfig"])
def test_the_configs_accept_auto_and_keep_their_defaults(cls_name):
    from agentrl.algos.recipes.main_job import MainJobConfig

    cls = {"TrainConfig": TrainConfig, "MainJobConfig": MainJobConfig}[cls_name]
    cfg = config_from_dict(cls, apply_overrides({}, ["memory_budget_gb=auto"]))
    cfg.validate()
    assert cfg.memory_budget_gb == "auto" and cls.from_dict(cfg.to_dict()).memory_budget_gb == "auto"
    default = cls()
    assert default.memory_budget_gb == {"TrainConfig": 2.0, "MainJobConfig": 1.5}[cls_name]
    assert default.to_dict()["memory_budget_gb"] == default.memory_budget_gb  # written configs as before
    assert config_from_dict(cls, apply_overrides({}, ["memory_budget_gb=3"])).memory_budget_gb == 3.0


@pytest.mark.parametrize("value", ["big", "Auto", "", 0, -1.0, True])
def test_bad_budgets_are_refused_naming_the_key(value):
    with pytest.raises(ValueError, match="memory_budget_gb.*'auto'"):  # the message names the key and 'auto'
        TrainConfig.from_dict({"memory_budget_gb": value}).validate()
    with pytest.raises(ValueError, match="memory_budget_gb.*'auto'"):
        TrainConfig(memory_budget_gb=value).validate()


def test_the_trainer_plans_from_the_free_memory_and_says_so(tmp_path, tokenizer, monkeypatch, caplog):
    from helpers import tiny_train_config, tiny_train_model

    from agentrl.algos.training.trainer import Trainer

    seen: list = []
    monkeypatch.setattr(mp, "available_memory", _reader(24.0, seen))
    with caplog.at_level(logging.INFO, logger="agentrl.algos.training.trainer"):
        trainer = Trainer(tiny_train_config(tmp_path, memory_budget_gb="auto"), model=tiny_train_model(tokenizer),
                          tokenizer=tokenizer)
    assert seen == [trainer.device]
    needs = mp.still_needed(trainer.model, kv_tokens=2 * 4 * trainer.config.collector.max_total_tokens,
                            policy_copy=True)
    assert trainer.memory_budget_gb == pytest.approx(mp.auto_budget(24 * GIB, needs))
    assert (trainer.checkpointing, trainer.micro_batch_tokens) == mp.memory_plan(
        trainer.model, gradient_checkpointing="auto", micro_batch_tokens="auto",
        memory_budget_gb=trainer.memory_budget_gb)
    line = next(r.getMessage() for r in caplog.records if "gradient_checkpointing=" in r.getMessage())
    assert line.startswith(f"micro_batch_tokens={trainer.micro_batch_tokens}, "
                           f"gradient_checkpointing={trainer.checkpointing} (memory_budget_gb=auto: "
                           f"{trainer.memory_budget_gb:.2f} GiB = 0.5 x (24.00 GiB available [stub]")
    assert '"memory_budget_gb": "auto"' in (tmp_path / "run" / "config.json").read_text()


class _Model135MOnGPU(_Model135M):
    def parameters(self):
        for p in super().parameters():
            p.device = SimpleNamespace(type="cuda")
            yield p


@pytest.mark.parametrize("model", [_Model135M(), _Model135MOnGPU()], ids=["cpu", "gpu"])
def test_the_auto_plan_is_monotone_in_the_budget(model):
    """A larger budget never turns checkpointing back on and never plans fewer tokens (was: right under 4,096
    unrecomputed tokens the plan checkpointed ~20,000 tokens, right over it planned 4,096 without)."""
    budgets = [1.0 + i / 8 for i in range(1, 8 * 40)]
    plans = [mp.memory_plan(model, gradient_checkpointing="auto", micro_batch_tokens="auto", memory_budget_gb=b)
             for b in budgets]
    ckpts, tokens = [c for c, _ in plans], [t for _, t in plans]
    assert tokens == sorted(tokens) and ckpts == sorted(ckpts, reverse=True)
    assert ckpts[0] is True and ckpts[-1] is False
    switch = ckpts.index(False)
    if isinstance(model, _Model135MOnGPU):
        assert tokens[switch - 1] <= mp.GPU_CHECKPOINT_TOKENS <= tokens[switch] < tokens[-1]
    else:
        assert set(tokens[switch:]) == {mp.CPU_MICRO_BATCH_CAP}  # the cap, then nothing more on a CPU
    # an explicit setting is planned as asked: no cap on checkpointed tokens
    ckpt, many = mp.memory_plan(model, gradient_checkpointing=True, micro_batch_tokens="auto", memory_budget_gb=8.0)
    assert ckpt is True and (many == mp.CPU_MICRO_BATCH_CAP if not isinstance(model, _Model135MOnGPU) else many > 20000)
