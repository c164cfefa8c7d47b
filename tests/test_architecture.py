"""The layout's promises: a new algorithm is one file plus one registry line, documented imports work, one
import path per name, a small typed public API, no import cycle (module or function level), no upward import
between layers, no oversized files, every package is installed, no ``sys.path`` surgery. The learning harness
(``benchmarks/harness``, imported as ``harness``) keeps the same rules, with layers of its own."""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import io
import re
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT, tiny_train_config, tiny_train_model

PACKAGES = {"agentrl.envs": ROOT / "envs", "agentrl.algos": ROOT / "algos",
            "harness": ROOT / "benchmarks" / "harness"}


# ---------------------------------------------------------------------------------------------- a new
# algorithm

#: The page that shows a new algorithm, and the file it shows in full (its code is the one the tests train).
ALGORITHM_PAGE = ROOT / "docs" / "integration.md"
ALGORITHM_FILE = "algos/objectives/reinforce.py"


def documented_algorithm() -> tuple[str, str, str]:
    """``(name, class name, source)`` of the algorithm ``docs/integration.md`` shows complete: the first
    ```python block after the sentence naming ``algos/objectives/reinforce.py``, and the ``ALGORITHMS`` line
    the page gives for it (``"reinforce": "agentrl.algos.objectives.reinforce:Reinforce"``)."""
    page = ALGORITHM_PAGE.relative_to(ROOT)
    text = ALGORITHM_PAGE.read_text(encoding="utf-8")
    at = text.find(f"`{ALGORITHM_FILE}`")
    assert at >= 0, f"{page} no longer names `{ALGORITHM_FILE}` before the algorithm it shows in full"
    block = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M).search(text, at)
    assert block, f"{page}: no ```python block after `{ALGORITHM_FILE}`"
    source = block.group(1)
    line = text.count("\n", 0, block.start()) + 2
    try:
        tree = ast.parse(source, filename=f"{page}:{line}")
    except SyntaxError as e:
        pytest.fail(f"{page}: the code of `{ALGORITHM_FILE}` (line {line}) is not valid Python: {e}")
    module = "agentrl." + ALGORITHM_FILE.removesuffix(".py").replace("/", ".")
    entry = re.search(rf'^\s*"(\w+)":\s*"{re.escape(module)}:(\w+)",?\s*$', text[block.end():], re.M)
    assert entry, f"{page}: no ALGORITHMS line '\"<name>\": \"{module}:<Class>\",' after the code"
    name, cls = entry.groups()
    assert cls in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}, \
        f"{page}: the ALGORITHMS line names {cls}, which the code of `{ALGORITHM_FILE}` does not define"
    return name, cls, source


