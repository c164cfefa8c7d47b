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
