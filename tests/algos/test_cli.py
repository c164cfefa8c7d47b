"""The ``agentrl`` CLI: overrides, config files, generated docs, and train/eval/plot end to end on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from helpers import ROOT

from agentrl.algos import cli, cli_policy, cli_train, config_reference
from agentrl.algos.config import apply_overrides
from agentrl.algos.training.config import TrainConfig
from agentrl.envs.core import TextEnv
from agentrl.envs.parsing import ParsedAction
from agentrl.envs.tools import ToolSet


class _AnyAnswer:
    def parse(self, text):
        return ParsedAction(kind="answer", answer=text)

    def format_instructions(self):
        return "Reply with anything."

    def describe_tools(self, schemas):
        return ""


class EchoEnv(TextEnv):
    """One turn; reward 1 if the reply is empty, else 0."""

    def __init__(self):
        super().__init__(tools=ToolSet([]), parser=_AnyAnswer())

    def sample_task(self, rng):
        return {"id": str(int(rng.integers(100))), "query": "Say nothing."}

    def score(self, answer, task):
        return float(answer.strip() == ""), answer.strip() == ""


if "Test/Echo-v0" not in gym.registry:
    gym.register("Test/Echo-v0", entry_point=EchoEnv)


def test_overrides_parse_json_values_into_nested_keys():
    d = apply_overrides({"grpo": {"eps_low": 0.2}}, ["grpo.beta=0.04", "steps=5", "env_kwargs.families=[\"add\"]",
                                                         "model=my/model", "grpo.scale_std=false", "adapter=null"])
    assert d == {"grpo": {"eps_low": 0.2, "beta": 0.04, "scale_std": False}, "steps": 5,
                 "env_kwargs": {"families": ["add"]}, "model": "my/model", "adapter": None}
    cfg = TrainConfig.from_dict(d)
    assert cfg.algorithm.beta == 0.04 and cfg.algorithm.scale_std is False and cfg.env_kwargs == {"families": ["add"]}
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides({}, ["steps"])
    with pytest.raises(ValueError, match="unknown config key .grpo.betta.; did you mean .grpo.beta."):
        TrainConfig.from_dict({"grpo": {"betta": 1}})


def test_partial_nested_override_keeps_the_parents_own_nested_defaults():
    from agentrl.algos.config import config_from_dict
    from agentrl.algos.recipes.main_job import MainJobConfig

    assert MainJobConfig().stages.rl["grpo"] == {"scale_std": False}  # the main job's GRPO differs from GRPOConfig()
    cfg = config_from_dict(MainJobConfig, {"grpo": {"beta": 0.04}, "stages": {"rl": {"steps": 3}}})
    assert cfg.algorithm.beta == 0.04 and cfg.stages.rl["steps"] == 3 and cfg.stages.rl["lr"] == 6e-5
    assert cfg.stages.sft == MainJobConfig().stages.sft


def test_config_files_json_and_yaml(tmp_path):
    (tmp_path / "a.yaml").write_text("algo: dpo\nsteps: 7\ndpo:\n  beta: 0.2\nlora:\n  r: 4\n")
    (tmp_path / "b.json").write_text(json.dumps({"algo": "ppo", "ppo": {"baseline": "leave_one_out"}}))
    args = cli.build_parser().parse_args(["train", "--config", str(tmp_path / "a.yaml"), "--out", "x", "steps=9"])
    cfg = cli_train.build_train_config(args)
    assert (cfg.algo, cfg.steps, cfg.algorithm.beta, cfg.lora.r, cfg.out) == ("dpo", 9, 0.2, 4, "x")
    args = cli.build_parser().parse_args(["train", "--config", str(tmp_path / "b.json")])
    assert cli_train.build_train_config(args).algorithm.baseline == "leave_one_out"


def test_config_docs_cover_every_field_and_the_committed_page_is_current():
    import dataclasses

    from agentrl.algos.recipes.main_job import MainJobConfig, MainJobStages

    text = config_reference.config_docs()
    for f in dataclasses.fields(TrainConfig):  # the algorithm's section: under its name, one table per algorithm
        assert f"`{f.name}`" in text or (f.name == "algorithm" and "`<algo>.`" in text)
    cfg = TrainConfig()
    for section in ("lora", "collector"):
        for f in dataclasses.fields(getattr(cfg, section)):
            assert f"`{section}.{f.name}`" in text
    for algo in ("grpo", "ppo", "dpo", "sft"):
        for f in dataclasses.fields(TrainConfig(algo=algo).algorithm):
            assert f"`{algo}.{f.name}`" in text
    for f in config_reference.own_fields(MainJobConfig):  # its own keys; the inherited ones are TrainConfig's
        assert f"`{f.name}`" in text
    for f in dataclasses.fields(MainJobStages):
        assert f"`stages.{f.name}`" in text
    assert "Upper clip (clip-higher)" in text  # help text comes from the field docstrings
    page = ROOT / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8").strip() == text.strip(), \
        "docs/configuration.md is stale: python -m agentrl.algos.cli config-docs > docs/configuration.md"


def test_the_configuration_reference_is_markdown_without_sphinx_roles():
    """The field docstrings name code with Sphinx roles; the page shows them as inline code (was: a raw
    ``:class:`~agentrl.algos.policy.HFPolicy``` in ``collector.continuous``)."""
    import re

    role = re.compile(r":(?:py:)?[a-z]+:`")
    for text in (config_reference.config_docs(), (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")):
        assert not role.findall(text), [line for line in text.splitlines() if role.search(line)][:3]
    assert "(``Session.join_ready``: `HFPolicy`; `OpenAIPolicy` posts it at once)" in config_reference.config_docs()
    to_markdown = config_reference.sphinx_roles_to_markdown
    assert to_markdown(":class:`~agentrl.algos.policy.HFPolicy`, :func:`agentrl.envs.make`") == \
        "`HFPolicy`, `agentrl.envs.make`"
    assert to_markdown("(:mod:`~agentrl.algos. objectives.turn_credit`)") == "(`turn_credit`)"  # wrapped there


def test_the_main_job_is_its_own_command_and_train_needs_an_algorithm(monkeypatch, capsys, tmp_path):
    import agentrl.algos.recipes.main_job as main_job

    monkeypatch.chdir(tmp_path)  # the default --out (runs/main) must not be a run of the checkout's

    seen = {}

    def fake_main_job(cfg, resume=False, policy=None):
        seen["cfg"] = cfg
        return {"table": "| table |", "timings": {"total": 1.0}, "out": Path(cfg.out)}

    monkeypatch.setattr(main_job, "run_main_job", fake_main_job)
    assert cli.main(["main-job"]) == 0
    assert seen["cfg"].env == "AgentRL/ToolUse-v0" and seen["cfg"] == main_job.MainJobConfig()
    assert main_job.stage_config(seen["cfg"], "rl", "r").algorithm.scale_std is False  # Dr. GRPO's advantage
    assert "| table |" in capsys.readouterr().out
    assert cli.main(["main-job", "stages.rl.steps=3", "--out", "r"]) == 0
    assert main_job.stage_config(seen["cfg"], "rl", "r").steps == 3 and seen["cfg"].out == "r"
    # --device / --dtype reach the main job's config, as flags and as keys
    assert seen["cfg"].device == "auto"
    assert cli.main(["main-job", "--device", "cuda", "--dtype", "bf16"]) == 0
    assert seen["cfg"].device == "cuda" and seen["cfg"].dtype == "bf16"
    assert cli.main(["main-job", "device=cuda:1"]) == 0
    assert seen["cfg"].device == "cuda:1"
    # train never falls back to the main job: without an algorithm it says what to type
    for argv in (["train"], ["train", "--env", "AgentRL/ToolUse-v0"], ["train", "--env", "Test/Echo-v0"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "--algo NAME" in err and "agentrl main-job" in err
    # flags the main job does not use are refused, not dropped
    with pytest.raises(SystemExit):
        cli.main(["main-job", "--algo", "grpo"])
    assert "unrecognized arguments: --algo" in capsys.readouterr().err


def test_device_and_dtype_flags_reach_the_train_config(tmp_path):
    parser = cli.build_parser()
    args = parser.parse_args(["train", "--algo", "grpo", "--device", "cuda", "--dtype", "bf16", "--out", "x"])
    cfg = cli_train.build_train_config(args)
    assert (cfg.device, cfg.dtype) == ("cuda", "bf16")
    cfg = cli_train.build_train_config(parser.parse_args(["train", "--algo", "grpo", "--out", "x"]))
    assert (cfg.device, cfg.dtype) == ("auto", "auto")  # the defaults: CUDA when there is one
    # on resume the flags override the run's config.json
    (tmp_path / "config.json").write_text(json.dumps({"algo": "grpo", "device": "cpu", "dtype": "fp32"}))
    args = parser.parse_args(["train", "--resume", "--out", str(tmp_path), "--device", "cuda:1"])
    cfg = cli_train.build_train_config(args)
    assert (cfg.device, cfg.dtype) == ("cuda:1", "fp32")
    ev = parser.parse_args(["eval"])
    assert (ev.device, ev.dtype, ev.tasks) == ("auto", "auto", None)


def test_train_resume_eval_plot_end_to_end(tiny_dir, tmp_path, capsys):
    run = tmp_path / "run"
    common = ["--env", "Test/Echo-v0", "--model", str(tiny_dir), "--out", str(run)]
    assert cli.main(["train", "--algo", "grpo", *common, "steps=1", "tasks_per_step=2", "group_size=2",
                     "collector.max_new_tokens=4", "progress=false", "report_to=none", "dtype=fp32"]) == 0
    assert (run / "adapter" / "adapter_config.json").is_file()
    assert json.loads((run / "config.json").read_text())["steps"] == 1
    # --resume reads the run's config.json back; the override extends the run by one step
    assert cli.main(["train", "--resume", "--out", str(run), "steps=2"]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    printed = capsys.readouterr().out
    assert "done at step 2" in printed
    assert "\nsignal: " in printed and "updates held a group with unequal rewards" in printed  # docs/sampler.md

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps({"id": str(i), "query": "Say nothing."}) for i in range(3)) + "\n")
    out = tmp_path / "eval" / "results.jsonl"
    assert cli.main(["eval", "--env", "Test/Echo-v0", "--model", str(tiny_dir), "--adapter", str(run / "adapter"),
                     "--tasks-file", str(tasks), "--n", "2", "--max-new-tokens", "4", "--out", str(out),
                     "--dtype", "fp32"]) == 0
    assert len(out.read_text().splitlines()) == 6
    assert "Average@2" in capsys.readouterr().out
    assert cli.main(["plot", str(run)]) == 0
    assert any(Path(p).suffix == ".png" for p in capsys.readouterr().out.split())


FACTORY_MODULE = """
from helpers import ScoreEnv

