"""The benchmark suite behind ``benchmarks/run_all.py``: run every benchmark script and write
``docs/results.md`` (the machine, each benchmark's table and command; the learning section embedded from
``docs/results/learning.md``, :mod:`harness.results_page`)."""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import time
from pathlib import Path

from agentrl.algos.evaluation.ledger import git_state
from harness.layout import ROOT, SCRIPTS, shown
from harness.machine import machine
from harness.results_page import LEARNING_HEADING, LEARNING_PAGE, learning_sections, refresh_learning, tables
from harness.speed import (
    HISTORY,
    TRACKED,
    append_history,
    history_table,
    measure,
    plot_history,
    read_history,
    this_machine,
    verdict,
)

#: Benchmarks in the order they appear in the results, with what each measures.
BENCHMARKS: dict[str, str] = {
    "env_throughput": "Env steps/s of ToolUse-v0 driven by its oracle (no model), raw and through gymnasium.make.",
    "sandbox_latency": "Code sandbox (bubblewrap, warm workers) latency vs a plain subprocess; throughput.",
    "search_latency": "Offline BM25 search latency vs a plain-Python BM25.",
    "rollout_throughput": "Rollout tokens/s: the collector vs itself without shared-prefix attention or KV-cache "
                          "reuse, transformers' continuous batching, and naive per-trajectory generate.",
    "train_vs_trl": "GRPO step time and training tokens/s vs TRL's GRPOTrainer (same model, LoRA, batch).",
    "memory": "Peak RSS of one GRPO step at 16 x 512 tokens: full logits, chunked logprobs, activation "
              "checkpointing, and the default auto micro-batches with glibc's mmap threshold.",
    "ray_env_overhead": "Ray env workers: remote step latency, and throughput with a CPU-bound tool.",
    "async_vs_sync": "Step time of the synchronous training loop vs the asynchronous one.",
    "load_time": "Load time of the default model in a fresh process: de-quantized weights read from the cache vs "
                 "de-quantizing the GGUF.",
    "merge_memory": "Peak extra memory of a sampler refresh: LoRA merged layer by layer vs the whole-dict merge; "
                    "decode speed of a shared-weights sampler vs a merged copy.",
    "vllm_cpu_binding": "vLLM CPU build on a small machine: sampled tokens/s with vLLM's own thread binding vs the "
                        "managed engine's (every CPU).",
    "kl_speed": "KL(adapter || base) on ToolUse-v0 episodes: the shared prompt prefix cached vs two full forwards "
                "per episode.",
    "step_profile": "One GRPO step of the main job's shape split into phases (decode, prefill, env, the update's "
                    "forward, recompute, backward, optimizer, LoRA refresh, other): seconds, share, FLOPs against "
                    "the measured matmul rate, and the largest gap.",
}

#: Arguments for ``--quick`` (CI-sized) runs.
QUICK_ARGS: dict[str, list[str]] = {
    "env_throughput": ["--episodes", "1000"],
    "sandbox_latency": ["--n", "10", "--compute-n", "2"],
    "search_latency": ["--queries", "500", "--baseline-queries", "20"],
    "rollout_throughput": ["--quick"],
    "train_vs_trl": ["--quick"],
    "memory": ["--quick"],
    "ray_env_overhead": ["--steps", "100", "--envs", "8"],
    "async_vs_sync": ["--quick"],
    "merge_memory": ["--quick"],
    "load_time": ["--repeats", "1"],
    "vllm_cpu_binding": ["--requests", "8", "--tokens", "32", "--repeats", "1"],
    "kl_speed": ["--episodes", "8"],
    "step_profile": ["--tiny", "--tasks", "2", "--group-size", "2", "--max-new-tokens", "16"],
    "soak": ["--minutes", "0.25", "--clients", "4"],
    "import_time": ["--repeats", "1"],
}

#: Arguments for ``--full`` runs (the sizes the issues' targets name).
FULL_ARGS: dict[str, list[str]] = {
    "rollout_throughput": ["--sizes", "16,64", "--naive-max", "16"],
    "memory": [],
    "step_profile": [],  # the main job's GRPO shape: 8 tasks x 8 samples, 96 tokens, 4 turns (minutes on 2 cores)
}

