"""Typed configs: every key is checked against its declared type at load time, with errors that name the key,
the expected type, the value and (for typos) the nearest valid key; safe coercions only."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal

import pytest

from agentrl.algos import cli
from agentrl.algos.config import (
    REMOVED_KEYS,
    RENAMED_KEYS,
    RENAMED_VALUES,
    check_value,
    config_from_dict,
    load_config_file,
)
from agentrl.algos.recipes.main_job import MainJobConfig
from agentrl.algos.training.config import TrainConfig


@pytest.mark.parametrize("d, message", [
    ({"group_size": "abc"}, "group_size: expected int, got 'abc'"),
    ({"lr": [1]}, "lr: expected float, got [1]"),
    ({"progress": "false"}, "progress: expected bool, got 'false'"),
    ({"steps": True}, "steps: expected int, got True"),
    ({"collector": {"max_new_tokens": 1.5}}, "collector.max_new_tokens: expected int, got 1.5"),
    ({"grpo": {"beta": "high"}}, "grpo.beta: expected float, got 'high'"),
    ({"attn_implementation": 3}, "attn_implementation: expected str or None, got 3"),
    ({"env_kwargs": ["families"]}, "env_kwargs: expected dict[str, any value], got ['families']"),
    ({"report_to": ["wandb", 2]}, "report_to[1]: expected str, got 2"),
    ({"lora": 8}, "lora: expected a LoRAConfig mapping, got 8"),
])
def test_a_bad_value_names_the_dotted_key_the_type_and_the_value(d, message):
    with pytest.raises(ValueError) as e:
        config_from_dict(TrainConfig, d)
    assert str(e.value) == message


@pytest.mark.parametrize("key, nearest", [
    ({"grup_size": 3}, "did you mean 'group_size'?"),
    ({"grpo": {"bta": 0.1}}, "unknown config key 'grpo.bta'; did you mean 'grpo.beta'?"),
    ({"collector": {"max_new_token": 8}}, "did you mean 'collector.max_new_tokens'?"),
])
def test_a_typo_names_the_nearest_valid_key(key, nearest):
    with pytest.raises(ValueError, match="unknown config key") as e:
        config_from_dict(TrainConfig, key)
    assert nearest in str(e.value)


def test_an_unknown_key_with_no_near_match_lists_the_valid_keys():
    with pytest.raises(ValueError) as e:
        config_from_dict(TrainConfig, {"zzzz": 1})
    assert "valid keys:" in str(e.value) and "group_size" in str(e.value)


def test_good_values_are_unchanged_and_safe_coercions_apply():
    d = {"env": "AgentRL/Search-v0", "group_size": 4, "lr": 1e-3, "progress": False, "attn_implementation": None,
         "env_kwargs": {"families": ["add"]}, "grpo": {"beta": 0.04}, "lora": {"r": 4}, "env_workers": 2}
    cfg = config_from_dict(TrainConfig, d)
    assert (cfg.env, cfg.group_size, cfg.lr, cfg.progress, cfg.attn_implementation, cfg.env_kwargs, cfg.algorithm.beta,
            cfg.lora.r, cfg.env_workers) == ("AgentRL/Search-v0", 4, 1e-3, False, None, {"families": ["add"]},
                                             0.04, 4, 2)
    assert cfg.algorithm.eps_low == TrainConfig().algorithm.eps_low  # the rest of the section keeps its defaults
    coerced = config_from_dict(TrainConfig, {"lr": 1, "micro_batch_tokens": 1e4, "group_size": "3",
                                             "weight_decay": "2e-4", "report_to": "wandb"})
    assert (coerced.lr, coerced.micro_batch_tokens, coerced.group_size, coerced.weight_decay, coerced.report_to) \
        == (1.0, 10000, 3, 2e-4, ["wandb"])
    assert type(coerced.lr) is float and type(coerced.micro_batch_tokens) is int


def test_the_checker_knows_literal_optional_tuple_and_union_annotations():
    @dataclass
    class C:
        mode: Literal["drop", "tis"] = "drop"
        n: int | None = None
        pair: tuple[int, str] = (1, "a")
        names: list[str] | str = field(default_factory=list)

    assert (config_from_dict(C, {"mode": "tis", "n": None, "pair": [2, "b"], "names": "x"})
            == C("tis", None, (2, "b"), "x"))
    with pytest.raises(ValueError, match=r"mode: expected 'drop' or 'tis', got 'keep'"):
        config_from_dict(C, {"mode": "keep"})
    with pytest.raises(ValueError, match=r"pair\[1\]: expected str, got 3"):
        config_from_dict(C, {"pair": [1, 3]})
    assert check_value(3, int | str, "k") == 3  # an exact fit wins over a coercion


def test_nested_dicts_given_to_the_constructor_are_checked():
    assert TrainConfig(algorithm={"beta": 0.1}).algorithm.beta == 0.1
    with pytest.raises(ValueError, match="grpo.beta: expected float, got 'x'"):
        TrainConfig(algorithm={"beta": "x"})
    with pytest.raises(ValueError, match="algo='ppo' takes a PPOConfig, got a GRPOConfig"):
        TrainConfig(algo="ppo", algorithm=TrainConfig().algorithm)


def test_a_yaml_file_with_a_bad_value_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 2\ngrpo:\n  beta: 0.04\n  eps_low: abc\n")
    with pytest.raises(ValueError) as e:
        load_config_file(path, TrainConfig)
    assert str(e.value) == f"{path}: grpo.eps_low: expected float, got 'abc'"
    path.write_text("stages:\n  rl:\n    stpes: 3\n")
    with pytest.raises(ValueError, match=r"run.yaml: unknown config key 'stages.rl.stpes'; did you mean 'stages.rl.st"):
        load_config_file(path, MainJobConfig)
    path.write_text("lr: 2e-4\n")  # PyYAML reads this as a string; it is a float here
    assert config_from_dict(TrainConfig, load_config_file(path, TrainConfig)).lr == 2e-4


def test_a_json_file_that_does_not_parse_names_the_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"steps": 2,}')
    with pytest.raises(ValueError, match="run.json: not valid JSON"):
        load_config_file(path)


def test_cli_bad_value_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    argv = ["train", "--env", "Test/Echo-v0", "--algo", "grpo", "--out", str(tmp_path), "group_size=abc"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "agentrl train: error: group_size: expected int, got 'abc'" in err and "Traceback" not in err
    assert cli.main(argv[:-1] + ["grpo.bta=0.1"]) == 2
    assert "did you mean 'grpo.beta'?" in capsys.readouterr().err
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"collector": {"temperature": "hot"}}))
    assert cli.main(argv[:-1] + ["--config", str(path)]) == 2
    assert f"{path}: collector.temperature: expected float, got 'hot'" in capsys.readouterr().err
    assert cli.main(["main-job", "stages.rl.steps=many"]) == 2
    assert "stages.rl.steps: expected int, got 'many'" in capsys.readouterr().err


def test_train_help_lists_the_config_keys(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert "agentrl config-docs" in out
    for key in ("group_size", "report_to", "grpo.", "collector.", "max_new_tokens", "lora.", "stages."):
        assert key in out, key


def _nested(dotted: str, value) -> dict:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    *parents, leaf = dotted.split(".")
    d = {leaf: value}
    for p in reversed(parents):
        d = {p: d}
    return d


def _default(dotted: str):
    node = TrainConfig().to_dict()  # the algorithm's section under its name, as a file writes it
    for part in dotted.split("."):
        node = node[part]
    return node


#: The renames of every config (``Class:key``, one class's own: tests/algos/test_main_job_config.py).
RENAMED = {old: new for old, new in RENAMED_KEYS.items() if ":" not in old}
OLD_NAMES = ([(old, 1, f"{old} was renamed to {new} (docs/architecture.md#glossary)")
              for old, new in RENAMED.items()]
             + [(old, 1, f"{old} was removed: {instead} (docs/architecture.md#glossary)")
                for old, instead in REMOVED_KEYS.items()]
             + [(key, value, f"{key}={value!r} was renamed to {key}={new!r} (docs/architecture.md#glossary)")
                for (key, value), new in RENAMED_VALUES.items()])


@pytest.mark.parametrize("key, value, line", OLD_NAMES, ids=[f"{k}={v}" for k, v, _ in OLD_NAMES])
def test_an_old_key_or_value_gives_one_line_naming_what_replaced_it(key, value, line, tmp_path, capsys):
    with pytest.raises(ValueError) as e:  # a dict (a config file, a resumed run's config.json)
        TrainConfig.from_dict(_nested(key, value))
    assert str(e.value) == line and "\n" not in line
    override = f"{key}={json.dumps(value)}"
    argv = ["train", "--env", "Test/Echo-v0", "--algo", "grpo", "--out", str(tmp_path), override]
    assert cli.main(argv) == 2  # a key=value override
    assert f"agentrl train: error: {line}" in capsys.readouterr().err
    section = key.split(".")[0]
    if "." not in key or section in {f.name for f in dataclasses.fields(MainJobConfig)}:  # its keys too
        assert cli.main(["main-job", "--out", str(tmp_path / "main"), override]) == 2
        assert f"error: {line}" in capsys.readouterr().err
    resumed = {**TrainConfig(out=str(tmp_path)).to_dict(), **_nested(key, value)}
    (tmp_path / "config.json").write_text(json.dumps(resumed))
    assert cli.main(["train", "--out", str(tmp_path), "--resume"]) == 2  # an older run resumed
    assert f"agentrl train: error: {line}" in capsys.readouterr().err


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_a_renamed_key_s_new_name_is_a_key(old, new):
    assert TrainConfig.from_dict(_nested(new, _default(new))) == TrainConfig()


@pytest.mark.parametrize("key, value", sorted(RENAMED_VALUES))
def test_a_renamed_value_s_new_value_is_accepted(key, value):
    new = RENAMED_VALUES[key, value]
    config = TrainConfig.from_dict(_nested(key, new))
    assert _nested(key, new)[key.split(".")[0]].items() <= config.to_dict()[key.split(".")[0]].items()
