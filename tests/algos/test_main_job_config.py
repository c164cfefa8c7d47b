"""The main job as a base TrainConfig plus each stage's overrides (issue 58): the stages it builds are the ones the
copied-key MainJobConfig built before (main_job_stages_before.json: captured from that code, field by field)."""

import dataclasses
import json
from pathlib import Path

import pytest

from agentrl.algos import cli, cli_train
from agentrl.algos.config import RENAMED_KEYS, config_from_dict, load_config_file
from agentrl.algos.recipes.main_job import RL_FAMILIES, MainJobConfig, eval_collector, stage_config
from agentrl.algos.training.config import TrainConfig

#: Each stage's TrainConfig (``dataclasses.asdict``, the sections of the algorithms not run left out) and the
#: evaluations' CollectorConfig, as ``sft_train_config`` / ``rl_train_config`` built them before issue 58.
BEFORE = json.loads((Path(__file__).parent / "main_job_stages_before.json").read_text(encoding="utf-8"))

#: The same runs in the new keys: "default" is ``agentrl main-job`` with no arguments; "overrides" was
#: seed=1 sft_families=["add","multiply"] env_kwargs={"items": 999} rl_lr=2e-5 max_new_tokens=64 max_turns=3
#: grpo.beta=0.04 sft_steps=2 rl_group_size=4 memory_budget_gb=3 lora.r=4 model=tiny report_to=none.
NOW = {
    "default": [],
    "overrides": ["seed=1", 'stages.sft.env_kwargs.families=["add","multiply"]', 'env_kwargs={"items": 999}',
                  "stages.rl.lr=2e-5", "stages.rl.collector.max_new_tokens=64", "stages.rl.collector.max_turns=3",
                  "grpo.beta=0.04", "stages.sft.steps=2", "stages.rl.group_size=4", "memory_budget_gb=3",
                  "lora.r=4", "model=tiny", "report_to=none"],
}


def _main_job_config(overrides: list[str]) -> MainJobConfig:
    args = cli.build_parser().parse_args(["main-job", *overrides])
    return cli_train.build_main_job_config(args)


def _since_issue_59(before: dict) -> dict:
    """The RL stage since issue 59: the task sampler on, without refill (budget 1), and ToolUse-v0's
    families at the cold start's edge of competence (the only two changes)."""
    after = json.loads(json.dumps(before))
    after["env_kwargs"] = {**after["env_kwargs"], "families": list(RL_FAMILIES)}
    after["sampler"] = {**json.loads(json.dumps(TrainConfig().to_dict()))["sampler"], "enabled": True, "budget": 1.0}
    return after


@pytest.mark.parametrize("case", sorted(NOW))
def test_both_stages_are_field_by_field_the_ones_built_before(case):
    cfg = _main_job_config(NOW[case])
    for stage, out in (("sft", "OUT/sft"), ("rl", "OUT/grpo")):
        tc = stage_config(cfg, stage, out)
        default = json.loads(json.dumps(TrainConfig(algo=tc.algo).to_dict()))
        before = _since_issue_59(BEFORE[case][stage]) if stage == "rl" else BEFORE[case][stage]
        _same(json.loads(json.dumps(tc.to_dict())), before, default, f"{case}: {stage}")
    assert json.loads(json.dumps(dataclasses.asdict(eval_collector(cfg)))) == BEFORE[case]["eval"]


def _same(now: dict, before: dict, default: dict, where: str) -> None:
    """Every key of ``before`` has its value in ``now`` (sections key by key); a key added since (e.g. the sampler
    section, a new key of the algorithm's) holds its default."""
    for key, value in before.items():
        if isinstance(value, dict) and isinstance(default.get(key), dict) and value.keys() <= default[key].keys():
            _same(now[key], value, default[key], f"{where}.{key}")
        else:
            assert now[key] == value, (where, key)
    for key in now.keys() - before.keys():
        assert now[key] == default[key], (where, key)


def test_no_arguments_is_the_default_config_and_a_stage_may_set_its_section_either_way():
    assert _main_job_config([]) == MainJobConfig()
    on_base = stage_config(_main_job_config(["grpo.beta=0.04"]), "rl", "r")
    in_stage = stage_config(_main_job_config(["stages.rl.grpo.beta=0.04"]), "rl", "r")
    assert on_base == in_stage and in_stage.algorithm.beta == 0.04 and in_stage.algorithm.scale_std is False
    assert stage_config(_main_job_config(["grpo.beta=0.04"]), "sft", "s").algo == "sft"  # GRPO's keys not kept


