"""One writer per run folder for the benchmark runners too (issue 60, N1): ``experiment.py run`` of a learning record
or the comparison, ``axes.py run`` and ``transfer.py`` hold their run folder's lock for their whole work, so a second
one on a folder another command holds is refused in one line naming the holder's pid, before it trains or evaluates
anything."""

from __future__ import annotations

import re

import pytest


def _never_runs(*args, **kwargs):
    raise AssertionError("the second runner ran: it would have written over the first one's run folder")


def _refusal(script: str, run, pid: int) -> str:
    return (rf"^{re.escape(script)}: {re.escape(str(run))} is in use: `agentrl main-job --out {re.escape(str(run))}` "
            rf"\(pid {pid}\) still runs there; wait for it to end or stop it \(kill {pid}\), or pass another --out$")


def test_a_second_learning_run_is_refused_in_one_line(held, monkeypatch):
    from harness import experiment_cli

    run, proc = held
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(experiment_cli, "_learning_pieces", _never_runs)
    with pytest.raises(SystemExit, match=_refusal("experiment.py", run, proc.pid)):
        experiment_cli.main(["run", "tooluse", "--out", str(run)])


def test_a_second_comparison_is_refused_in_one_line(held, monkeypatch):
    from harness import compare_exec, experiment_cli

    run, proc = held
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(compare_exec, "_run_compare", _never_runs)
    with pytest.raises(SystemExit, match=_refusal("experiment.py", run, proc.pid)):
        experiment_cli.main(["run", "compare_algorithms", "--out", str(run)])


def test_a_second_axes_run_is_refused_in_one_line(held, monkeypatch):
    from harness import axes_cli

    run, proc = held
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(axes_cli, "_run_pieces", _never_runs)
    with pytest.raises(SystemExit, match=_refusal("axes.py", run, proc.pid)):
        axes_cli.main(["run", "--experiment", "axes", "--work", str(run)])


def test_a_second_transfer_run_is_refused_in_one_line(held, monkeypatch, capsys, tmp_path):
    from harness import transfer_cli, transfer_exec

    run, proc = held
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(transfer_exec, "run", _never_runs)
    args = ["--arm", "base", "--out", str(run), "--data", str(tmp_path / "data")]
    assert transfer_cli.main(args) == 2
    assert re.match(_refusal("transfer.py", run, proc.pid), capsys.readouterr().err.rstrip("\n"))