from agentrl.envs import Rewards


def make_scored_env(invalid=-0.1):
    env = ScoreEnv()
    env.rewards = Rewards(invalid=invalid)  # what a reply cut off by its token budget earns
    return env
"""


def test_an_unregistered_env_factory_trains_and_evaluates_by_module_reference(tiny_dir, tmp_path, monkeypatch,
                                                                              capsys, request):
    import agentrl.envs

    (tmp_path / "my_scored_env.py").write_text(FACTORY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(agentrl.envs, "_ADDED", {})
    request.addfinalizer(lambda: gym.registry.pop("make_scored_env", None))
    env = "my_scored_env:make_scored_env"
    run = tmp_path / "run"
    assert cli.main(["train", "--algo", "grpo", "--env", env, "--model", str(tiny_dir), "--out", str(run),
                     "--env-kwargs", '{"invalid": -0.25}', "steps=1", "tasks_per_step=2", "group_size=2",
                     "collector.max_new_tokens=4", "progress=false", "report_to=none", "dtype=fp32"]) == 0
    assert (run / "adapter" / "adapter_config.json").is_file()
    [record] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert record["reward/mean"] == -0.25  # 4-token replies never finish: the factory's kwarg set their reward
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps({"id": str(i), "query": "Say something."}) for i in range(3)) + "\n")
    out = tmp_path / "eval.jsonl"
    assert cli.main(["eval", "--env", env, "--model", str(tiny_dir), "--adapter", str(run / "adapter"),
                     "--tasks-file", str(tasks), "--max-new-tokens", "4", "--out", str(out), "--dtype", "fp32"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3
    assert "Average@1" in capsys.readouterr().out


def test_eval_tasks_file_means_every_row_unless_tasks_is_given(tiny_dir, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps({"id": str(i), "query": "Say nothing."}) for i in range(40)) + "\n")
    common = ["eval", "--env", "Test/Echo-v0", "--model", str(tiny_dir), "--tasks-file", str(tasks),
              "--max-new-tokens", "1", "--dtype", "fp32", "--device", "cpu"]
    out = tmp_path / "all.jsonl"
    assert cli.main([*common, "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 40  # was 32: --tasks defaulted to 32 and cut the file
    out = tmp_path / "five.jsonl"
    assert cli.main([*common, "--tasks", "5", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 5


def test_test_tasks_use_the_dev_split_of_question_sets():
    from agentrl.algos.training.tasks import test_tasks

    tasks = test_tasks("AgentRL/Search-v0", 3)
    assert len(tasks) == 3 and all(t["question"] and t["golden_answers"] for t in tasks)
    dev_ids = {r["id"] for r in _bundled("search_dev.jsonl")}
    assert {t["id"] for t in tasks} <= dev_ids


def _bundled(name):
    import json
    from importlib.resources import files

    text = files("agentrl.envs.search").joinpath(name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_engine_args_and_the_run_folder_reach_the_managed_engine(monkeypatch, tmp_path):
    import agentrl.algos.policy.engine as engine

    seen = {}
    monkeypatch.setattr(engine, "start_engine_policy", lambda model, **kw: seen.update(model=model, **kw) or "policy")
    args = cli.build_parser().parse_args(["train", "--algo", "grpo", "--engine", "vllm",
                                          "--engine-args", "--gpu-memory-utilization 0.4 --enforce-eager"])
    assert cli_policy.policy_for(args, "m", run_dir=tmp_path, lora_rank=8, record_dir=tmp_path) == "policy"
    assert seen["extra_args"] == ["--gpu-memory-utilization", "0.4", "--enforce-eager"]
    assert seen["record_dir"] == tmp_path and seen["run_dir"] == tmp_path and seen["lora_rank"] == 8


def test_eval_records_a_ledger_row_only_where_ledger_names_a_file(tiny_dir, tmp_path):
    """``agentrl eval`` on rows of a fixed held-out set: without ``--ledger`` no row anywhere (the sets' folder
    is unchanged); with ``--ledger PATH`` exactly one row in PATH, naming the set."""
    import shutil

    from helpers import ROOT

    from agentrl.algos.evaluation import ledger

    sets = tmp_path / "sets"
    sets.mkdir()
    for suffix in (".jsonl", ".json"):
        shutil.copyfile(ROOT / "benchmarks" / "heldout" / f"tooluse{suffix}", sets / f"tooluse{suffix}")
    common = ["eval", "--env", "AgentRL/ToolUse-v0", "--model", str(tiny_dir), "--tasks-file",
              str(sets / "tooluse.jsonl"), "--tasks", "2", "--max-new-tokens", "2", "--dtype", "fp32",
              "--device", "cpu"]
    assert cli.main([*common, "--out", str(tmp_path / "a.jsonl")]) == 0
    assert sorted(p.name for p in sets.iterdir()) == ["tooluse.json", "tooluse.jsonl"]
    assert cli.main([*common, "--out", str(tmp_path / "b.jsonl"), "--ledger", str(sets / "ledger.jsonl")]) == 0
    [row] = ledger.read(sets / "ledger.jsonl")
    assert row["set"] == "tooluse"


def test_eval_max_total_tokens_caps_the_episode(tiny_dir, tmp_path):
    """``--max-total-tokens`` reaches the collector: an episode whose prompt alone is longer ends truncated before
    any reply, a longer cap lets the model write (BFCL's multi-turn prompts need more than the default 2048)."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "0", "query": "Say nothing."}) + "\n")
    common = ["eval", "--env", "Test/Echo-v0", "--model", str(tiny_dir), "--tasks-file", str(tasks),
              "--max-new-tokens", "1", "--dtype", "fp32", "--device", "cpu"]
    rows = {}
    for cap in (8, 4096):
        out = tmp_path / f"cap{cap}.jsonl"
        assert cli.main([*common, "--max-total-tokens", str(cap), "--out", str(out)]) == 0
        [rows[cap]] = [json.loads(line) for line in out.read_text().splitlines()]
    replied = {cap: sum(row["loss_mask"]) for cap, row in rows.items()}  # tokens the model wrote
    assert rows[8]["termination"] == "truncated" and replied[8] == 0 and replied[4096] >= 1, replied


def test_the_engine_memory_share_knows_whether_a_trainer_shares_the_gpu(monkeypatch, tiny_dir, tmp_path):
    """``eval --engine vllm`` trains nothing beside the engine (vLLM keeps its own memory share); ``train`` tells
    the engine whether it trains on CUDA (``device=cpu``: no, ``cuda:1``: yes, ``auto``: ask torch)."""
    from agentrl.algos import cli_eval

    seen = []

    def record(*args, **kwargs):
        seen.append(kwargs.get("trainer_on_gpu", "not passed"))
        raise ValueError("stop here")

    monkeypatch.setattr(cli_eval, "policy_for", record)
    monkeypatch.setattr(cli_train, "policy_for", record)
    assert cli.main(["eval", "--env", "AgentRL/ToolUse-v0", "--model", str(tiny_dir), "--engine", "vllm"]) != 0
    for device in ("cpu", "cuda:1", "auto"):
        assert cli.main(["train", "--env", "Test/Echo-v0", "--algo", "grpo", "--model", str(tiny_dir), "--engine",
                         "vllm", "--out", str(tmp_path / device), f"device={device}"]) != 0
    assert seen == [False, False, True, None], seen
