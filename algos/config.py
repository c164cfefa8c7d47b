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
from pathlib import Path
from typing import Any

#: Where each name is defined, with the names it replaced.
GLOSSARY = "docs/architecture.md#glossary"

#: Renamed config keys, dotted as typed: old -> new.
RENAMED_KEYS: dict[str, str] = {
    "sampler_shares_weights": "policy_shares_weights",
    "sampler_max_batch_tokens": "policy_max_batch_tokens",
    "grpo.step_weight": "grpo.turn_weight",
    "grpo.step_gamma": "grpo.turn_gamma",
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


def old_name_error(key: str, value: Any = dataclasses.MISSING) -> ValueError | None:
    """The one-line error for a renamed or removed config key (``key`` dotted, as typed), or for a renamed
    ``value`` of ``key``; None when neither is an old name."""
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


def config_from_dict(cls, d: dict[str, Any], base=None, *, _prefix: str = ""):
    """Build dataclass ``cls`` from a (nested) dict, every value checked against its field's type.

    Keys not in ``d`` keep their values in ``base`` (default ``cls()``), nested configs included: a partial
    ``{"grpo": {"beta": 0.04}}`` changes beta and keeps the rest of the parent's own default ``grpo``.

    Raises:
        ValueError: an old key or value (naming what replaced it, :func:`old_name_error`), an unknown key
            (naming the nearest valid key) or a value of the wrong type (naming the dotted key, the expected
            type and the value); see the module docstring for the coercions.
    """
    if not isinstance(d, dict):
        raise ValueError(f"{_prefix.rstrip('.') or cls.__name__}: expected a mapping of config keys, got {d!r}")
    names = [f.name for f in dataclasses.fields(cls)]
    for k, v in d.items():
        old = old_name_error(f"{_prefix}{k}", v)
        if old is not None:
            raise old
        if k not in names:
            raise unknown_key_error(str(k), names, _prefix)
    hints = typing.get_type_hints(cls)
    base = cls() if base is None else base
    kwargs = {}
    for k, v in d.items():
        current = getattr(base, k)
        if dataclasses.is_dataclass(current) and isinstance(v, dict):
            kwargs[k] = config_from_dict(type(current), v, base=current, _prefix=f"{_prefix}{k}.")
        else:
            kwargs[k] = check_value(v, hints[k], f"{_prefix}{k}")
    return dataclasses.replace(base, **kwargs)


def nested_dicts_to_configs(config) -> None:
    """In ``__post_init__``: nested sections given as dicts (``TrainConfig(grpo={"beta": 0.04})``) become
    their dataclasses, built over the field's default."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if isinstance(value, dict) and dataclasses.is_dataclass(default):
            setattr(config, f.name, config_from_dict(type(default), value, base=default, _prefix=f"{f.name}."))


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


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``extra``, nested sections merged key by key (``env_kwargs`` is replaced whole)."""
    out = dict(base)
    for k, v in extra.items():
        merge = isinstance(v, dict) and isinstance(out.get(k), dict) and k != "env_kwargs"
        out[k] = deep_merge(out[k], v) if merge else v
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
