"""Experiment trackers (report_to): the TRACKERS registry and its contract (a third party's tracker, declared by an
entry point or registered at run time, is used by MetricsLogger when named in report_to; plots go only to the
trackers that take them); config, metrics and plots reach W&B (offline run files), MLflow (a local SQLite store
read back with its client) and trackio (its local store), each through the real library; skipped when absent."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import TESTS, install_entry_point

from agentrl.algos.evaluation import trackers
from agentrl.algos.evaluation.plot import plot_run
from agentrl.algos.evaluation.run_log import MetricsLogger
from agentrl.algos.evaluation.trackers import (
    TRACKERS,
    MLflowTracker,
    TensorBoardTracker,
    Tracker,
    TrackioTracker,
    WandbTracker,
    register_tracker,
    resolve_report_to,
    tracker_names,
)
from agentrl.envs.plugins import Registry

CONFIG = {"algo": "grpo", "group_size": 4, "grpo": {"beta": 0.04}}


def _log_run(run_dir, report_to, steps=(1, 2)):
    with MetricsLogger(run_dir, report_to=report_to, config=CONFIG, run_name="t", plots=plot_run) as log:
        for s in steps:
            log.log(s, {"train/loss": 1.0 / s, "reward/mean": 0.25 * s, "note": "text"})


def test_report_to_resolution_and_errors():
    assert resolve_report_to(None) == ["tensorboard"]
    assert resolve_report_to(["tensorboard", "wandb"]) == ["tensorboard", "wandb"]
    assert resolve_report_to("none") == [] and resolve_report_to(["mlflow", "mlflow"]) == ["mlflow"]
    with pytest.raises(ValueError, match="unknown tracker"):
        resolve_report_to(["wandbb"])
    with pytest.raises(ValueError, match="'none' cannot be combined"):
        resolve_report_to(["none", "wandb"])


def test_the_builtin_trackers_are_registered_and_declare_the_contract():
    names = tracker_names()  # built-ins first, then any installed entry points, "none" last
    assert names[:4] == ["tensorboard", "wandb", "mlflow", "trackio"] and names[-1] == "none"
    builtins = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MLflowTracker,
                "trackio": TrackioTracker}
    for name, cls in builtins.items():
        assert TRACKERS.get(name) is cls
        assert all(callable(getattr(cls, m)) for m in ("log", "log_images", "close")), name
    assert not TensorBoardTracker.run_plots and WandbTracker.run_plots and MLflowTracker.run_plots
    assert isinstance(TensorBoardTracker(Path("."), "t", {}), Tracker)


# ---------------------------------------------------------------------------------------------- a third party's tracker

THIRD_PARTY = '''
"""A tracker as a third party writes it: one class, nothing of agentrl imported."""
EVENTS = []


class ListTracker:
    run_plots = True

    def __init__(self, run_dir, run_name, config):
        EVENTS.append(("init", run_dir.name, run_name, config))

    def log(self, step, scalars):
        EVENTS.append(("log", step, scalars))

    def log_images(self, step, paths):
        EVENTS.append(("images", step, [p.name for p in paths]))

    def close(self):
        EVENTS.append(("close",))


class NoPlots(ListTracker):
    run_plots = False


class Incomplete:
    def __init__(self, run_dir, run_name, config):
        pass

    def log(self, step, scalars):
        pass
'''


@pytest.fixture
def fresh_trackers(tmp_path, monkeypatch):
    """A fresh ``TRACKERS`` (as in a new process: entry points not read yet) and the module ``listtracker`` (the
    classes of ``THIRD_PARTY``) importable; yields the module."""
    monkeypatch.setattr(trackers, "TRACKERS", Registry(TRACKERS.kind, TRACKERS.group,
                                                       {n: TRACKERS.get(n) for n in ("tensorboard", "wandb",
                                                                                     "mlflow", "trackio")}))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "listtracker.py").write_text(THIRD_PARTY)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    import listtracker

    yield listtracker
    sys.modules.pop("listtracker", None)


def _fake_plots(run_dir):
    """What ``plot_run`` does, without matplotlib: PNG paths under ``run_dir/plots`` (the logger reads none)."""
    assert (run_dir / "metrics.jsonl").read_text().count("\n") == 2  # drawn from the closed, complete log
    return [run_dir / "plots" / "reward.png", str(run_dir / "plots" / "train.png")]


def test_a_tracker_declared_by_an_entry_point_is_used_when_named_in_report_to(fresh_trackers, tmp_path,
                                                                              monkeypatch):
    install_entry_point(tmp_path, monkeypatch, "agentrl.trackers", "listtracker", "listtracker:ListTracker")
    assert "listtracker" in tracker_names() and tracker_names()[-1] == "none"
    assert resolve_report_to(["listtracker", "listtracker"]) == ["listtracker"]

    with MetricsLogger(tmp_path / "run", report_to=["listtracker"], config=CONFIG, run_name="t",
                       plots=_fake_plots) as log:
        log.log(1, {"train/loss": 1.0, "note": "text"})
        log.log(2, {"train/loss": 0.5})
    assert fresh_trackers.EVENTS == [("init", "run", "t", CONFIG), ("log", 1, {"train/loss": 1.0}),
                                     ("log", 2, {"train/loss": 0.5}), ("images", 2, ["reward.png", "train.png"]),
                                     ("close",)]

    from agentrl.algos import cli, cli_train  # the flag and the config key accept the name too

    parser = cli.build_parser()
    args = parser.parse_args(["train", "--algo", "grpo", "--out", str(tmp_path), "--report-to", "wandb,listtracker"])
    assert cli_train.build_train_config(args).report_to == ["wandb", "listtracker"]


def test_register_tracker_at_run_time_and_plots_only_for_trackers_that_take_them(fresh_trackers, tmp_path):
    register_tracker("lists", "listtracker:ListTracker")
    register_tracker("noplots", fresh_trackers.NoPlots)
    with MetricsLogger(tmp_path, report_to=["noplots", "lists"], plots=_fake_plots) as log:
        log.log(1, {"x": 1})
        log.log(3, {"x": 2})
    images = [e for e in fresh_trackers.EVENTS if e[0] == "images"]
    assert images == [("images", 3, ["reward.png", "train.png"])]  # once: for "lists", not for "noplots"
    assert [e[0] for e in fresh_trackers.EVENTS].count("close") == 2

    fresh_trackers.EVENTS.clear()  # without plots=, the logger draws nothing itself
    with MetricsLogger(tmp_path / "b", report_to="lists") as log:
        log.log(1, {"x": 1})
    assert [e[0] for e in fresh_trackers.EVENTS] == ["init", "log", "close"]

    with pytest.raises(ValueError, match="reserved"):
        register_tracker("none", fresh_trackers.ListTracker)
    with pytest.raises(ValueError, match="identifier"):
        register_tracker("my-tracker", fresh_trackers.ListTracker)


def test_a_failing_plot_is_a_warning_and_the_trackers_still_close(fresh_trackers, tmp_path, caplog):
    register_tracker("lists", fresh_trackers.ListTracker)

    def broken(run_dir):
        raise RuntimeError("no matplotlib")

    with caplog.at_level("WARNING"), MetricsLogger(tmp_path, report_to=["lists"], plots=broken) as log:
        log.log(1, {"x": 1})
    assert "could not send the run's plots" in caplog.text and "no matplotlib" in caplog.text
    assert fresh_trackers.EVENTS[-1] == ("close",)


def test_a_tracker_that_breaks_the_contract_is_named(fresh_trackers, tmp_path):
    register_tracker("incomplete", "listtracker:Incomplete")
    with pytest.raises(TypeError, match=r"tracker 'incomplete' \(Incomplete\) lacks \['run_plots', 'log_images', "
                                        r"'close'\]"):
        MetricsLogger(tmp_path, report_to=["incomplete"])
    register_tracker("missing", "no_such_package.trackers:Mine")
    with pytest.raises(ValueError, match="cannot import 'no_such_package.trackers'"):
        MetricsLogger(tmp_path, report_to=["missing"])


# ---------------------------------------------------------------------------------------------- the real libraries


@pytest.mark.parametrize("name", ["wandb", "mlflow", "trackio"])
def test_a_selected_tracker_that_is_not_installed_names_its_extra(tmp_path, monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    hint = rf"pip install {name} \(in an agentrl-gym checkout: pip install -e '\.\[{name}\]'\)"
    with pytest.raises(ImportError, match=hint):
        MetricsLogger(tmp_path, report_to=[name])


def _wandb_records(path):
    """The protobuf records of a W&B transaction log (``run-*.wandb``: a LevelDB-style log of 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (kind == 0 and length == 0):
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last fragment of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def test_wandb_offline_run_has_config_metrics_and_plots(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _log_run(tmp_path, ["wandb"])
    [run_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    history, config, kinds = [], {}, []
    for r in _wandb_records(run_file):
        kind = r.WhichOneof("record_type")
        kinds.append(kind)
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
        elif kind in ("run", "config"):  # the config given to init, or sent as an update after it (W&B does both)
            update = r.run.config.update if kind == "run" else r.config.update
            config.update({u.key: json.loads(u.value_json) for u in update})
    assert config.get("group_size") == 4 and config.get("grpo") == {"beta": 0.04}, (config, kinds)
    scalars = [(h["_step"], h["train/loss"], h["reward/mean"]) for h in history if "train/loss" in h]
    assert scalars == [(1, 1.0, 0.25), (2, 0.5, 0.5)]
    images = [k for h in history for k in h if k.startswith("plots/") and k.endswith("/_type")]
    assert images and all(h[k] == "image-file" for h in history for k in h if k in images)
    assert list(run_file.parent.glob("files/media/images/plots/*.png"))


def test_mlflow_local_store_run_has_config_metrics_and_plots(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("matplotlib")
    # a local SQLite store (MLflow 3 refuses the ./mlruns file store unless MLFLOW_ALLOW_FILE_STORE=true);
    # artifacts go to ./mlartifacts of the working directory
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "agentrl-test")
    run_dir = tmp_path / "run"
    _log_run(run_dir, ["mlflow"])
    _log_run(run_dir, ["mlflow"], steps=(3,))  # a resumed run continues the same MLflow run
    client = mlflow.MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("agentrl-test").experiment_id])
    assert run.info.run_name == "t" and run.info.status == "FINISHED"
    assert run.data.params["group_size"] == "4" and run.data.params["grpo.beta"] == "0.04"
    loss = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(loss) == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    assert "note" not in run.data.metrics
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "config.json" in artifacts
    assert any(a.path.endswith(".png") for a in client.list_artifacts(run.info.run_id, "plots"))


def test_trackio_local_run_has_config_and_metrics(tmp_path):
    pytest.importorskip("trackio")
    # trackio reads TRACKIO_DIR when it is imported: a fresh process keeps the store inside tmp_path
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(TESTS)!r}]
        from test_trackers import _log_run
        _log_run({str(tmp_path / "run")!r}, ["trackio"])
        from trackio.sqlite_storage import SQLiteStorage
        print("RESULT " + json.dumps({{"logs": SQLiteStorage.get_logs("agentrl-test", "t"),
                           "config": SQLiteStorage.get_run_config("agentrl-test", "t")}}))
    """)
    env = {**__import__("os").environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "TRACKIO_PROJECT": "agentrl-test",
           "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))[7:])
    scalars = [(r["step"], r["train/loss"], r["reward/mean"]) for r in result["logs"] if "train/loss" in r]
    assert scalars == [(1, 1.0, 0.25), (2, 0.5, 0.5)]
    assert any(k.startswith("plots/") for r in result["logs"] for k in r)
    assert result["config"]["group_size"] == 4 and result["config"]["grpo"] == {"beta": 0.04}
    assert (tmp_path / "trackio" / "agentrl-test.db").exists()


def test_report_to_flag_and_key_reach_the_train_config(tmp_path):
    from agentrl.algos import cli, cli_train

    parser = cli.build_parser()
    args = parser.parse_args(["train", "--algo", "grpo", "--out", str(tmp_path), "--report-to", "wandb,mlflow"])
    assert cli_train.build_train_config(args).report_to == ["wandb", "mlflow"]
    args = parser.parse_args(["train", "--algo", "grpo", "--out", str(tmp_path), "report_to=trackio"])
    assert cli_train.build_train_config(args).report_to == ["trackio"]
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--report-to", "wandbb"])
