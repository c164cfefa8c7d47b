"""What the package's metadata promises is what CI tests: the `[train]` extra bounds torch and the other heavy
dependencies to ranges that hold the versions this interpreter (CI's venv, made by the README's test command) runs,
and no wider than the torch CI pins; CONTRIBUTING.md's "Tested versions" table says the same ranges.

The built wheel's own metadata is checked by tests/test_installed_wheel.py (slow: it builds the wheel)."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest
from helpers import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

#: The `[train]` dependencies with an upper bound: a release past it has not run in CI.
HEAVY = ("torch", "transformers", "peft", "accelerate")


def _train() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {(r := Requirement(line)).name: r for line in project["optional-dependencies"]["train"]}


def ci_torch() -> str:
    """The torch release the README's test command (and so `.ci/run`) installs."""
    found = set(re.findall(r"pip install torch==([\w.]+) --index-url", (ROOT / ".ci" / "run").read_text()))
    assert len(found) == 1, found
    return found.pop()


def test_the_train_extra_bounds_the_heavy_dependencies_around_what_ci_runs():
    train = _train()
    for name in HEAVY:
        spec = train[name].specifier
        assert any(s.operator in ("<", "<=", "==", "~=") for s in spec), f"{name}: no upper bound in {spec}"
        assert spec.contains(Version(version(name)).public, prereleases=True), (
            f"this venv runs {name} {version(name)}, outside pyproject.toml's {name}{spec}: test the new release, "
            "then move the bound (and CONTRIBUTING.md's table)")
    torch = Version(ci_torch())
    spec = train["torch"].specifier
    assert spec.contains(torch)
    assert not spec.contains(Version(f"{torch.major}.{torch.minor + 1}.0")), "a newer torch than CI's is accepted"
    assert not spec.contains(Version(f"{torch.major}.{torch.minor - 1}.0")), "an older torch than CI's is accepted"


def test_contributing_states_the_ranges_pyproject_declares():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    table = text.split("## Tested versions", 1)[1]
    train = _train()
    for name in HEAVY:
        row = re.search(rf"^\| {name} \|[^|]*\| `([^`]*)` \|", table, re.M)
        assert row, f"CONTRIBUTING.md's Tested versions table has no row for {name}"
        assert SpecifierSet(row.group(1)) == train[name].specifier, (name, row.group(1), str(train[name].specifier))
    assert f"| {ci_torch()}, the CPU build |" in table
