"""Configs as data: dataclasses built from nested dicts, ``key=value`` overrides, files, and their reference.

Every config in agentrl is a dataclass whose fields carry a docstring (the string literal under the field).
This module turns dicts into those dataclasses strictly, applies dotted command-line overrides
(``grpo.beta=0.04``) and reads JSON/YAML files. The markdown reference of every key (``agentrl config-docs`` ->
docs/configuration.md) is rendered by :mod:`agentrl.algos.config_reference`.

Every value is checked against its field's annotation when the dict is loaded (:func:`config_from_dict`); a
mismatch is a ``ValueError`` naming the dotted key, the expected type and the value, and an unknown key names
the nearest valid one. The checker is a small walk over :func:`typing.get_type_hints` (``str``, ``int``,
``float``, ``bool``, ``None`` unions, ``list[...]``, ``tuple[...]``, ``dict[..., ...]``, ``Literal``,
``Any`` and nested dataclasses: what the configs use). Safe coercions, and only these:

* an ``int`` where a ``float`` is declared becomes that float (``lr=1`` -> ``1.0``);
* an integral ``float`` where an ``int`` is declared becomes that int (``micro_batch_tokens=1e4`` -> ``10000``);
* a string that reads as a number where a number is declared becomes that number (PyYAML reads ``lr: 2e-4``
  as the string ``"2e-4"``; a quoted ``"3"`` in a YAML file is 3);
* a single string where a ``list[str]`` is declared becomes a one-element list (``report_to=wandb``).

Booleans are never coerced (``"false"`` is not ``False``, ``1`` is not ``True``) and nothing becomes a string.

A key or value that was renamed or removed (:data:`RENAMED_KEYS`, :data:`REMOVED_KEYS`,
:data:`RENAMED_VALUES`: the one table of old names) is refused with one line naming what replaced it, in a
dict, a ``key=value`` override or the ``config.json`` of an older run being resumed. There are no aliases:
the old name is gone.

One field may be a *tagged section* (:func:`tagged_section`): ``TrainConfig.algorithm``, whose config class is
the one registered for ``algo`` and which is written under the algorithm's name (``algo: ppo`` with
``ppo: {epochs: 2}``, ``ppo.epochs=2``), so an algorithm registered late gets its section by the same lookup.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import json
import math
import textwrap
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Where each name is defined, with the names it replaced.
GLOSSARY = "docs/architecture.md#glossary"

#: Renamed config keys, dotted as typed: old -> new. ``Class:key``: a top-level key of that config class only.
RENAMED_KEYS: dict[str, str] = {
    "sampler_shares_weights": "policy_shares_weights",
    "sampler_max_batch_tokens": "policy_max_batch_tokens",
    "grpo.step_weight": "grpo.turn_weight",
    "grpo.step_gamma": "grpo.turn_gamma",
    # the main job: a base TrainConfig plus each stage's overrides (agentrl.algos.recipes.main_job)
    "MainJobConfig:sft_families": "stages.sft.env_kwargs.families",
    "MainJobConfig:sft_demos": "stages.sft.sft.num_demos",
    "MainJobConfig:sft_steps": "stages.sft.steps",
    "MainJobConfig:sft_batch_size": "stages.sft.sft.batch_size",
    "MainJobConfig:sft_lr": "stages.sft.lr",
    "MainJobConfig:rl_steps": "stages.rl.steps",
    "MainJobConfig:rl_tasks_per_step": "stages.rl.tasks_per_step",
    "MainJobConfig:rl_group_size": "stages.rl.group_size",
    "MainJobConfig:rl_lr": "stages.rl.lr",
    "MainJobConfig:max_new_tokens": "stages.rl.collector.max_new_tokens",
    "MainJobConfig:max_turns": "stages.rl.collector.max_turns",
}

#: Removed config keys, dotted as typed: old -> what to use instead.
REMOVED_KEYS: dict[str, str] = {
    "asynchronous.tis_cap": "staleness='tis' truncates its weight at the algorithm's correction_cap "
                            "(grpo.correction_cap, ppo.correction_cap)",
    "tensorboard": "report_to is the one switch (report_to=none: no trackers; a list without 'tensorboard')",
}

#: Renamed values of a key: (dotted key, old value) -> new value.
RENAMED_VALUES: dict[tuple[str, str], str] = {
    ("grpo.guidance", "demos"): "luffy",
    ("grpo.guidance", "sft"): "relift",
}


def old_name_error(key: str, value: Any = dataclasses.MISSING, scope: str = "") -> ValueError | None:
    """The one-line error for a renamed or removed config key (``key`` dotted, as typed; ``scope``: the name of
    the config class whose top-level key it is), or for a renamed ``value`` of ``key``; None when neither is an
    old name."""
    if f"{scope}:{key}" in RENAMED_KEYS:
        return ValueError(f"{key} was renamed to {RENAMED_KEYS[f'{scope}:{key}']} ({GLOSSARY})")
    if key in RENAMED_KEYS:
        return ValueError(f"{key} was renamed to {RENAMED_KEYS[key]} ({GLOSSARY})")
    if key in REMOVED_KEYS:
        return ValueError(f"{key} was removed: {REMOVED_KEYS[key]} ({GLOSSARY})")
    if isinstance(value, str) and (key, value) in RENAMED_VALUES:
        return ValueError(f"{key}={value!r} was renamed to {key}={RENAMED_VALUES[key, value]!r} ({GLOSSARY})")
    return None


class _Mismatch(Exception):
    """A value that does not fit a type (internal: turned into a ValueError naming the key)."""


def type_name(hint: Any) -> str:
    """A readable name of a type annotation: ``int``, ``list[str]``, ``int or None``, ``'drop' or 'tis'``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "None"
    if hint is Any:
        return "any value"
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    if dataclasses.is_dataclass(hint):
        return f"a {hint.__name__} mapping"
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def _number(value: Any, hint: type, coerce: bool) -> Any:
    if isinstance(value, bool):
        raise _Mismatch
    if isinstance(value, str) and coerce:
        try:
            value = int(value) if hint is int else float(value)
        except ValueError:
            try:
                value = float(value)  # "1e4" for an int
            except ValueError:
                raise _Mismatch from None
    if hint is float and isinstance(value, (int, float)):
        return float(value)
    if hint is int and isinstance(value, int):
        return value
    if hint is int and isinstance(value, float) and coerce and math.isfinite(value) and value.is_integer():
        return int(value)
    raise _Mismatch


