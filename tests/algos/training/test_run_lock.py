"""One trainer per run folder: a second ``agentrl train --resume`` (or ``Trainer``) on an ``--out`` whose trainer
still runs is refused in one line, before it loads a model or starts an engine; the lock of a dead trainer is no
lock."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import tiny_train_config, tiny_train_model

from agentrl.algos import Trainer, cli
from agentrl.algos.training.checkpoint import LOCK_FILE, RunInUse, lock_run, unlock_run

#: Another trainer: takes the run folder's lock, says so, then runs until it is killed.
HOLDER = ("import sys, time\nfrom agentrl.algos.training.checkpoint import lock_run\n"
          "sys.argv = ['agentrl', 'train', '--out', sys.argv[1]]\nlock_run(sys.argv[-1])\n"
          "print('held', flush=True)\ntime.sleep(600)\n")
#: Tries the lock once: exit 0 when it got it, else prints the refusal and exits 1.
TRY = ("import sys\nfrom agentrl.algos.training.checkpoint import RunInUse, lock_run\ntry:\n    lock_run(sys.argv[1])\n"
       "except RunInUse as e:\n    sys.exit(str(e))\n")


def _env():
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}


def _try_lock(run) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", TRY, str(run)], capture_output=True, text=True, env=_env(),
                          timeout=120)


@pytest.fixture
def holder(tmp_path):
    """A live process holding ``tmp_path/run``'s lock: ``(run folder, process)``."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert proc.stdout.readline().strip() == "held"
        yield run, proc
    finally:
        proc.kill()
        proc.wait()


def _refusal(run, pid) -> str:
    return (f"{run} is in use: `agentrl train --out {run}` (pid {pid}) still runs there; wait for it to end or stop "
            f"it (kill {pid}), or pass another --out")


def test_a_second_train_on_a_live_run_folder_is_refused_in_one_line(holder, tiny_dir, tokenizer, capsys,
                                                                     monkeypatch):
    run, proc = holder
    monkeypatch.delenv("RANK", raising=False)
    args = ["train", "--algo", "grpo", "--env", "Test/Score-v0", "--model", str(tiny_dir), "--out", str(run),
            "--resume", "steps=1", "progress=false", "report_to=none"]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.err == f"agentrl train: error: {_refusal(run, proc.pid)}\n"
    assert "agentrl train:" not in captured.out  # refused before the run's banner (and any engine or model)
    with pytest.raises(RunInUse, match=f"^{_refusal(run, proc.pid)}$".replace("(", r"\(").replace(")", r"\)")):
        Trainer(tiny_train_config(run.parent, steps=1), model=tiny_train_model(tokenizer), tokenizer=tokenizer)


def test_the_lock_of_a_dead_trainer_is_no_lock(holder):
    run, proc = holder
    assert _try_lock(run).stderr.strip() == _refusal(run, proc.pid)
    proc.kill()
    proc.wait()
    assert (run / LOCK_FILE).read_text().split()[0] == str(proc.pid)  # it left its file behind, not its lock
    assert _try_lock(run).returncode == 0


def test_a_trainer_holds_its_folder_until_it_is_gone(tmp_path, tokenizer, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    trainer = Trainer(tiny_train_config(tmp_path, steps=1), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    run = trainer.run_dir
    lock_run(run)  # the same process again (the CLI's, then the trainer's): no refusal
    unlock_run(run)
    refused = _try_lock(run)
    assert refused.returncode == 1 and f"(pid {os.getpid()})" in refused.stderr
    del trainer
    import gc

    gc.collect()
    assert _try_lock(run).returncode == 0