#: Scripts that are not benchmarks to run here.
NOT_RUN = {"run_all", "learning", "learning_page", "compare_algorithms", "heldout", "coldstart_probe",
           "gpu_check", "edge_mix", "experiment", "axes", "transfer"}  # long learning runs and measurements and
# their tools (edge_mix trains a cold start and rolls out hundreds of episodes); gpu_check: run it on a GPU machine

_NOISE = re.compile(r"(it/s\]|s/it\]|Converting and de-quantizing|Loading weights|^\s*$)")


def clean(output: str) -> str:
    """Drop progress-bar and loader noise (carriage-return updates, weight-loading bars) from captured
    output."""
    lines = []
    for raw in output.splitlines():
        line = raw.split("\r")[-1].rstrip()
        if not _NOISE.search(line):
            lines.append(line)
    return "\n".join(lines)


def run(name: str, args: list[str], timeout: float, checkout: Path = ROOT, python: str = sys.executable) -> dict:
    """Run ``benchmarks/<name>.py args`` of ``checkout`` with ``python``; its cleaned output, exit code, wall time."""
    cmd = [python, str(checkout / "benchmarks" / f"{name}.py"), *args]
    shown = " ".join(["python", f"benchmarks/{name}.py", *args])
    print(f"== {shown}" + (f" (in {checkout}, {python})" if checkout != ROOT else ""), flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, timeout=timeout)
        out, rc = proc.stdout + ("\n" + proc.stderr if proc.returncode else ""), proc.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = None
    wall = time.perf_counter() - t0
    text = clean(out)
    print(text[-3000:], flush=True)
    print(f"   exit {rc if rc is not None else 'timeout'} after {wall:.0f} s", flush=True)
    return {"name": name, "command": shown, "rc": rc, "wall": wall, "text": text}


FULL_HEADING = "## Full-size runs"
FULL_INTRO = ("Each run below was made with `python benchmarks/run_all.py --full NAME` (at its own date and commit, "
              "named with it) and is kept when the rest of this page is regenerated.")


def result_lines(r: dict, title: str, description: str, note: str = "") -> list[str]:
    """A benchmark's subsection: heading, what it measures, command and status, its tables, the output."""
    status = "ok" if r["rc"] == 0 else ("timed out" if r["rc"] is None else f"failed (exit {r['rc']})")
    lines = [f"### {title}", "", description, "", f"Command: `{r['command']}` — {status}, {r['wall']:.0f} s{note}.", ""]
    found = tables(r["text"])
    for t in found:
        lines += [t, ""]
    body = ["```text", r["text"].strip() or "(no output)", "```", ""]
    # Output with a markdown table: the table above, the full output folded; otherwise the output itself.
    lines += ["<details><summary>full output</summary>", "", *body, "</details>", ""] if found else body
    return lines


def split_sections(text: str, heading: str) -> tuple[str, str, str]:
    """(before, the ``heading`` section without its heading line, after) of a page; the section ends at the
    next ``## `` heading."""
    if heading not in text:
        return text, "", ""
    before, rest = text.split(heading, 1)
    m = re.search(r"^## ", rest, flags=re.M)
    return before, (rest[:m.start()] if m else rest), (rest[m.start():] if m else "")


def full_subsections(section: str) -> dict[str, str]:
    """The ``### `` subsections of the full-size section, by benchmark name (the heading's first word)."""
    parts = re.split(r"^(?=### )", section, flags=re.M)
    return {p.split()[1]: p.rstrip() for p in parts if p.startswith("### ")}


def full_section(subsections: dict[str, str]) -> list[str]:
    if not subsections:
        return []
    order = [n for n in BENCHMARKS if n in subsections] + sorted(set(subsections) - set(BENCHMARKS))
    lines = [FULL_HEADING, "", FULL_INTRO, ""]
    for name in order:
        lines += [subsections[name], ""]
    return lines


