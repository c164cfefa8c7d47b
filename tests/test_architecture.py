"""The layout's promises: a new algorithm is one file plus one registry line, documented imports keep working,
old module paths are the moved modules, no import cycles, no oversized files, every package is installed."""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny_train_config, tiny_train_model

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"agentrl.envs": ROOT / "envs", "agentrl.algos": ROOT / "algos"}


# ---------------------------------------------------------------------------------------------- a new algorithm

TOY_SOURCE = '''
"""REINFORCE with a group-mean baseline: the whole algorithm a third party writes."""
from dataclasses import dataclass

from agentrl.algos.objectives import Algorithm
from agentrl.algos.objectives.batching import policy_gradient_items
from agentrl.algos.objectives.grpo import group_advantages


@dataclass
class ToyConfig:
    """Toy hyper-parameters."""

    scale: float = 1.0
    """Multiplies the loss."""


class Toy(Algorithm):
    config_class = ToyConfig
    min_group_size = 2

    def prepare(self, trajectories):
        adv = group_advantages([t.reward for t in trajectories], [t.group_id for t in trajectories], False)
        items, stats = policy_gradient_items(trajectories, adv)
        return [[it] for it in items], stats

    def loss(self, logprobs, ref_logprobs, batch):
        per_token = -logprobs * batch["advantages"][:, None] * batch["weights"]
        return self.config.scale * per_token.sum(), {"loss_tokens": int((batch["weights"] > 0).sum())}
'''


@pytest.fixture
def toy_algorithm(tmp_path, monkeypatch):
    """``toy_algo.py`` written to a folder on sys.path and registered by its ``module:Class`` path."""
    from agentrl.algos import objectives

    (tmp_path / "toy_algo.py").write_text(TOY_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(objectives.ALGORITHMS, "toy", "toy_algo:Toy")  # the one registry line
    yield
    sys.modules.pop("toy_algo", None)


def test_a_new_algorithm_is_one_file_and_one_registry_line(toy_algorithm, tokenizer, tmp_path):
    from agentrl.algos import Trainer, cli

    trainer = Trainer(tiny_train_config(tmp_path, algo="toy"), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    [m] = trainer.train()
    assert trainer.step == 1 and m["train/optimizer_steps"] == 1 and m["train/loss_tokens"] > 0
    assert type(trainer.algo).__name__ == "Toy" and trainer.algo.config.scale == 1.0
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if p.requires_grad)

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert re.search(r"\{grpo,ppo,dpo,sft,toy\}", out.getvalue()), out.getvalue()
    assert "## `ToyConfig`" in cli.config_docs() and "`toy.scale`" in cli.config_docs()


def test_an_unknown_algorithm_names_the_registered_ones(tmp_path):
    from agentrl.algos import TrainConfig

    with pytest.raises(ValueError, match=r"algo must be one of \('grpo', 'ppo', 'dpo', 'sft'"):
        TrainConfig(algo="reinforce", out=str(tmp_path)).validate()


def test_every_builtin_algorithm_declares_the_contract():
    from agentrl.algos.objectives import ALGORITHMS, Algorithm, algorithm_class
    from agentrl.algos.training.config import TrainConfig

    for name in ALGORITHMS:
        cls = algorithm_class(name)
        assert issubclass(cls, Algorithm), name
        assert isinstance(getattr(TrainConfig(), name), cls.config_class), name  # its config section


# ---------------------------------------------------------------------------------------------- import paths


def _documented_imports() -> list[str]:
    """Every ``from agentrl... import ...`` / ``import agentrl...`` statement in README.md and docs/ (in code
    blocks and in inline code)."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "docs").rglob("*.py")]
    found = set()
    for f in files:
        text = f.read_text(encoding="utf-8")
        for m in re.finditer(r"(?:^\s*|`)(from agentrl[\w.]* import (?:\([\w,\s]+\)|[\w, ]+)|import agentrl[\w.]*)", text, re.M):
            found.add(" ".join(m.group(1).replace("(", "").replace(")", "").split()).rstrip(","))
    return sorted(found)


@pytest.mark.parametrize("statement", _documented_imports())
def test_documented_import_works(statement):
    exec(statement, {})


def test_old_module_paths_are_the_moved_modules():
    from agentrl.algos._moved import MOVED

    for old, new in MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old


def test_public_api_names_resolve_and_old_module_imports_do_not_hide_them():
    import agentrl.algos as algos
    import agentrl.algos.evaluate  # noqa: F401  (an old module path named like the public function)

    for name in algos.__all__:
        assert getattr(algos, name) is not None, name
    assert callable(algos.evaluate) and algos.evaluate.__module__ == "agentrl.algos.evaluation.evaluate"


# ---------------------------------------------------------------------------------------------- layout rules


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in PACKAGES.items():
        for f in folder.rglob("*.py"):
            rel = f.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
    return mods


def _module_level_imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Modules that ``name`` imports at import time (not inside functions, under TYPE_CHECKING or in the
    ``if __name__ == "__main__"`` block of a script)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()

    def visit(body):
        for node in body:
            if isinstance(node, ast.If) and ("TYPE_CHECKING" in ast.unparse(node.test)
                                             or "__main__" in ast.unparse(node.test)):
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body + getattr(node, "orelse", []) + [h for x in getattr(node, "handlers", []) for h in x.body])
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                for a in node.names:
                    target = f"{base}.{a.name}"
                    if target in modules:
                        out.add(target)
                    elif base in modules:
                        out.add(base)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    out.discard(name)
    return out


def test_no_import_cycles():
    modules = _modules()
    graph = {m: _module_level_imports(p, m, modules) for m, p in modules.items()}
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


def test_envs_never_import_algos():
    for name, path in _modules().items():
        if name.startswith("agentrl.envs"):
            assert "agentrl.algos" not in path.read_text(encoding="utf-8"), name


def test_no_source_file_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, f"split these files: {long}"


def test_pyproject_installs_every_package():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    present = {m for m, p in _modules().items() if p.name == "__init__.py"}
    assert present <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(present - listed)}"


def test_relative_links_in_readme_and_docs_point_at_files():
    broken = []
    for f in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", f.read_text(encoding="utf-8")):
            target = m.group(1)
            if "://" not in target and not target.startswith("mailto:") and not (f.parent / target).exists():
                broken.append(f"{f.relative_to(ROOT)} -> {target}")
    assert not broken, broken
