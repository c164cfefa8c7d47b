"""BFCL's own data and checker, imported from the installed ``bfcl-eval`` package (never a copy).

``pip install --no-deps bfcl-eval`` (the pinned version: :data:`~agentrl.envs.benchmark_packages.PACKAGES`)
installs the package without the API SDKs it pins (its model registry imports every one of them); what this
module uses needs the standard library plus ``filelock``:

* the data: ``bfcl_eval.utils.load_dataset_entry`` (the questions and function docs, with the "Python 3 syntax"
  hint BFCL's own harness adds) and ``load_ground_truth_entry`` (``possible_answer``);
* the checker: ``bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker``. Its module imports
  ``bfcl_eval.constants.model_config`` (the model registry, which imports every SDK) only to read
  ``MODEL_CONFIG_MAPPING[model].underscore_to_dot``; a small stand-in module answers that read while the checker
  is imported, then leaves ``sys.modules`` as it found it;
* the multi-turn categories: the executable classes (``multi_turn_eval/func_source_code/``, standard library plus
  ``mpmath``), run by ``multi_turn_utils.execute_multi_turn_func_call``; the checker ``multi_turn_checker``; and
  ``convert_to_function_call`` (a call as BFCL's string ``fn(arg=value)``), read from the source of
  ``bfcl_eval.model_handler.utils``, whose module imports the tree-sitter Java and JavaScript parsers.

BFCL's configuration module creates its ``result/``, ``score/`` and ``.file_locks/`` folders under
``$BFCL_PROJECT_ROOT`` when imported (by default inside site-packages); when that variable is unset it is set to
``~/.cache/agentrl/bfcl`` first.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.envs.benchmark_packages import PACKAGES

#: The package this env grades with (its pin and its pip command: ``BFCL.install``).
BFCL = PACKAGES["bfcl"]

#: The single-turn Python categories (graded by BFCL's AST checker; ``*irrelevance``: graded on not calling).
SINGLE_TURN = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_simple",
               "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance")

#: The multi-turn categories (played turn by turn against BFCL's executable classes, graded by its multi-turn
#: checker); memory and web_search are not covered (they need embedding models or the network).
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")

#: The model name the checker is given; the stand-in registry answers it with ``underscore_to_dot=False``
#: (our call formats carry dotted names such as ``math.factorial`` as they are).
CHECKER_MODEL = "agentrl-gym"

_MODEL_CONFIG = "bfcl_eval.constants.model_config"


def require_bfcl() -> None:
    """Import ``bfcl_eval.utils`` (pointing BFCL's output folders at a cache when ``BFCL_PROJECT_ROOT`` is unset).

    Raises:
        PackageMissing: the package, or a module it imports (``filelock``), is not installed (the message gives
            the pip command).
    """
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path.home() / ".cache" / "agentrl" / "bfcl"))
    BFCL.require("bfcl_eval.utils")


@dataclass(frozen=True)
class _StandInConfig:
    underscore_to_dot: bool = False


class _StandInRegistry(dict):
    """``MODEL_CONFIG_MAPPING`` as the AST checker reads it: every model keeps dots in function names."""

    def __missing__(self, key: str) -> _StandInConfig:
        return _StandInConfig()


@functools.lru_cache(maxsize=1)
def checker() -> tuple[Any, Any, str]:
    """``(ast_checker, Language.PYTHON, model_name)`` from the installed package.

    When the real model registry is already imported (a full install used in this process), the checker keeps it
    and ``model_name`` is one of its models that keeps dots in function names.
    """
    require_bfcl()
    module = "bfcl_eval.eval_checker.ast_eval.ast_checker"
    stand_in = None
    if module not in sys.modules and _MODEL_CONFIG not in sys.modules:
        stand_in = types.ModuleType(_MODEL_CONFIG, "agentrl's stand-in for BFCL's model registry (AST checker only)")
        stand_in.MODEL_CONFIG_MAPPING = _StandInRegistry()  # type: ignore[attr-defined]
        sys.modules[_MODEL_CONFIG] = stand_in
    try:
        ast_module = importlib.import_module(module)
    finally:
        if stand_in is not None and sys.modules.get(_MODEL_CONFIG) is stand_in:
            del sys.modules[_MODEL_CONFIG]
    from bfcl_eval.constants.enums import Language

    mapping = ast_module.MODEL_CONFIG_MAPPING
    name = CHECKER_MODEL
    if not isinstance(mapping, _StandInRegistry):  # the real registry: a model that keeps dots, named without "_"
        name = next(k for k, v in mapping.items() if "_" not in k and not v.underscore_to_dot)
    return ast_module.ast_checker, Language.PYTHON, name


def check_calls(task: dict[str, Any], model_output: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """BFCL's verdict on ``model_output`` (``[{"fn": {"arg": value}}, ...]``) for a single-turn ``task`` (a row of
    :func:`load_category`: ``category``, ``tools``, ``ground_truth``): ``{"valid", "error", "error_type"}``.

    The irrelevance categories are graded as BFCL's ``relevance_file_runner`` grades them: valid when the output
    holds no call (``bfcl_eval.utils.is_empty_output``); the others by ``ast_checker`` with the task's function
    docs and ``possible_answer``, after BFCL's own format check (``is_function_calling_format_output``).
    """
    require_bfcl()
    from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

    category = task["category"]
    if "irrelevance" in category:
        if is_empty_output(model_output):
            return {"valid": True, "error": [], "error_type": ""}
        return {"valid": False, "error": ["Valid syntax. Successfully decode AST when it should not."],
                "error_type": "irrelevance_error:decoder_success"}
    if not is_function_calling_format_output(model_output):
        return {"valid": False, "error": ["Did not output in the specified format."],
                "error_type": "ast_decoder:decoder_wrong_output_format"}
    ast_checker, language, model = checker()
    return dict(ast_checker(task["tools"], model_output, task["ground_truth"], language, category, model))


@functools.cache
def _rows(category: str) -> tuple[dict[str, Any], ...]:
    require_bfcl()
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries = load_dataset_entry(category)
    truth = {} if "irrelevance" in category else {g["id"]: g["ground_truth"] for g in
                                                  load_ground_truth_entry(category)}
    rows = []
    for e in entries:
        row = {"id": e["id"], "category": category, "question": e["question"], "tools": e["function"]}
        if truth:
            row["ground_truth"] = truth[e["id"]]
        if category in MULTI_TURN:
            row.update(initial_config=e["initial_config"], involved_classes=e["involved_classes"])
            if "missed_function" in e:
                row["missed_function"] = e["missed_function"]
        rows.append(row)
    return tuple(rows)


def load_category(category: str) -> list[dict[str, Any]]:
    """The rows of one BFCL category, in the package's order: ``id``, ``category``, ``question`` (BFCL's turns,
    each a list of messages), ``tools`` (BFCL's function docs: the task's tools, and what the checker grades
    against) and ``ground_truth`` (``possible_answer``; absent for the irrelevance categories).
    A multi-turn row also holds ``initial_config`` and ``involved_classes`` (the state BFCL's classes start
    from); its ``ground_truth`` is per turn a list of call strings, its ``tools`` the functions offered from
    the start, and a ``multi_turn_miss_func`` row's ``missed_function`` maps a turn index (a string) to the
    function docs BFCL holds back until that turn. Loaded once per process; each call returns fresh row dicts
    (sharing the nested data: do not mutate it).

    Raises:
        ValueError: a category outside :data:`SINGLE_TURN` and :data:`MULTI_TURN`.
        PackageMissing: the package is not installed.
    """
    if category not in SINGLE_TURN + MULTI_TURN:
        raise ValueError(f"BFCL category must be one of {', '.join(SINGLE_TURN + MULTI_TURN)}; got {category!r}")
    return [dict(r) for r in _rows(category)]


@functools.lru_cache(maxsize=1)
def call_string_converter() -> Any:
    """BFCL's ``convert_to_function_call`` (``[{"fn": {"arg": value}}]`` -> ``["fn(arg=value)"]``, each value
    written with ``repr``), the function BFCL's function-calling handlers decode a model's calls with.

    Its module, ``bfcl_eval.model_handler.utils``, imports the tree-sitter Java/JavaScript parsers and
    ``tenacity``, which a ``--no-deps`` install lacks; the function itself needs only ``json``. So its source is
    read from the installed module and compiled on its own.

    Raises:
        RuntimeError: the installed module no longer defines the function.
    """
    require_bfcl()
    name = "convert_to_function_call"
    spec = importlib.util.find_spec("bfcl_eval.model_handler.utils")
    path = Path(spec.origin) if spec and spec.origin else None
    tree = ast.parse(path.read_text(encoding="utf-8")) if path else ast.Module(body=[], type_ignores=[])
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise RuntimeError(f"bfcl_eval.model_handler.utils ({path}) defines no {name}; {BFCL.install}")
    namespace: dict[str, Any] = {"json": json}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace[name]