def test_a_stage_may_switch_its_algorithm_and_keeps_its_other_keys():
    cfg = _main_job_config(["stages.rl.algo=ppo", "stages.rl.ppo.epochs=2"])
    rl = stage_config(cfg, "rl", "r")
    assert (rl.algo, rl.algorithm.epochs, rl.steps, rl.group_size, rl.collector.max_new_tokens) == ("ppo", 2, 16, 8, 96)
    dpo = stage_config(MainJobConfig(), "rl", "r", algo="dpo", dpo={"beta": 0.2})
    assert (dpo.algo, dpo.algorithm.beta, dpo.lr) == ("dpo", 0.2, 6e-5)
    assert stage_config(MainJobConfig(seed=3), "rl", "r").collector.seed == 3  # sampling stages: seed
    assert stage_config(_main_job_config(["seed=3", "stages.rl.collector.seed=5"]), "rl", "r").collector.seed == 5


def test_stage_keys_are_checked_when_the_config_is_loaded(tmp_path):
    with pytest.raises(ValueError, match="unknown config key 'stages.rl.stpes'; did you mean 'stages.rl.steps'"):
        _main_job_config(["stages.rl.stpes=3"])
    with pytest.raises(ValueError, match="stages.sft.lr: expected float, got 'fast'"):
        _main_job_config(["stages.sft.lr=fast"])
    with pytest.raises(ValueError, match="unknown config key 'stages.dpo'"):
        _main_job_config(["stages.dpo.steps=3"])
    path = tmp_path / "job.yaml"
    path.write_text("model: tiny\nstages:\n  rl:\n    lr: 1e-5\n    grpo: {beta: 0.1}\n")
    cfg = config_from_dict(MainJobConfig, load_config_file(path, MainJobConfig))
    rl = stage_config(cfg, "rl", "r")
    assert (rl.model, rl.lr, rl.algorithm.beta, rl.algorithm.scale_std, rl.steps) == ("tiny", 1e-5, 0.1, False, 16)


def test_a_base_key_every_stage_sets_is_refused_naming_where_it_goes():
    with pytest.raises(ValueError, match=r"steps: both stages set their own \(stages.sft.steps, stages.rl.steps\)"):
        _main_job_config(["steps=5"])


MAIN_JOB_RENAMES = sorted((k.split(":", 1)[1], v) for k, v in RENAMED_KEYS.items() if k.startswith("MainJobConfig:"))


@pytest.mark.parametrize("old, new", MAIN_JOB_RENAMES)
def test_an_old_main_job_key_names_its_new_one_and_the_new_one_is_a_key(old, new):
    line = f"{old} was renamed to {new} (docs/architecture.md#glossary)"
    with pytest.raises(ValueError) as e:
        _main_job_config([f"{old}=1"])
    assert str(e.value) == line
    with pytest.raises(ValueError, match="unknown config key"):  # not a TrainConfig rename: train never had it
        TrainConfig.from_dict({old: 1})
    value = {"stages.sft.env_kwargs.families": '["add"]'}.get(new, "3")
    assert _main_job_config([f"{new}={value}"]) != MainJobConfig()


def test_the_rl_stage_draws_toolUse_families_at_the_edge_unless_families_are_named():
    assert stage_config(MainJobConfig(), "rl", "r").env_kwargs["families"] == list(RL_FAMILIES)
    assert "stock_total" not in RL_FAMILIES  # 3 % at the cold start (docs/sampler.md)
    assert "families" not in stage_config(MainJobConfig(), "sft", "s").env_kwargs  # the cold start: every family
    named = _main_job_config(['stages.rl.env_kwargs.families=["add"]'])
    assert stage_config(named, "rl", "r").env_kwargs["families"] == ["add"]
    on_base = _main_job_config(['env_kwargs={"families": ["days"]}'])
    assert stage_config(on_base, "rl", "r").env_kwargs["families"] == ["days"]
    other = MainJobConfig(env="AgentRL/PythonMath-v0")  # another env's tasks have no such families
    assert "families" not in stage_config(other, "rl", "r").env_kwargs
    assert stage_config(other, "rl", "r").sampler.enabled
