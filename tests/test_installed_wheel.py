"""The package as a user gets it: the wheel of this checkout (not the editable install) in a fresh virtualenv.

Evaluated from there on a fixed held-out set's tasks (those the ledger knows by content), ``evaluate()`` writes
its episodes into the folder it is given and nothing anywhere else: not into the checkout's ledger, not into the
installed package, not into the working directory (issue 43: the library finds no checkout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
from pathlib import Path

import agentrl.algos as algos
from agentrl.algos import HFPolicy, evaluate, load_tokenizer
from agentrl.algos.models import tiny_model

tasks = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()[:2]]
tokenizer = load_tokenizer()
policy = HFPolicy(tiny_model(tokenizer, hidden_size=32, end_scale=8.0), tokenizer)
report = evaluate("AgentRL/ToolUse-v0", policy, tasks, n=1, out=Path(sys.argv[2]) / "episodes.jsonl",
                  progress=False)
print(json.dumps({"algos": algos.__file__, "samples": report.num_samples, "settings": sorted(report.settings)}))
"""


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` -> (size, mtime in ns); bytecode caches, .git and the checkout's own
    virtualenvs (.venv-vllm, .venv-verifiers: the engine tests' interpreters) aside."""
    out = {}
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".pytest_cache", ".git") and not d.startswith(".venv")]
        for name in files:
            stat = os.stat(os.path.join(top, name))
            out[os.path.relpath(os.path.join(top, name), folder)] = (stat.st_size, stat.st_mtime_ns)
    return out


def test_the_installed_wheel_evaluates_and_writes_only_into_the_folder_it_is_given(tmp_path):
    wheels, venv, work, given = (tmp_path / name for name in ("wheels", "venv", "work", "given"))
    work.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(ROOT)], check=True, timeout=300)
    [wheel] = wheels.glob("agentrl_gym-*.whl")
    # torch, transformers and the model package come from this interpreter's site-packages; agentrl from the wheel
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   timeout=300)
    fixed_set = ROOT / "benchmarks" / "heldout" / "tooluse_v3.jsonl"
    checkout_before, venv_before = _snapshot(ROOT), _snapshot(venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AGENTRL_VLLM_PYTHON")}
    done = subprocess.run([str(python), "-c", SCRIPT, str(fixed_set), str(given)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["algos"]).is_relative_to(venv), f"imported {result['algos']}, not the wheel in {venv}"
    assert result["samples"] == 2 and "ledger" not in result["settings"]
    assert sorted(p.name for p in given.iterdir()) == ["episodes.jsonl", "episodes.summary.json"]
    assert _snapshot(work) == {}, "the working directory got files"
    assert _snapshot(venv) == venv_before, "the installed package (or its venv) got files"
    changed = sorted(k for k, v in _snapshot(ROOT).items() if checkout_before.get(k) != v)
    assert not changed, f"the checkout got files: {changed[:10]}"
