"""Run every benchmark and write ``docs/results.md``: the machine, each benchmark's table and command, the date.

Each script runs as its own subprocess (``python benchmarks/<name>.py [args]``) with its output captured; a
script that fails or runs past ``--timeout`` is reported as such and the others still run. With ``--quick``
each script gets its CI-sized arguments (its own ``--quick`` flag where it has one, fewer repetitions where it
has not; see :data:`QUICK_ARGS`). The learning results are embedded from ``docs/results/learning.md`` only: the
page ``python benchmarks/learning.py --page`` generates from committed data (per-task outputs in
``docs/results/data/``, the ledger), so every learning figure on the results page can be re-derived from the
repository. Pages written straight from a run directory (``docs/results/learning_*.md``) and the archived ones
(``docs/results/archive/``) are never embedded. ``run_all`` does not run the learning jobs themselves (30+ minutes
each on 2 cores): run ``python benchmarks/learning.py`` first, commit its data, then ``--learning-only``.

    python benchmarks/run_all.py                    # full sizes (tens of minutes on 2 cores)
    python benchmarks/run_all.py --quick            # CI-sized
    python benchmarks/run_all.py --only memory train_vs_trl --out /tmp/results.md
    python benchmarks/run_all.py --full rollout_throughput memory   # full-size runs, kept beside --quick ones

``--full NAME...`` runs those scripts at their full sizes (:data:`FULL_ARGS`) and writes them into the page's
"Full-size runs" section, replacing earlier full-size runs of the same scripts and keeping the rest of the page;
a later ``--quick`` regeneration keeps that section as it is.

Never asserts; the exit status is 0 unless writing the results failed.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

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
}

#: Arguments for ``--full`` runs (the sizes the issues' targets name).
FULL_ARGS: dict[str, list[str]] = {
    "rollout_throughput": ["--sizes", "16,64", "--naive-max", "16"],
    "memory": [],
}

#: Scripts that are not benchmarks to run here.
NOT_RUN = {"run_all", "learning", "learning_page", "compare_algorithms", "heldout", "coldstart_probe",
           "gpu_check"}  # long learning runs and their tools; gpu_check: run it on a GPU machine

_NOISE = re.compile(r"(it/s\]|s/it\]|Converting and de-quantizing|Loading weights|^\s*$)")


@functools.cache
def machine() -> list[str]:
    """Lines describing this machine and the library versions, as they were the first time this process asked: a
    runner asks at its start, so the load average is the one its run started under and the commit is the one it
    started from (``ledger.git_state``), not one made while it ran."""
    cpu, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("unknown", "", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
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
    from agentrl.algos.evaluation.ledger import git_state

    state = git_state(ROOT)
    commit = (state["commit"] or "unknown")[:7] + (" (uncommitted changes)" if state["dirty"] else "")
    return [f"- CPU: {cpu}, {os.cpu_count()} cores visible, bf16 units: {bf16}",
            f"- RAM: {ram}",
            f"- Python {platform.python_version()} on {platform.system()} {platform.release()}",
            f"- {', '.join(versions)}",
            f"- load average (1, 5, 15 min) when the run started: {load} — figures measured on a machine shared "
            f"with other work are slower and noisier than on an idle one",
            f"- git commit {commit}"]


def clean(output: str) -> str:
    """Drop progress-bar and loader noise (carriage-return updates, weight-loading bars) from captured output."""
    lines = []
    for raw in output.splitlines():
        line = raw.split("\r")[-1].rstrip()
        if not _NOISE.search(line):
            lines.append(line)
    return "\n".join(lines)


def tables(text: str) -> list[str]:
    """The markdown tables (runs of lines starting with '|') in a script's output."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            if len(current) >= 2:
                found.append("\n".join(current))
            current = []
    return found