def write_full(out: Path, results: list[dict], header: list[str], started) -> int:
    """Put full-size runs into the "Full-size runs" section of ``out`` (created when missing)."""
    text = out.read_text(encoding="utf-8") if out.exists() else "# Benchmark results\n"
    before, section, after = split_sections(text, FULL_HEADING)
    subs = full_subsections(section)
    machine_line = header[0].removeprefix("- ")
    commit = header[-1].removeprefix("- git commit ")
    for r in results:
        note = f", on {started:%Y-%m-%d %H:%M %Z} at commit {commit}; {machine_line}"
        subs[r["name"]] = "\n".join(result_lines(r, f"{r['name']} (full size)", BENCHMARKS.get(r["name"], ""),
                                                 note)).rstrip()
    if LEARNING_HEADING in before:  # no full section yet: it goes before the learning section
        head, learning = before.split(LEARNING_HEADING, 1)
        before, after = head, LEARNING_HEADING + learning + after
    lines = [before.rstrip(), "", *full_section(subs), after.lstrip()]
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"written: the full-size section of {out}")
    return 0


SPEED_HEADING = "## Speed history"
SPEED_FIGURE = "results/speed_history.png"


def speed_section(out: Path, history: list[dict]) -> list[str]:
    """The page's speed-history section (and its figure beside the page): every tracked ratio per commit and
    machine kind, from the committed history."""
    lines = [SPEED_HEADING, "",
             f"Every tracked ratio (`harness/speed.py`) from `{shown(HISTORY)}`: the median of "
             "the repetitions ± half their range, per machine kind. Recorded with `python benchmarks/run_all.py "
             "--quick --track`; `--check` (what CI runs) compares a new run with these rows and warns when a ratio is "
             "worse than the recorded median by more than the spread.", ""]
    if not history:
        return lines + ["No recorded runs yet.", ""]
    figure = plot_history(history, out.parent / SPEED_FIGURE)
    if figure is not None:
        lines += [f"![speed history]({SPEED_FIGURE})", ""]
    return lines + history_table(history)


def write_speed(out: Path, history: list[dict]) -> None:
    """Replace (or add, before the learning section) the speed-history section of the page ``out``."""
    text = out.read_text(encoding="utf-8") if out.exists() else "# Benchmark results\n"
    before, _, after = split_sections(text, SPEED_HEADING)
    if not _ and LEARNING_HEADING in before:
        head, learning = before.split(LEARNING_HEADING, 1)
        before, after = head, LEARNING_HEADING + learning + after
    lines = [before.rstrip(), "", *speed_section(out, history), after.lstrip()]
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"written: the speed-history section of {out}")


