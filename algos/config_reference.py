"""The configuration reference: every config section of a run, as ``agentrl train --help``'s key list and as the
markdown page ``agentrl config-docs`` writes (docs/configuration.md), generated from the config dataclasses.

It imports every config class (algorithms included), so it sits above the training and recipe layers; the
parsing it relies on (:func:`~agentrl.algos.config.field_docs`, :func:`~agentrl.algos.config.type_name`) is in
:mod:`agentrl.algos.config`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
import typing

from agentrl.algos.config import field_docs, tagged_sections, type_name

#: A Sphinx role of a docstring (``:class:`~agentrl.algos.policy.HFPolicy```), which Markdown would show raw.
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref):`(~?)([^`]+)`")


def sphinx_roles_to_markdown(text: str) -> str:
    """``text`` with each Sphinx role as Markdown inline code: ``:class:`~agentrl.algos.policy.HFPolicy``` ->
    `` `HFPolicy` `` (the ``~`` form keeps the last dotted part, as Sphinx shows it), ``:func:`agentrl.envs.make```
    -> `` `agentrl.envs.make` ``. Whitespace inside a role (a docstring line wrapped there) is dropped. The
    configuration reference and the site's API pages (docs/_mkdocs/docstrings.py) both read docstrings this way."""

    def code(match: re.Match[str]) -> str:
        name = re.sub(r"\s+", "", match.group(2))
        return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"

    return SPHINX_ROLE.sub(code, text)


def config_sections() -> list[tuple[type, str, str]]:
    """``(config class, key prefix, one-line intro)`` for every section of the reference, algorithms included."""
    from agentrl.algos.models.lora import LoRAConfig
    from agentrl.algos.objectives import algorithm_class, algorithm_names
    from agentrl.algos.policy.engine_node import EngineConfig
    from agentrl.algos.recipes.main_job import MainJobConfig, MainJobStages
    from agentrl.algos.rollout.collector import CollectorConfig
    from agentrl.algos.training.config import AsyncConfig, TrainConfig
    from agentrl.algos.training.sampler import SamplerConfig

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
        (SamplerConfig, "sampler.", "The task sampler: learnability weights, skips and refill "
                                    "(`sampler.enabled=true`), see [sampler.md](sampler.md)."),
        (EngineConfig, "engine.", "The managed engine of each node (`--engine vllm`): its GPUs and memory share, "
                                  "see [engines.md](engines.md#data-parallel-runs)."),
        (MainJobConfig, "", "The main job (`agentrl main-job key=value ...`): a `TrainConfig`, the base both stages "
                            "start from (every key above: `model=`, `lora.r=`, `seed=`, `grpo.beta=`), with these "
                            "defaults and keys of its own."),
        (MainJobStages, "stages.", "Each main-job stage's `TrainConfig` keys over the base, merged key by key "
                                   "(`stages.rl.lr=2e-5`, `stages.sft.env_kwargs.families=[\"add\"]`)."),
    ]
    return sections


def own_fields(cls: type) -> list[dataclasses.Field]:
    """The fields ``cls`` declares itself (a subclass's new keys and changed defaults, not those it inherits)."""
    own = cls.__dict__.get("__annotations__", {})
    return [f for f in dataclasses.fields(cls) if f.name in own]


def config_keys_help(width: int = 100) -> str:
    """The keys of every config section, one wrapped paragraph per section (``agentrl train --help``'s epilog);
    their types, defaults and meanings are in ``agentrl config-docs``."""
    out = []
    for cls, prefix, _ in config_sections():
        keys = [f.name for f in own_fields(cls) if not dataclasses.is_dataclass(getattr(cls(), f.name))]
        head = f"{prefix or '(top level)'} [{cls.__name__}]: "
        out.append(textwrap.fill(", ".join(keys), width=width, initial_indent="  " + head,
                                 subsequent_indent="      "))
    return "\n".join(out)


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
        tagged = tagged_sections(cls)
        for f in own_fields(cls):
            value = getattr(defaults, f.name)
            if f.name in tagged:  # written under its tag's value: one section per algorithm, below
                doc = sphinx_roles_to_markdown(docs.get(f.name, ""))
                lines.append(f"| `{prefix}<{tagged[f.name].tag}>.` | section | `{type(value).__name__}` | {doc} |")
                continue
            if dataclasses.is_dataclass(value):
                doc = f"see `{type(value).__name__}`"
                shown = "…"
            else:
                doc = sphinx_roles_to_markdown(docs.get(f.name, ""))
                shown = json.dumps(value)
            shown_type = type_name(hints[f.name]) if not dataclasses.is_dataclass(value) else type(value).__name__
            lines.append(f"| `{prefix}{f.name}` | `{shown_type}` | `{shown}` | {doc.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)
