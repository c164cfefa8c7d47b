"""Data-parallel training with two gloo processes on the CPU (torchrun): the gradient is the one-process
gradient on the same groups, only rank 0 writes, and a killed run resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ddp_worker import ddp_config
from helpers import TESTS, free_port, tiny_train_model

from agentrl.algos import Trainer, Trajectory
from agentrl.algos.training.checkpoint import latest_checkpoint
from agentrl.algos.training.update import apply_update


def torchrun(out: Path, steps: int, *extra: str) -> subprocess.CompletedProcess:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(port), str(TESTS / "ddp_worker.py"), str(out), str(steps), *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def test_two_ranks_step_with_the_one_process_gradient_of_the_same_groups(tokenizer, tmp_path):
    run = torchrun(tmp_path, 1)
    assert run.returncode == 0, run.stderr[-3000:]
    batch = [Trajectory.from_dict(d) for d in torch.load(tmp_path / "batch.pt")]
    assert len(batch) == 4 * 4 and sorted({t.group_id for t in batch}) == [0, 1, 2, 3]  # both ranks' groups
    ddp_grads = torch.load(tmp_path / "grads.pt")

    # The same model, adapter and batch in one process.
    single = Trainer(ddp_config(tmp_path / "single", 1), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    rows, _ = single.algo.prepare(batch)
    captured = []
    step = single.optimizer.step
    single.optimizer.step = lambda *a, **kw: (captured.append([p.grad.clone() for p in single.params]), step())
    apply_update(single.model, single.optimizer, single.algo, rows, lr=single._lr(),
                 temperature=single.loss_temperature, pad_id=single.pad_id,
                 micro_batch_tokens=single.config.micro_batch_tokens,
                 logprob_chunk=single.config.logprob_chunk, max_grad_norm=single.config.max_grad_norm)
    [one_process] = captured
    assert any(g.abs().sum() > 0 for g in one_process)
    for a, b in zip(ddp_grads, one_process, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)

    # rank 0 alone wrote the run directory, once per step
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1]
    assert lines[0]["train/data_position"] == 4 and lines[0]["train/optimizer_steps"] == 1
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").is_file()


def test_a_killed_two_rank_run_resumes_from_its_checkpoint(tmp_path):
    killed = torchrun(tmp_path, 2, "--kill-in-step", "1")
    assert killed.returncode != 0
    assert latest_checkpoint(tmp_path / "run").name == "step-000001"
    resumed = torchrun(tmp_path, 2, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert lines[-1]["train/data_position"] == 8
    assert latest_checkpoint(tmp_path / "run").name == "step-000002"


def test_ranks_that_start_from_different_checkpoints_are_refused_in_one_line(tokenizer, tmp_path):
    """Two nodes whose --out is not one shared folder: rank 0's has a checkpoint, rank 1's none. On --resume both
    refuse, naming each rank's step and where it came from (before this check, rank 1 trained from step 0)."""
    node0 = tmp_path / "node0"
    Trainer(ddp_config(node0, 1), model=tiny_train_model(tokenizer), tokenizer=tokenizer).train()
    assert latest_checkpoint(node0 / "run").name == "step-000001"
    run = torchrun(tmp_path, 2, "--resume", "--out-per-rank")
    assert run.returncode != 0
    refusal = (f"the ranks start from different states: step differs (rank 0: 1 ({node0 / 'run'}/checkpoints/"
               f"step-000001), rank 1: 0 (no checkpoint in {tmp_path / 'node1' / 'run'})); every rank must read "
               "the same --out (")
    assert run.stderr.count(refusal) == 2, run.stderr[-3000:]  # each rank, one line
    assert not (tmp_path / "node1" / "run" / "metrics.jsonl").exists()  # nothing trained


def test_two_nodes_on_one_host_without_a_shared_out_refuse_to_resume(tokenizer, tmp_path):
    """``torchrun --nnodes 2`` as two launchers on 127.0.0.1 (static rendezvous), each "node" in its own working
    directory with the relative ``--out`` of the other: node 0's holds a checkpoint, node 1's does not."""
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for node in nodes:
        node.mkdir()
    Trainer(ddp_config(nodes[0], 1), model=tiny_train_model(tokenizer), tokenizer=tokenizer).train()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    launchers = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1", "--node_rank",
         str(k), "--master_addr", "127.0.0.1", "--master_port", str(port), str(TESTS / "ddp_worker.py"), ".", "2",
         "--resume"], cwd=node, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k, node in enumerate(nodes)]
    outputs = [p.communicate(timeout=600) for p in launchers]
    refusal = ("the ranks start from different states: step differs (rank 0: 1 (run/checkpoints/step-000001), "
               "rank 1: 0 (no checkpoint in run)); every rank must read the same --out (run): on several nodes, a "
               "folder on a shared filesystem")
    for p, (_, err) in zip(launchers, outputs, strict=True):
        assert p.returncode != 0 and refusal in err, err[-3000:]
    assert not (nodes[1] / "run" / "metrics.jsonl").exists()


def test_the_first_difference_is_the_refusal():
    from agentrl.algos.training.distributed import disagreement

    same = {"step": 3, "step_from": "checkpoints/step-000003", "data_position": 12, "config": "a1", "adapter": "b2"}
    assert disagreement([same, dict(same)]) is None
    assert disagreement([same, {**same, "adapter": "c3"}], "; fix it") == (
        "the ranks start from different states: adapter weights (sha256) differs (rank 0: b2, rank 1: c3); fix it")
    assert disagreement([same, {**same, "config": "ff", "adapter": "c3"}]).startswith(
        "the ranks start from different states: config (sha256) differs (rank 0: a1, rank 1: ff)")


@pytest.mark.parametrize("world", [1])
def test_one_process_is_not_distributed(world, monkeypatch):
    from agentrl.algos.training.distributed import Ranks, setup

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert setup("cpu") == Ranks() and not Ranks().distributed and Ranks(1, 2).shard(list(range(5))) == [1, 3]


def test_the_main_job_refuses_to_run_on_every_rank(monkeypatch, capsys):
    """``torchrun ... agentrl main-job`` would run the whole job once per rank: refused, pointing to train."""
    from agentrl.algos import cli

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr("agentrl.algos.recipes.main_job.run_main_job",
                        lambda *a, **kw: pytest.fail("the main job ran under torchrun"))
    assert cli.main(["main-job", "rl_steps=1"]) == 2
    err = capsys.readouterr().err
    assert "WORLD_SIZE=2" in err and "agentrl.algos.cli train --algo grpo" in err