def check_value(value: Any, hint: Any, key: str, coerce: bool = True) -> Any:
    """``value`` checked against the annotation ``hint`` (and safely coerced, see the module docstring).

    Raises:
        ValueError: naming ``key`` (dotted), the expected type and the value.
    """
    try:
        return _check(value, hint, key, coerce)
    except _Mismatch:
        raise ValueError(f"{key}: expected {type_name(hint)}, got {value!r}") from None


def _check(value: Any, hint: Any, key: str, coerce: bool) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if hint is type(None) or hint is None:
        if value is None:
            return None
        raise _Mismatch
    if origin in (typing.Union, types.UnionType):
        for allow in (False, True):  # an exact fit first (3 for int | str stays 3), then a coerced one
            if allow and not coerce:
                break
            for member in args:
                try:
                    return _check(value, member, key, coerce=allow)
                except _Mismatch:
                    continue
        raise _Mismatch
    if origin is typing.Literal:
        if value in args and not (isinstance(value, bool) and not any(isinstance(a, bool) for a in args)):
            return value
        raise _Mismatch
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if isinstance(value, dict):
            return config_from_dict(hint, value, _prefix=f"{key}.")
        raise _Mismatch
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if hint in (int, float):
        return _number(value, hint, coerce)
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Mismatch
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        if isinstance(value, str) and coerce and origin is list:
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise _Mismatch
            return tuple(check_value(v, a, f"{key}[{i}]", coerce)
                         for i, (a, v) in enumerate(zip(args, value, strict=True)))
        item = args[0] if args else Any
        items = [check_value(v, item, f"{key}[{i}]", coerce) for i, v in enumerate(value)]
        return (origin or hint)(items)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        k_hint, v_hint = args if args else (Any, Any)
        return {check_value(k, k_hint, f"{key} key", coerce): check_value(v, v_hint, f"{key}.{k}", coerce)
                for k, v in value.items()}
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise _Mismatch
    return value  # an annotation this checker does not know: accepted as given


def unknown_key_error(key: str, valid: list[str], prefix: str = "") -> ValueError:
    """The error of an unknown config key: the nearest valid key when there is one, else the valid keys."""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f"did you mean {prefix + close[0]!r}?" if close else f"valid keys: {', '.join(sorted(valid))}"
    return ValueError(f"unknown config key {prefix + key!r}; {hint}")


