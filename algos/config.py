"""Configs as data: dataclasses built from nested dicts, ``key=value`` overrides, files, and their reference.

Every config in agentrl is a dataclass whose fields carry a docstring (the string literal under the field).
This module turns dicts into those dataclasses strictly (an unknown key is an error naming the valid ones),
applies dotted command-line overrides (``grpo.beta=0.04``), reads JSON/YAML files, and renders the markdown
reference of every key (``agentrl config-docs`` -> docs/configuration.md).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import typing
from pathlib import Path
from typing import Any


def config_from_dict(cls, d: dict[str, Any], base=None):
    """Build dataclass ``cls`` from a (nested) dict; unknown keys are an error naming the valid ones.

    Keys not in ``d`` keep their values in ``base`` (default ``cls()``), nested configs included: a partial
    ``{"grpo": {"beta": 0.04}}`` changes beta and keeps the rest of the parent's own default ``grpo``."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(d) - set(names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}; valid: {sorted(names)}")
    base = cls() if base is None else base
    kwargs = {}
    for k, v in d.items():
        current = getattr(base, k)
        nested = dataclasses.is_dataclass(current) and isinstance(v, dict)
        kwargs[k] = config_from_dict(type(current), v, base=current) if nested else v
    return dataclasses.replace(base, **kwargs)


def nested_dicts_to_configs(config) -> None:
    """In ``__post_init__``: nested sections given as dicts (``TrainConfig(grpo={"beta": 0.04})``) become
    their dataclasses, built over the field's default."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if isinstance(value, dict) and dataclasses.is_dataclass(default):
            setattr(config, f.name, config_from_dict(type(default), value, base=default))


def parse_value(text: str) -> Any:
    """A command-line value: JSON if it parses (numbers, true/false/null, lists, objects), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set dotted ``key=value`` overrides in a nested dict (creating sub-dicts as needed)."""
    d = json.loads(json.dumps(d))
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value (e.g. grpo.beta=0.04)")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        node = d
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[parts[-1]] = parse_value(value)
    return d


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON or YAML config file into a dict."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file must hold a mapping of config keys")
    return data


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``extra``, nested sections merged key by key (``env_kwargs`` is replaced whole)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "env_kwargs" else v
    return out


def field_docs(cls) -> dict[str, str]:
    """The docstring under each field of a dataclass (the string literal that follows it in the source)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body
    docs = {}
    for a, b in zip(body, body[1:], strict=False):
        if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr) \
                and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
            docs[a.target.id] = " ".join(b.value.value.split())
    return docs


def config_sections() -> list[tuple[type, str, str]]:
    """``(config class, key prefix, one-line intro)`` for every section of the reference, algorithms included."""
    from agentrl.algos.models.lora import LoRAConfig
    from agentrl.algos.objectives import algorithm_class, algorithm_names
    from agentrl.algos.recipes.main_job import PipelineConfig
    from agentrl.algos.rollout.collector import CollectorConfig
    from agentrl.algos.training.config import AsyncConfig, TrainConfig

    sections = [
        (TrainConfig, "", "`agentrl train --algo ...`: top-level keys (`steps=50`, or in a `--config` file)."),
        (LoRAConfig, "lora.", "The LoRA adapter (`lora.r=8`)."),
        (CollectorConfig, "collector.", "Rollout sampling and budgets (`collector.max_new_tokens=128`)."),
    ]
    for name in algorithm_names():
        cls = algorithm_class(name)
        summary = (cls.config_class.__doc__ or "").split("\n")[0].rstrip(".")
        builtin = cls.__module__.startswith("agentrl.algos.objectives.")
        see = f" See [algorithms/{name}.md](algorithms/{name}.md)." if builtin else ""
        sections.append((cls.config_class, f"{name}.", f"`--algo {name}`: {summary}.{see}"))
    sections += [
        (AsyncConfig, "asynchronous.", "Decoupled rollout and training (`--async` sets `asynchronous.enabled`), "
                                       "see [integration.md](integration.md#asynchronous-training)."),
        (PipelineConfig, "", "The main job (`agentrl train --env AgentRL/ToolUse-v0` with no other argument, "
                             "or `agentrl train --pipeline key=value ...`)."),
    ]
    return sections


def config_docs() -> str:
    """Markdown reference of every config dataclass, generated from the code (fields, defaults, help)."""
    lines = ["# Configuration reference", "",
             "Generated from the config dataclasses by `agentrl config-docs` — do not edit by hand.", "",
             "Set any key on the command line as `key=value` (dotted for nested sections; values parse as JSON "
             "when they can), or put them in a JSON/YAML file passed with `--config`.", ""]
    for cls, prefix, intro in config_sections():
        docs = field_docs(cls)
        hints = typing.get_type_hints(cls)
        defaults = cls()
        lines += [f"## `{cls.__name__}`", "", intro, "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            value = getattr(defaults, f.name)
            if dataclasses.is_dataclass(value):
                doc = f"see `{type(value).__name__}`"
                shown = "…"
            else:
                doc = docs.get(f.name, "")
                shown = json.dumps(value)
            type_name = (getattr(hints[f.name], "__name__", None) or str(hints[f.name]).replace("typing.", "")).replace(" | ", " or ")
            lines.append(f"| `{prefix}{f.name}` | `{type_name}` | `{shown}` | {doc.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)
