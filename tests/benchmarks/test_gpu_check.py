"""``benchmarks/gpu_check.py`` in CI size on the CPU: GRPO steps that train, a resume, the table (no network)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def test_gpu_check_runs_on_cpu_in_ci_size_from_a_tokenizer_folder(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "tok")  # what --save-tokenizer writes
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--steps", "2", "--hidden", "32", "--layers", "1",
         "--tasks-per-step", "2", "--group-size", "4", "--max-new-tokens", "8", "--tokenizer-dir",
         str(tmp_path / "tok"), "--out", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| cpu |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "bf16" and cells[-1] == "ok"
    assert float(cells[2]) > 0 and float(cells[3]) > 0  # rollout and training tokens/s: the steps trained
    metrics = (tmp_path / "runs" / "device" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 3  # two steps, then one more after the resume


def test_gpu_memory_measures_one_update_per_shape_and_budget_on_cpu(tokenizer, tmp_path):
    """``benchmarks/gpu_memory.py`` in CI size: one real update per token budget, with the planner's estimate."""
    tokenizer.save_pretrained(tmp_path / "tok")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_memory.py"), "--device", "cpu", "--dtype", "fp32",
         "--shapes", "tiny", "--tokens", "512,1024", "--row-tokens", "256", "--tokenizer-dir", str(tmp_path / "tok")],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in proc.stdout.splitlines()
            if line.startswith("| tiny |")]
    assert [r[2] for r in rows] == ["512", "1024"] and all(r[-1] == "ok" for r in rows)
    for r in rows:
        assert float(r[4]) > 0 and float(r[6]) > 0 and float(r[7]) > 0  # peak, planned activations, update time
    # twice the tokens, twice the planned activations
    assert float(rows[1][6]) > float(rows[0][6])


def test_gpu_memory_refuses_an_unknown_shape_in_one_line():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_memory.py"), "--shapes", "13b"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--shapes: unknown ['13b']; choose from ['1b', '7b', 'tiny']" in proc.stderr