@dataclasses.dataclass(frozen=True)
class TaggedSection:
    """A field whose config class is chosen by another field, its tag, and which is written under the tag's value
    (``TrainConfig.algorithm``: tag ``algo``, ``algo: ppo`` with ``ppo: {epochs: 2}`` or ``ppo.epochs=2``).

    ``names()`` lists the tag's valid values and ``config_class(name)`` gives one's config class; both are asked
    when a config is built, so a name registered late has its section. A section written under another valid
    name than the tag's is checked against its own class and not kept: a main-job stage that switches the
    algorithm inherits the base's section of the old one, and an older run's ``config.json`` holds every
    algorithm's section."""

    tag: str
    names: Callable[[], list[str]]
    config_class: Callable[[str], type]


def tagged_section(tag: str, names: Callable[[], list[str]], config_class: Callable[[str], type]) -> Any:
    """A dataclass field that is a :class:`TaggedSection` (None until ``__post_init__`` builds the tag's
    defaults through :func:`nested_dicts_to_configs`)."""
    return dataclasses.field(default=None, metadata={"tagged_section": TaggedSection(tag, names, config_class)})


def tagged_sections(cls) -> dict[str, TaggedSection]:
    """``{field name: TaggedSection}`` of a config class (or instance)."""
    return {f.name: f.metadata["tagged_section"] for f in dataclasses.fields(cls) if "tagged_section" in f.metadata}


def _section(cls: type, value: Any, base: Any, key: str) -> Any:
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        return config_from_dict(cls, value, base=cls() if base is None else base, _prefix=f"{key}.")
    raise ValueError(f"{key}: expected a {cls.__name__} mapping, got {value!r}")


def config_from_dict(cls, d: dict[str, Any], base=None, *, _prefix: str = ""):
    """Build dataclass ``cls`` from a (nested) dict, every value checked against its field's type.

    Keys not in ``d`` keep their values in ``base`` (default ``cls()``), nested configs included: a partial
    ``{"grpo": {"beta": 0.04}}`` changes beta and keeps the rest of the parent's own default ``grpo``. A tagged
    section (:class:`TaggedSection`) is read from the key named by its tag's value; when ``d`` changes the tag,
    the section starts from the new tag's defaults.

    Raises:
        ValueError: an old key or value (naming what replaced it, :func:`old_name_error`), an unknown key
            (naming the nearest valid key) or a value of the wrong type (naming the dotted key, the expected
            type and the value); see the module docstring for the coercions.
    """
    if not isinstance(d, dict):
        raise ValueError(f"{_prefix.rstrip('.') or cls.__name__}: expected a mapping of config keys, got {d!r}")
    tagged = tagged_sections(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in tagged]
    sections = [n for t in tagged.values() for n in t.names()]
    for k, v in d.items():
        old = old_name_error(f"{_prefix}{k}", v, "" if _prefix else cls.__name__)
        if old is not None:
            raise old
        if k not in names and k not in sections:
            raise unknown_key_error(str(k), names + sections, _prefix)
    hints = typing.get_type_hints(cls)
    base = cls() if base is None else base
    kwargs = {}
    for k, v in d.items():
        if k in sections:
            continue
        current = getattr(base, k)
        if dataclasses.is_dataclass(current) and isinstance(v, dict):
            kwargs[k] = config_from_dict(type(current), v, base=current, _prefix=f"{_prefix}{k}.")
        else:
            kwargs[k] = check_value(v, hints[k], f"{_prefix}{k}")
    for name, t in tagged.items():
        tag = kwargs.get(t.tag, getattr(base, t.tag))
        section = getattr(base, name) if tag == getattr(base, t.tag) else None  # None: the new tag's defaults
        for key in (k for k in d if k in t.names()):
            built = _section(t.config_class(key), d[key], section if key == tag else None, f"{_prefix}{key}")
            section = built if key == tag else section
        kwargs[name] = section
    return dataclasses.replace(base, **kwargs)