@pytest.fixture
def documented_algorithm_registered(tmp_path, monkeypatch):
    """The algorithm file of docs/integration.md written to ``reinforce_doc.py`` in a folder on sys.path and
    registered under the page's name by its ``module:Class`` path (undone after: the test runs on a copy of
    the registry; TrainConfig is built first, so no ``reinforce.`` section outlives it). Yields
    ``(name, class name)``."""
    from agentrl.algos import objectives
    from agentrl.algos.training import config  # noqa: F401 - TrainConfig's sections: the built-ins only

    name, cls, source = documented_algorithm()
    (tmp_path / "reinforce_doc.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(objectives, "ALGORITHMS", copy.deepcopy(objectives.ALGORITHMS))
    objectives.register_algorithm(name, f"reinforce_doc:{cls}")  # the one registry line
    yield name, cls
    sys.modules.pop("reinforce_doc", None)


def test_a_new_algorithm_is_one_file_and_one_registry_line(documented_algorithm_registered, tokenizer, tmp_path):
    """The algorithm docs/integration.md shows, as printed there: registered, it trains, takes its config
    section, and appears in ``--algo``'s choices and the config reference."""
    from agentrl.algos import Trainer, cli, config_reference

    name, cls = documented_algorithm_registered
    trainer = Trainer(tiny_train_config(tmp_path, algo=name), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    [m] = trainer.train()
    assert trainer.global_step == 1 and m["train/optimizer_steps"] == 1 and m["train/loss_tokens"] > 0
    assert type(trainer.algo).__name__ == cls and type(trainer.algo).__module__ == "reinforce_doc"
    assert type(trainer.algo).min_group_size == 2  # a group-mean baseline needs a group
    config_class = type(trainer.algo).config_class
    assert trainer.algo.config == config_class() and trainer.algo.config.scale == 1.0  # the default on the page
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if p.requires_grad)

    # Its section takes overrides and survives the run's config.json (registered after TrainConfig was built).
    from agentrl.algos import TrainConfig

    tuned = TrainConfig.from_dict({"algo": name, name: {"scale": 0.5}})
    assert tuned.algorithm.scale == 0.5 and tuned.to_dict()[name] == {"scale": 0.5}
    assert TrainConfig.from_dict(tuned.to_dict()).algorithm.scale == 0.5  # what config.json resumes
    with pytest.raises(ValueError, match=rf"{name}\.scal\b"):
        TrainConfig.from_dict({"algo": name, name: {"scal": 0.5}})

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert re.search(rf"\{{grpo,ppo,dpo,sft,{name}\}}", out.getvalue()), out.getvalue()
    docs = config_reference.config_docs()
    assert f"## `{config_class.__name__}`" in docs
    for field in dataclasses.fields(config_class):  # each key with its meaning (the field's docstring)
        assert re.search(rf"^\| `{name}\.{field.name}` \|.*\| [^|\s][^|]* \|$", docs, re.M), (field.name, docs)


def test_an_unknown_algorithm_names_the_registered_ones(tmp_path):
    from agentrl.algos import TrainConfig

    with pytest.raises(ValueError, match=r"algo must be one of \('grpo', 'ppo', 'dpo', 'sft'"):
        TrainConfig(algo="reinforce", out=str(tmp_path)).validate()


def test_every_builtin_algorithm_declares_the_contract():
    from agentrl.algos.objectives import ALGORITHMS, algorithm_class
    from agentrl.algos.objectives.base import Algorithm
    from agentrl.algos.training.config import TrainConfig

    for name in ALGORITHMS:
        cls = algorithm_class(name)
        assert issubclass(cls, Algorithm), name
        assert isinstance(TrainConfig(algo=name).algorithm, cls.config_class), name  # its config section


def test_an_algorithm_s_keys_have_one_mechanism():
    """Issue 58: one tagged section (TrainConfig.algorithm, chosen by algo through the registry) is the only way
    an algorithm's keys reach a config: no field per algorithm, no attribute fallback, no own (de)serialiser."""
    from agentrl.algos.config import tagged_sections
    from agentrl.algos.objectives import ALGORITHMS
    from agentrl.algos.recipes.main_job import MainJobConfig
    from agentrl.algos.training.config import TrainConfig

    for cls in (TrainConfig, MainJobConfig):
        assert list(tagged_sections(cls)) == ["algorithm"], cls
        assert not {f.name for f in dataclasses.fields(cls)} & set(ALGORITHMS.names()), cls
        assert "__getattr__" not in vars(cls), cls
    source = (ROOT / "algos" / "training" / "config.py").read_text()
    assert "TYPE_CHECKING" not in source and "late_sections" not in source


# ---------------------------------------------------------------------------------------------- import paths


def _documented_imports() -> list[str]:
    """Every ``from agentrl... import ...`` / ``import agentrl...`` statement in README.md and docs/ (in code
    blocks and in inline code)."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "docs").rglob("*.py")]
    found = set()
    for f in files:
        text = f.read_text(encoding="utf-8")
        for m in re.finditer(r"(?:^\s*|`)(from agentrl[\w.]* import (?:\([\w,\s]+\)|[\w, ]+)"
                             r"|import agentrl[\w.]*)", text, re.M):
            found.add(" ".join(m.group(1).replace("(", "").replace(")", "").split()).rstrip(","))
    return sorted(found)


@pytest.mark.parametrize("statement", _documented_imports())
def test_documented_import_works(statement):
    exec(statement, {})


def test_the_public_api_is_small_typed_and_documented():
    """``agentrl.algos`` resolves its names lazily; its TYPE_CHECKING block (what type checkers and IDEs
    read), ``__all__`` and the lazy table name the same modules, and the package docstring documents every
    name."""
    import agentrl.algos as algos
    import agentrl.envs as envs

    tree = ast.parse((ROOT / "algos" / "__init__.py").read_text(encoding="utf-8"))
    [block] = [n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    typed = {a.name: node.module for node in block.body for a in node.names}
    assert typed == algos._API and sorted(typed) == sorted(algos.__all__)
    for package in (algos, envs):
        assert len(package.__all__) <= 25, package.__name__
        for name in package.__all__:
            assert getattr(package, name) is not None, name
            assert re.search(rf"`{name}`", package.__doc__), f"{package.__name__}'s docstring does not document {name}"
    assert all(getattr(algos, n).__module__ == m for n, m in algos._API.items())


# ---------------------------------------------------------------------------------------------- layout rules


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in PACKAGES.items():
        for f in folder.rglob("*.py"):
            rel = f.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
    return mods


def _absolute(node: ast.ImportFrom, name: str, path: Path) -> str:
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every project module that ``name`` imports, at module level or inside a function (not under
    ``TYPE_CHECKING``, which never runs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree)
               if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                target = a.name
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                out.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, path)
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {m for m in out if m in modules} - {name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, m, modules) for m, p in modules.items()}


def test_no_import_cycles_at_module_or_function_level():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                dfs(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)


#: The layers, lowest first: a module imports only from its own layer or lower ones (docs/architecture.md).
LAYERS = [
    ("agentrl.envs",),
    ("agentrl.algos._io", "agentrl.algos.config", "agentrl.algos.models"),
    ("agentrl.algos.policy", "agentrl.algos.rollout"),
    ("agentrl.algos.objectives",),
    ("agentrl.algos.evaluation",),
    ("agentrl.algos.training",),
    ("agentrl.algos.recipes", "agentrl.algos.integrations"),
    ("agentrl.algos.cli", "agentrl.algos.config_reference", "agentrl.algos"),
]


def _layer(module: str) -> int:
    prefixes = [p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")]
    best = max(prefixes, key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def test_lower_layers_never_import_higher_ones():
    upward = sorted(f"{m} -> {n}" for m, deps in _graph().items() for n in deps
                    if m.startswith("agentrl") and n.startswith("agentrl") and _layer(n) > _layer(m)
                    and n != "agentrl.algos")
    assert not upward, upward


#: The learning harness's layers, lowest first (benchmarks/harness/__init__.py): declarations, then the fixed
#: sets, then the one reader (and the runners' writer) of committed data, then runners and renderers, then the
#: command lines that run and then render.
HARNESS_LAYERS = [
    ("harness.layout", "harness.experiments", "harness.transfer", "harness.record"),
    ("harness.heldout_draw", "harness.heldout", "harness.machine"),
    ("harness.data", "harness.export", "harness.speed"),
    ("harness.controls", "harness.failure_modes",  # runners
     "harness.transfer_exec", "harness.transfer_regrade", "harness.axes_run", "harness.axes_exec",
     "harness.learning_exec", "harness.compare_exec",
     "harness.tables", "harness.figures", "harness.compare_page", "harness.run_page", "harness.results_page",
     "harness.pages", "harness.transfer_page", "harness.axes_page"),  # renderers
    ("harness.commands", "harness.suite", "harness.axes_cli", "harness.transfer_cli", "harness.experiment_cli"),
]
HARNESS_RUNNERS = {"harness.controls", "harness.failure_modes",
                   "harness.transfer_exec", "harness.transfer_regrade", "harness.axes_run", "harness.axes_exec",
                   "harness.learning_exec", "harness.compare_exec"}
HARNESS_RENDERERS = {"harness.tables", "harness.figures", "harness.compare_page", "harness.run_page",
                     "harness.results_page", "harness.pages", "harness.transfer_page", "harness.axes_page"}


def test_the_harness_keeps_its_layers_and_runners_never_import_pages():
    graph = {m: deps for m, deps in _graph().items() if m.startswith("harness.")}
    layer = {m: i for i, names in enumerate(HARNESS_LAYERS) for m in names}
    missing = set(graph) - {"harness"} ^ set(layer)
    assert not missing, f"give each harness module a layer: {missing}"
    upward = sorted(f"{m} -> {n}" for m, deps in graph.items() for n in deps
                    if n in layer and layer[n] > layer[m])
    assert not upward, upward
    crossing = sorted(f"{m} -> {n}" for m, deps in graph.items() for n in deps
                      if (m in HARNESS_RUNNERS and n in HARNESS_RENDERERS)
                      or (m in HARNESS_RENDERERS and n in HARNESS_RUNNERS))
    assert not crossing, f"a runner never imports a renderer, nor a renderer a runner: {crossing}"
    library = sorted(m for m, deps in _graph().items() if m.startswith("agentrl") for n in deps
                     if n.startswith("harness"))
    assert not library, f"the library never imports the harness: {library}"


#: Folders of docs/results/data that hold no experiment (each says whose they are).
NOT_EXPERIMENTS = {"edge_mix": "benchmarks/edge_mix.py's sample and rows (docs/sampler.md), a measurement",
                   "soak": "benchmarks/soak.py's raw output (docs/results.md, Full-size runs), a measurement"}


def test_every_experiment_is_one_record_and_every_committed_data_folder_is_one_experiment():
    """Issue 58 step 1: one record type (:class:`harness.record.Record`) for every experiment, found by the name
    of its folder of committed data, and no committed folder that no record declares. The declarations are that
    type themselves: no other dataclass in the declaring modules (a transfer *set* is a set, not an experiment)."""
    import dataclasses
    import subprocess

    from harness import experiments, transfer
    from harness.experiments import RECORDS
    from harness.record import Record

    assert RECORDS and all(type(r) is Record and r.name == name for name, r in RECORDS.items())
    instances = {type(v).__name__ for module in (experiments, transfer) for v in vars(module).values()
                 if dataclasses.is_dataclass(v) and not isinstance(v, type)}
    assert instances <= {"Record", "Comparison", "TransferSet"}, instances
    classes = {n for module in (experiments, transfer) for n, v in vars(module).items()
               if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == module.__name__}
    assert classes <= {"TransferSet"}, f"a second declaration type beside harness.record.Record: {classes}"
    listed = subprocess.run(["git", "ls-files", "docs/results/data"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    folders = {path.split("/")[3] for path in listed if path.count("/") > 3} - set(NOT_EXPERIMENTS)
    assert folders, "git ls-files found no committed data"
    undeclared = sorted(folders - set(RECORDS))
    assert not undeclared, f"committed data no record declares (benchmarks/harness/experiments.py): {undeclared}"


#: The modules of the harness that train or evaluate (construct a ``Trainer``, call ``evaluate``): each kind's pieces'
#: work, run by the one piece runner, and the SFT control's training (a learning piece's).
PIECE_WORK = {"harness.axes_exec", "harness.learning_exec", "harness.compare_exec", "harness.transfer_exec",
              "harness.controls"}
#: The callers of the one piece runner (``schedule``): each kind's command or pieces.
SCHEDULERS = {"harness.axes_cli", "harness.learning_exec", "harness.compare_exec", "harness.transfer_exec"}


def test_one_piece_runner_runs_every_learning_experiment():
    """Issue 58 step 1: one runner module for pieces. ``harness.axes_run`` defines the one loop over pieces
    (``schedule``: skipped when finished, a budget); the modules that train or evaluate are the kinds' pieces
    (:data:`PIECE_WORK`), each run by a caller of ``schedule``; the learning runs', the comparison's and the
    transfer's own runners are gone. A module that trains or evaluates outside these is a second runner: it fails."""
    modules = {m: p for m, p in _modules().items() if m.startswith("harness.")}
    trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in modules.items()}
    loops = sorted(m for m, tree in trees.items() for node in ast.walk(tree)
                   if isinstance(node, ast.FunctionDef) and node.name == "schedule")
    assert loops == ["harness.axes_run"], f"one piece runner: schedule is defined in {loops}"

    def calls(tree: ast.AST) -> set[str]:
        return {getattr(n.func, "id", getattr(n.func, "attr", "")) for n in ast.walk(tree) if isinstance(n, ast.Call)}

    work = {m for m, tree in trees.items() if calls(tree) & {"Trainer", "evaluate"}}
    assert work <= PIECE_WORK, f"training or evaluating outside the pieces (a second runner): {work - PIECE_WORK}"
    assert {"harness.axes_exec", "harness.learning_exec", "harness.compare_exec", "harness.transfer_exec"} <= work
    runners = {m for m, tree in trees.items() if "schedule" in calls(tree)}
    assert runners == SCHEDULERS, f"the one piece runner's callers are each kind's: {runners ^ SCHEDULERS}"
    gone = {"harness.learning_run", "harness.compare_run", "harness.transfer_run"}
    assert not gone & set(modules), f"the old runners are back: {gone & set(modules)}"


