"""The machine a run is measured on: CPU, RAM, versions, load and commit, as the run found them at its
start."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

from agentrl.algos.evaluation.ledger import git_state
from harness.layout import ROOT


@functools.cache
def cpu_info() -> tuple[str, frozenset[str]]:
    """The CPU's model name and its feature flags (from ``/proc/cpuinfo``; the platform's name and no flags
    elsewhere)."""
    cpu, flags = platform.processor() or "unknown", frozenset[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("unknown", "", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return cpu, flags


@functools.cache
def machine() -> list[str]:
    """Lines describing this machine and the library versions, as they were the first time this process asked:
    a runner asks at its start, so the load average is the one its run started under and the commit is the one
    it started from (``ledger.git_state``), not one made while it ran."""
    cpu, flags = cpu_info()
    ram = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    bf16 = ", ".join(sorted({"amx_bf16", "avx512_bf16"} & flags)) or "none"
    versions = []
    for mod in ("torch", "transformers", "peft", "trl", "gymnasium", "ray", "bm25s"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except Exception:  # noqa: BLE001 - not installed, or broken: say so
            versions.append(f"{mod} (not installed)")
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    state = git_state(ROOT)
    commit = (state["commit"] or "unknown")[:7] + (" (uncommitted changes)" if state["dirty"] else "")
    return [f"- CPU: {cpu}, {os.cpu_count()} cores visible, bf16 units: {bf16}",
            f"- RAM: {ram}",
            f"- Python {platform.python_version()} on {platform.system()} {platform.release()}",
            f"- {', '.join(versions)}",
            f"- load average (1, 5, 15 min) when the run started: {load} — figures measured on a machine shared "
            f"with other work are slower and noisier than on an idle one",
            f"- git commit {commit}"]