def nested_dicts_to_configs(config) -> None:
    """In ``__post_init__``: nested sections given as dicts (``TrainConfig(lora={"r": 4})``) become their
    dataclasses, built over the field's default; a tagged section becomes its tag's config class (its defaults
    when None: ``TrainConfig(algo="ppo")`` has ``PPOConfig()`` as ``algorithm``)."""
    tagged = tagged_sections(config)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name in tagged:
            t = tagged[f.name]
            tag = getattr(config, t.tag)
            if tag not in t.names():
                continue  # an unknown tag: validation names the valid ones
            cls = t.config_class(tag)
            if value is not None and not isinstance(value, (cls, dict)):
                raise ValueError(f"{f.name}: {t.tag}={tag!r} takes a {cls.__name__}, got a {type(value).__name__} "
                                 f"(set {t.tag} and {f.name} together, or {f.name}=None for {tag}'s defaults)")
            setattr(config, f.name, _section(cls, {} if value is None else value, None, tag))
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if isinstance(value, dict) and dataclasses.is_dataclass(default):
            setattr(config, f.name, config_from_dict(type(default), value, base=default, _prefix=f"{f.name}."))


def _drop_omitted(config, d: dict[str, Any]) -> dict[str, Any]:
    """``d`` (``dataclasses.asdict(config)``) without the fields, at any depth, whose metadata ``omit_if`` equals
    their value: a key added later is written only when set away from the behaviour before it existed, so the
    configs (and experiment setups) recorded earlier stay equal to the new ones that do the same."""
    for f in dataclasses.fields(config):
        v, sub = getattr(config, f.name), d.get(f.name)
        if "omit_if" in f.metadata and v == f.metadata["omit_if"]:
            d.pop(f.name, None)
        elif dataclasses.is_dataclass(v) and isinstance(sub, dict):
            _drop_omitted(v, sub)
        elif isinstance(v, (list, tuple)) and isinstance(sub, (list, tuple)) and len(v) == len(sub):
            for item, item_d in zip(v, sub, strict=True):
                if dataclasses.is_dataclass(item) and isinstance(item_d, dict):
                    _drop_omitted(item, item_d)
    return d


def config_to_dict(config) -> dict[str, Any]:
    """``dataclasses.asdict(config)`` with each tagged section written under its tag's value (``"grpo": {...}``,
    where :func:`config_from_dict` reads it back), less the fields at their ``omit_if`` value
    (:func:`_drop_omitted`)."""
    tagged = tagged_sections(config)
    out: dict[str, Any] = {}
    for k, v in _drop_omitted(config, dataclasses.asdict(config)).items():
        if k in tagged:
            if v is not None:
                out[getattr(config, tagged[k].tag)] = v
        else:
            out[k] = v
    return out


def parse_value(text: str) -> Any:
    """A command-line value: JSON if it parses (numbers, true/false/null, lists, objects), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    """Set ``value`` at the dotted ``key`` of the nested dict ``d`` (creating sub-dicts as needed)."""
    parts = key.strip().split(".")
    node = d
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value


def nested(settings: Any) -> dict[str, Any]:
    """A mapping of dotted keys as a nested dict, values copied as JSON (tuples become lists):
    ``{"stages.rl.lr": 2e-5, "eval_n": 1}`` -> ``{"stages": {"rl": {"lr": 2e-5}}, "eval_n": 1}``."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        set_dotted(out, key, json.loads(json.dumps(value)))
    return out


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set dotted ``key=value`` overrides in a nested dict (creating sub-dicts as needed)."""
    d = json.loads(json.dumps(d))
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value (e.g. grpo.beta=0.04)")
        key, value = item.split("=", 1)
        set_dotted(d, key, parse_value(value))
    return d


def load_config_file(path: str | Path, cls: type | None = None) -> dict[str, Any]:
    """Read a JSON or YAML config file into a dict; with ``cls``, also check its keys and values against that
    config class, so an error names the file (``run.yaml: group_size: expected int, got 'abc'``)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except ValueError as e:  # json.JSONDecodeError
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    except Exception as e:  # yaml.YAMLError: its message carries the line
        if type(e).__module__.startswith("yaml"):
            raise ValueError(f"{path}: not valid YAML ({e})") from e
        raise
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file must hold a mapping of config keys")
    if cls is not None:
        try:
            config_from_dict(cls, data)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e
    return data


def deep_merge(base: dict[str, Any], extra: dict[str, Any], whole: tuple[str, ...] = ("env_kwargs",)) -> dict[str, Any]:
    """``base`` updated by ``extra``, nested sections merged key by key (those named in ``whole``, by default
    ``env_kwargs``, are replaced whole)."""
    out = dict(base)
    for k, v in extra.items():
        merge = isinstance(v, dict) and isinstance(out.get(k), dict) and k not in whole
        out[k] = deep_merge(out[k], v, whole) if merge else v
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