#: The one data layout (issue 58): ``<experiment>/<arm>-s<seed>/<set>.jsonl`` beside its meta. An experiment's
#: folder holds its meta and inputs, then one folder per (arm, seed) (the shared cold start: ``cold_start``) with
#: per-task records (``<set>[-<mode>][.at-<fraction>|.redo<k>].jsonl``), their ``.meta.json``, a trained arm's
#: ``meta.json`` and ``metrics.jsonl``, and a learning row's ``calls.jsonl``.
LAYOUT_TOP = {"learning.json", "compare.json", "setup.json", "train_sample.jsonl"}
LAYOUT_CELL = re.compile(r"(cold_start|[A-Za-z0-9_.+-]+-s\d+)")
LAYOUT_FILE = re.compile(r"(meta\.json|metrics\.jsonl|calls\.jsonl|[A-Za-z0-9_+-]+(\.at-[0-9.]+|\.redo\d+)?"
                         r"(\.jsonl|\.meta\.json))")


def test_committed_experiment_data_has_one_layout():
    import subprocess

    listed = subprocess.run(["git", "ls-files", "docs/results/data"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    parts = [p.split("/")[3:] for p in listed if p.split("/")[3] not in NOT_EXPERIMENTS]
    assert parts, "git ls-files found no committed experiment data"
    off = [p for p in parts if not ((len(p) == 2 and p[1] in LAYOUT_TOP)
                                    or (len(p) == 3 and LAYOUT_CELL.fullmatch(p[1]) and LAYOUT_FILE.fullmatch(p[2])))]
    assert not off, f"committed data outside <experiment>/<arm>-s<seed>/<set>.jsonl: {['/'.join(p) for p in off[:5]]}"


#: The names the harness gives paths of committed data (docs/results/data): the data folder and a record's files.
_DATA_NAMES = {"data", "DATA", "TRANSFER_DATA", "rec_path", "meta_path", "records"}
_WRITES = {"write_text", "write_bytes", "unlink", "rmtree", "copyfile", "copy", "copy2", "move", "rename", "replace"}


def test_only_harness_export_writes_committed_data():
    """Issue 58: one writer of committed data. No harness module but ``harness.export`` writes, moves or removes a
    path named as committed data (:data:`_DATA_NAMES`: ``data / ...``, ``rec_path``, ...); a ``str.replace`` on a
    path's ``.name`` is no write. The runners' end-to-end tests check the same at run time under the
    ``only_export_writes`` fixture (tests/benchmarks/conftest.py), whatever the paths are called."""
    found = []
    for path in sorted((ROOT / "benchmarks" / "harness").glob("*.py")):
        if path.name == "export.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = getattr(f, "attr", getattr(f, "id", ""))
            if name not in _WRITES or (name == "replace" and isinstance(f, ast.Attribute)
                                       and isinstance(f.value, ast.Attribute) and f.value.attr == "name"):
                continue
            targets = [f.value] if isinstance(f, ast.Attribute) and name not in ("rmtree", "copyfile", "copy",
                                                                                  "copy2", "move") else []
            targets += node.args[-1:] if name in ("copyfile", "copy", "copy2", "move") else []
            targets += node.args[:1] if name == "rmtree" else []
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if names & _DATA_NAMES:
                found.append(f"{path.name}:{node.lineno}: {name} on {', '.join(sorted(names & _DATA_NAMES))}")
    assert not found, f"committed data is written through harness.export only: {found}"


#: The one place that changes ``sys.path``: ``agentrl`` puts the working directory first, as ``python -m``
#: does, so that ``module:Class`` references to the user's own files import (algos/cli.py).
SYS_PATH_ALLOWED = {"algos/cli.py", "envs/humaneval/_grader.py"}  # the grader removes paths the answer may write


def test_no_sys_path_surgery_in_the_sources_or_the_benchmarks():
    """Nothing in envs/, algos/ or benchmarks/ inserts into ``sys.path`` to find the project's own modules:
    the harness is a package that scripts import as ``harness`` (``benchmarks/`` is their ``sys.path[0]``)."""
    found = []
    for top in ("envs", "algos", "benchmarks"):
        for f in sorted((ROOT / top).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel in SYS_PATH_ALLOWED:
                continue
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                target = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    target = node.func.value  # sys.path.insert(...), .append(...)
                elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                    target = node.targets[0].value  # sys.path[:0] = ...
                if target is not None and ast.unparse(target) == "sys.path":
                    found.append(f"{rel}:{node.lineno}")
    assert not found, found


def _defined_names(path: Path) -> set[str]:
    """Names a module defines itself (functions, classes, assignments), not the ones it imports."""
    names = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.Try) or (isinstance(node, ast.If)
                                               and "TYPE_CHECKING" not in ast.unparse(node.test)):
                visit(node.body + node.orelse + [x for h in getattr(node, "handlers", []) for x in h.body])

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return names


def _import_statements():
    """``(file, module, name)`` for every ``from agentrl... import name`` (and ``from harness... import
    name``) in the sources, tests, benchmarks and docs (Python files, and code in the markdown pages)."""
    for top in ("algos", "envs", "tests", "benchmarks", "docs"):
        for f in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(
                        ("agentrl", "harness")):
                    yield from ((f, node.module, a.name) for a in node.names)
    for f in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        for m in re.finditer(r"from (agentrl[\w.]*) import (\([\w,\s]+\)|[\w, ]+)", f.read_text(encoding="utf-8")):
            names = [n.split(" as ")[0].strip() for n in m.group(2).strip("()").split(",")]
            yield from ((f, m.group(1), n) for n in names if n)


def test_every_name_has_one_import_path():
    """A name is imported from the module that defines it, or from a package's public API (``agentrl.envs``,
    ``agentrl.algos``: their ``__all__``). No other module re-exports anything."""
    import agentrl.algos
    import agentrl.envs

    modules = _modules()
    defined = {m: _defined_names(p) for m, p in modules.items()}
    public = {"agentrl.envs": set(agentrl.envs.__all__), "agentrl.algos": set(agentrl.algos.__all__)}
    wrong = sorted({f"{f.relative_to(ROOT)}: from {module} import {name}" for f, module, name in _import_statements()
                    if module not in modules or not (name in defined[module] or f"{module}.{name}" in modules
                                                     or name in public.get(module, ()))})
    assert not wrong, "import each name from the module that defines it:\n" + "\n".join(wrong)
    for module, path in modules.items():
        declared = [e.value for node in ast.parse(path.read_text(encoding="utf-8")).body
                    if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
                    for e in node.value.elts]
        extra = set(declared) - defined[module] - public.get(module, set())
        assert not extra, f"{module}.__all__ lists names it does not define: {sorted(extra)}"


def test_no_private_name_is_imported_from_outside_its_package():
    """A ``_name`` stays inside its package: sources and benchmarks import private names (``_cascade``,
    ``_take_uid``) only from modules of their own package (the tests may reach into private helpers; nothing
    else may lean on them)."""
    modules = {path: name for name, path in _modules().items()}
    wrong = []
    for f, module, name in _import_statements():
        if not name.startswith("_") or f.relative_to(ROOT).parts[0] not in ("algos", "envs", "benchmarks"):
            continue
        importer = modules.get(f, "").rpartition(".")[0] if f.name != "__init__.py" else modules.get(f, "")
        source = module if f"{module}.{name}" in _modules() else module.rpartition(".")[0]
        if importer != source:
            wrong.append(f"{f.relative_to(ROOT)}: from {module} import {name}")
    assert not wrong, "make the name public (a docstring, no underscore) or keep it in its package:\n" + \
        "\n".join(sorted(set(wrong)))


def test_envs_never_import_algos():
    for name, path in _modules().items():
        if name.startswith("agentrl.envs"):
            assert "agentrl.algos" not in path.read_text(encoding="utf-8"), name


#: The benchmark adapters (envs/<folder>/): thin layers over a benchmark's package, under the one step loop.
BENCHMARK_ADAPTERS = ("bfcl", "tau_bench", "humaneval")
#: What builds a tool list: kept on an adapter beside its episode's tools, it would be a second one.
_TOOL_LIST_MAKERS = {"function_schema", "ToolSet", "from_schemas", "Tool", "task_tools"}


def adapter_violations(path: Path) -> list[str]:
    """Where the adapter module ``path`` has a step loop of its own (a ``step``/``_step`` method) or a second tool
    list: a tool list kept in an attribute beside ``tools`` (the env's) and ``episode_tools`` (this episode's),
    e.g. ``self.functions = [function_schema(d) ...]``, or a ``"tools"`` key of its ``extra_info`` (``info["tools"]``
    is the episode's tools)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("step", "_step"):
            out.append(f"{path.name}:{node.lineno}: defines {node.name}() (change an episode through the step "
                       "loop's hooks: grade_reply, user_turn, run_calls, episode_over)")
        if isinstance(node, ast.FunctionDef) and node.name == "extra_info":
            out += [f"{path.name}:{d.lineno}: extra_info sets 'tools' (info['tools'] is episode_tools' schemas)"
                    for d in ast.walk(node) if isinstance(d, ast.Dict)
                    and any(isinstance(k, ast.Constant) and k.value == "tools" for k in d.keys)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            attrs = [t.attr for target in targets for t in ast.walk(target) if isinstance(t, ast.Attribute)
                     and isinstance(t.value, ast.Name) and t.value.id == "self"
                     and t.attr not in ("tools", "episode_tools")]
            makers = {getattr(c.func, "attr", getattr(c.func, "id", "")) for c in ast.walk(node.value)
                      if isinstance(c, ast.Call)} & _TOOL_LIST_MAKERS
            out += [f"{path.name}:{node.lineno}: self.{a} holds a second tool list ({', '.join(sorted(makers))}); "
                    "offer tools through episode_tools" for a in attrs if makers or a == "functions"]
    return out


def test_benchmark_adapters_have_no_step_loop_and_one_tool_list():
    """Each benchmark adapter (BFCL, τ², HumanEval) is one folder under envs/ that changes an episode only through
    TextEnv's hooks (its call runner, user turns, its grade) and offers its tools through the episode's ToolSet
    alone (envs/step_loop.py runs every env)."""
    wrong = [f"envs/{package}/{v}" for package in BENCHMARK_ADAPTERS
             for f in sorted((ROOT / "envs" / package).rglob("*.py")) for v in adapter_violations(f)]
    assert not wrong, "\n".join(wrong)


def test_the_adapter_check_finds_a_step_loop_and_a_second_tool_list(tmp_path):
    """What τ² and BFCL multi-turn had before issue 58 step 3: their own ``_step``; ``self.functions`` put into
    ``info["tools"]``."""
    (tmp_path / "adapter.py").write_text(
        "class Env:\n    def _step(self, action):\n        pass\n\n    def on_reset(self, task):\n"
        "        self.functions = [function_schema(d) for d in task['tools']]\n\n    def extra_info(self):\n"
        "        return {'tools': self.functions}\n", encoding="utf-8")
    found = adapter_violations(tmp_path / "adapter.py")
    assert [v.split(":")[1] for v in found] == ["2", "9", "6"], found


def test_no_source_file_is_over_500_lines():
    files = [*_modules().values(), *(ROOT / "benchmarks").glob("*.py")]  # the harness and every script
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, f"split these files: {long}"


def test_pyproject_installs_every_package():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    present = {m for m, p in _modules().items() if p.name == "__init__.py" and m.startswith("agentrl")}
    assert present <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(present - listed)}"


def test_relative_links_in_readme_and_docs_point_at_files():
    broken = []
    for f in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", f.read_text(encoding="utf-8")):
            target = m.group(1)
            # a results figure is drawn from docs/results/data when the site is built, none is committed
            # (docs/_mkdocs/figures.py; tests/docs/test_figures.py checks that the data draws each one linked)
            drawn = target.endswith(".png") and ROOT / "docs" / "results" in (f.parent / target).resolve().parents
            if ("://" not in target and not target.startswith("mailto:") and not (f.parent / target).exists()
                    and not drawn):
                broken.append(f"{f.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_doc_test_paths_exist():
    """Every `tests/....py` (and `tests/....py::name`) that README.md or docs/ names exists (the archive of old
    figures, docs/results/archive/, is in the history only since issue 58: not checked)."""
    archive = ROOT / "docs" / "results" / "archive"
    broken = []
    for f in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        if archive in f.parents:
            continue
        for m in re.finditer(r"(?<![\w/.-])(tests/[\w./-]+?\.py)(?:::(\w+))?", f.read_text(encoding="utf-8")):
            path, name = ROOT / m.group(1), m.group(2)
            if not path.is_file():
                broken.append(f"{f.relative_to(ROOT)} -> {m.group(0)} (no such file)")
            elif name and not re.search(rf"^\s*(?:async\s+)?def {name}\b", path.read_text(encoding="utf-8"), re.M):
                broken.append(f"{f.relative_to(ROOT)} -> {m.group(0)} (no def {name} in {m.group(1)})")
    assert not broken, "point these at the test files that exist now:\n" + "\n".join(broken)