def track(scripts: list[str], args: argparse.Namespace) -> int:
    """``--track`` / ``--check``: run each tracked script ``--repeat`` times, print every ratio beside the history;
    ``--track`` also appends to the history and rewrites the page's speed section. With ``--checkout DIR
    --python PY`` the scripts of another checkout (an older commit, its package installed for ``PY``) run and
    are recorded under that checkout's commit."""
    checkout = Path(args.checkout).resolve() if args.checkout else ROOT
    python = args.python or sys.executable
    state = git_state(checkout)
    commit = (state["commit"] or "unknown") + ("+dirty" if state["dirty"] else "")
    kind, mode = this_machine(), "quick" if args.quick else "full"
    history = read_history(HISTORY)
    rows = []
    for name in scripts:
        runs = [run(name, QUICK_ARGS.get(name, []) if args.quick else [], args.timeout or 3600, checkout, python)
                for _ in range(args.repeat)]
        rows += measure(name, [r["text"] for r in runs if r["rc"] == 0], commit=commit, machine=kind, mode=mode)
    print(f"\n== tracked ratios at {commit[:7]} on {kind} ({mode}, {args.repeat} reps each)")
    for row in rows:
        print(verdict(row, history), flush=True)
    if args.track:
        append_history(rows, HISTORY)
        write_speed(Path(args.out), history + rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``benchmarks/run_all.py``."""
    ap = argparse.ArgumentParser(description="Run every benchmark and write ``docs/results.md``: the machine, each "
                                             "benchmark's table and command, the date.")
    ap.add_argument("--quick", action="store_true", help="CI-sized runs (each script's quick arguments)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per script (default 3600; quick 1200)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file to write")
    ap.add_argument("--learning-only", action="store_true",
                    help="run nothing: rewrite only the 'Proof of learning' section of --out from "
                         "docs/results/learning.md (generated from committed data; after a learning run)")
    ap.add_argument("--full", nargs="+", metavar="NAME", choices=sorted(FULL_ARGS),
                    help="run these at full size and write only the page's 'Full-size runs' section")
    ap.add_argument("--track", action="store_true",
                    help="run only the tracked benchmarks (harness/speed.py) --repeat times each, append their ratios "
                         "to benchmarks/speed_history.jsonl and rewrite the page's speed-history section")
    ap.add_argument("--check", action="store_true",
                    help="like --track but write nothing: print each ratio beside the recorded history, with a "
                         "WARNING line where it is worse beyond the spread (what CI runs)")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions per tracked benchmark (default 3)")
    ap.add_argument("--checkout", metavar="DIR",
                    help="with --track/--check: run the benchmark scripts of this checkout (e.g. a `git worktree` of "
                         "an older commit) and record its commit")
    ap.add_argument("--python", metavar="PY",
                    help="with --checkout: the interpreter whose `agentrl` is that checkout (default: this one)")
    ap.add_argument("--history-only", action="store_true",
                    help="run nothing: rewrite only the speed-history section of --out from the committed history")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.history_only:
        write_speed(Path(args.out), read_history(HISTORY))
        return 0
    if args.learning_only:
        return refresh_learning(Path(args.out))
    if args.full:
        started = datetime.datetime.now().astimezone()
        header = machine()
        results = [run(s, FULL_ARGS[s], args.timeout or 3600) for s in args.full]
        return write_full(Path(args.out), results, header, started)
    scripts = list(BENCHMARKS) + sorted(p.stem for p in SCRIPTS.glob("*.py")
                                        if p.stem not in BENCHMARKS and p.stem not in NOT_RUN)
    if args.only:
        unknown = set(args.only) - set(scripts)
        if unknown:
            ap.error(f"unknown benchmarks {sorted(unknown)}; choose from {scripts}")
        scripts = [s for s in scripts if s in args.only]
    if args.track or args.check:
        return track([s for s in scripts if s in TRACKED], args)
    timeout = args.timeout or (1200 if args.quick else 3600)
    started = datetime.datetime.now().astimezone()
    header = machine()
    results = [run(s, QUICK_ARGS.get(s, []) if args.quick else [], timeout)
               for s in scripts if (SCRIPTS / f"{s}.py").is_file()]

    out = Path(args.out)
    lines = ["# Benchmark results", "",
             f"Generated by `python benchmarks/run_all.py{' --quick' if args.quick else ''}` on "
             f"{started:%Y-%m-%d %H:%M %Z}{' (CI-sized runs: fewer steps and repetitions)' if args.quick else ''}. "
             "Every figure is measured in the same run as its baseline; rerun the command to reproduce on your "
             "machine. Each script's docstring says exactly what it measures.", "",
             "## Machine", "", *header, "", "## Benchmarks", ""]
    for r in results:
        lines += result_lines(r, r["name"], BENCHMARKS.get(r["name"], ""))
    kept = split_sections(out.read_text(encoding="utf-8"), FULL_HEADING)[1] if out.exists() else ""
    lines += full_section(full_subsections(kept))
    lines += speed_section(out, read_history(HISTORY))
    learned = learning_sections(out.parent)
    lines += [LEARNING_HEADING, ""]
    lines += learned or [f"No {LEARNING_PAGE} yet: run `python benchmarks/experiment.py run NAME`, commit its data, "
                         "then `python benchmarks/learning.py --page` and this script again.", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"written: {out}")
    return 0