def run(name: str, args: list[str], timeout: float) -> dict:
    cmd = [sys.executable, str(HERE / f"{name}.py"), *args]
    shown = " ".join(["python", f"benchmarks/{name}.py", *args])
    print(f"== {shown}", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        out, rc = proc.stdout + ("\n" + proc.stderr if proc.returncode else ""), proc.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = None
    wall = time.perf_counter() - t0
    text = clean(out)
    print(text[-3000:], flush=True)
    print(f"   exit {rc if rc is not None else 'timeout'} after {wall:.0f} s", flush=True)
    return {"name": name, "command": shown, "rc": rc, "wall": wall, "text": text}


#: The learning page generated from committed data only (``benchmarks/learning_page.py``), relative to docs/.
LEARNING_PAGE = "results/learning.md"


def learning_sections(doc_dir: Path) -> list[str]:
    """The learning results to embed, from ``<doc_dir>/results/learning.md`` alone (the page generated from
    committed data): per experiment section (one with a ``Command:`` or ``Not run yet:`` line) its title, its
    first table (the scores), its comparison table (interval, verdict), its first such line and its ``Held-out``
    line (which set, and whether it is a committed fixed set). Empty without the page."""
    path = doc_dir / LEARNING_PAGE
    if not path.is_file():
        return []
    out = [f"From [{LEARNING_PAGE}]({LEARNING_PAGE}), generated by `python benchmarks/learning.py --page` from "
           "committed data only (per-task outputs in `docs/results/data/` and the ledger "
           "`benchmarks/heldout/ledger.jsonl`); the full page has the settings, the per-family tables, the held-out "
           "sets and every configuration judged on them."
           + (" Earlier learning pages, whose raw data was never committed, are kept in "
              "[results/archive/](results/archive/README.md): history, not results."
              if (doc_dir / "results" / "archive" / "README.md").is_file() else ""), ""]
    for section in re.split(r"^(?=## )", path.read_text(encoding="utf-8"), flags=re.M):
        if not section.startswith("## "):
            continue
        lines = section.splitlines()
        said = [ln for ln in lines if ln.startswith(("Command:", "Not run yet:"))][:1]  # the run's, not a repeat
        if not said:  # the held-out sets, the ledger, the pages without data: on the full page only
            continue
        found = tables(section)
        shown = found[:1] + [t for t in found[1:] if "95% interval" in t.splitlines()[0]]
        out += [f"### {lines[0][3:].strip()}", ""]
        for t in shown:
            out += [t, ""]
        out += [*said, *[ln for ln in lines if ln.startswith("Held-out")], ""]
    return out


LEARNING_HEADING = "## Proof of learning"
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
    """(before, the ``heading`` section without its heading line, after) of a page; the section ends at the next
    ``## `` heading."""
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


def refresh_learning(out: Path) -> int:
    """Replace the learning section of an existing results page (the benchmark sections are left as they are)."""
    if not out.exists():
        raise SystemExit(f"{out} does not exist: run `python benchmarks/run_all.py` first")
    text = out.read_text(encoding="utf-8")
    head = text.split(LEARNING_HEADING, 1)[0].rstrip()
    learned = learning_sections(out.parent)
    lines = [head, "", LEARNING_HEADING, "", *(learned or [f"No {LEARNING_PAGE} yet: run `python benchmarks/learning.py "
                                                          "--page`."])]
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"rewritten: the learning section of {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized runs (each script's quick arguments)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per script (default 3600; quick 1200)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file to write")
    ap.add_argument("--learning-only", action="store_true",
                    help="run nothing: rewrite only the 'Proof of learning' section of --out from "
                         "docs/results/learning.md (generated from committed data; after a learning run)")
    ap.add_argument("--full", nargs="+", metavar="NAME", choices=sorted(FULL_ARGS),
                    help="run these at full size and write only the page's 'Full-size runs' section")
    args = ap.parse_args(argv)
    if args.learning_only:
        return refresh_learning(Path(args.out))
    if args.full:
        started = datetime.datetime.now().astimezone()
        header = machine()
        results = [run(s, FULL_ARGS[s], args.timeout or 3600) for s in args.full]
        return write_full(Path(args.out), results, header, started)
    scripts = list(BENCHMARKS) + sorted(p.stem for p in HERE.glob("*.py")
                                        if p.stem not in BENCHMARKS and p.stem not in NOT_RUN)
    if args.only:
        unknown = set(args.only) - set(scripts)
        if unknown:
            ap.error(f"unknown benchmarks {sorted(unknown)}; choose from {scripts}")
        scripts = [s for s in scripts if s in args.only]
    timeout = args.timeout or (1200 if args.quick else 3600)
    started = datetime.datetime.now().astimezone()
    header = machine()
    results = [run(s, QUICK_ARGS.get(s, []) if args.quick else [], timeout) for s in scripts if (HERE / f"{s}.py").is_file()]

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
    learned = learning_sections(out.parent)
    lines += [LEARNING_HEADING, ""]
    lines += learned or [f"No {LEARNING_PAGE} yet: run `python benchmarks/learning.py`, commit its data, then "
                         "`python benchmarks/learning.py --page` and this script again.", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
