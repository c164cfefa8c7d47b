"""The speed history: every tracked ratio of the benchmark suite, per commit and machine kind, so a regression
can be told from noise.

A *tracked ratio* is a figure a benchmark prints beside its same-run baseline (ours / TRL's step time, the
collector's tokens/s over naive generation, ...). :data:`TRACKED` says, per benchmark script, which line of its
output holds each ratio and whether lower or higher is better; the patterns read the scripts' own printed
tables, so a commit from before this module existed is measured the same way. ``run_all.py --track`` runs each
tracked script ``--repeat`` times, appends one row per ratio to :data:`HISTORY` (commit, machine kind, every
repetition, median, spread) and prints each ratio beside the recorded median of the same machine kind, with a
warning line when it is worse by more than the spread. ``run_all.py --check`` does the same without writing
(what CI runs). Never asserts: a speed figure is a measurement, never a failing test.

Spread: half the range of the repetitions (``(max - min) / 2``). A ratio is *worse beyond noise* when its median
is worse than the recorded median by more than the larger of the recorded spread and its own.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.layout import SCRIPTS
from harness.machine import cpu_info


@dataclass(frozen=True)
class Ratio:
    """One tracked ratio: its name, the pattern whose first group is the value, and which way is better."""

    name: str
    pattern: str
    better: str  # "lower" | "higher"
    scale: float = 1.0
    """What the printed number is multiplied by (0.01 for a percentage: the history keeps fractions)."""

    def read(self, text: str) -> float | None:
        m = re.search(self.pattern, text, flags=re.M)
        return float(m.group(1).replace(",", "")) * self.scale if m else None


_TRL_ROW = r"^\| ratio agentrl / TRL \| ([\d.]+)x \| ([\d.]+)x \| ([\d.]+)x \| \| \| ([\d.]+)x \|"

#: Benchmark -> its tracked ratios. Patterns match the printed output of the script (old commits included).
TRACKED: dict[str, tuple[Ratio, ...]] = {
    "train_vs_trl": (
        Ratio("step ours / TRL", r"^\| ratio agentrl / TRL \| ([\d.]+)x", "lower"),
        Ratio("generation ours / TRL", r"^\| ratio agentrl / TRL \| [\d.]+x \| ([\d.]+)x", "lower"),
        Ratio("training ours / TRL", r"^\| ratio agentrl / TRL \| [\d.]+x \| [\d.]+x \| ([\d.]+)x", "lower"),
        Ratio("our update / matmul rate", r"our update >= 50% of the matmul rate -> (\d+)%", "higher", 0.01),
    ),
    "rollout_throughput": (
        Ratio("collector / naive generate", r"^\| \d+ \| naive generate \|.*\| ([\d.]+)x \|$", "higher"),
        Ratio("collector / transformers CB",
              r"^\| \d+ \| transformers continuous batching \|.*\| ([\d.]+)x \|$", "higher"),
    ),
    "search_latency": (
        Ratio("BM25 single query speed-up", r"speed-up over the baseline \(p50\): single ([\d,.]+)x", "higher"),
    ),
    "sandbox_latency": (
        Ratio("sandbox / subprocess p50, print(1)", r"^print\(1\)\s.*\s([\d.]+)$", "lower"),
    ),
    "async_vs_sync": (
        Ratio("step sync / async", r"step time sync / async \(steps 2\.\.\): ([\d.]+)x", "higher"),
    ),
    "merge_memory": (
        Ratio("merge peak, layer by layer / whole dict", r"^\| layer by layer \(now\) \| [\d.]+ \| ([\d.]+)x", "lower"),
    ),
}

#: The committed history, one JSON row per (run, ratio).
HISTORY = SCRIPTS / "speed_history.jsonl"


def machine_kind(cpu: str, cores: int | None, flags: set[str]) -> str:
    """What separates machines whose ratios are comparable: CPU model, cores visible, bf16 units."""
    units = ", ".join(sorted({"amx_bf16", "avx512_bf16"} & flags)) or "no bf16 units"
    return f"{cpu}, {cores} cores, {units}"


def this_machine() -> str:
    """:func:`machine_kind` of the machine this process runs on."""
    cpu, flags = cpu_info()
    return machine_kind(cpu, os.cpu_count(), set(flags))


def spread(values: list[float]) -> float:
    """Half the range of the repetitions (0 for one)."""
    return (max(values) - min(values)) / 2 if values else 0.0


def measure(name: str, outputs: list[str], *, commit: str, machine: str, mode: str) -> list[dict[str, Any]]:
    """History rows for benchmark ``name`` from the outputs of its repetitions (a ratio missing from every
    output, e.g. TRL not installed, gives no row)."""
    rows = []
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    for ratio in TRACKED.get(name, ()):
        values = [v for v in (ratio.read(o) for o in outputs) if v is not None]
        if not values:
            continue
        rows.append({"date": when, "commit": commit, "machine": machine, "mode": mode, "benchmark": name,
                     "ratio": ratio.name, "better": ratio.better, "values": values,
                     "median": statistics.median(values), "spread": spread(values)})
    return rows


def read_history(path: Path = HISTORY) -> list[dict[str, Any]]:
    """The history's rows (none when the file does not exist).

    Raises:
        ValueError: a malformed line, naming the file and line.
    """
    if not path.exists():
        return []
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not a JSON row ({e.msg})") from None
    return rows


def append_history(rows: list[dict[str, Any]], path: Path = HISTORY) -> None:
    with path.open("a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def verdict(row: dict[str, Any], history: list[dict[str, Any]]) -> str:
    """One line: the ratio, its spread and repetitions, beside the recorded median of the same machine kind and
    mode (other commits only); starts with ``WARNING`` when it is worse beyond noise."""
    same = [h for h in history if (h["machine"], h["mode"], h["benchmark"], h["ratio"])
            == (row["machine"], row["mode"], row["benchmark"], row["ratio"]) and h["commit"] != row["commit"]]
    now = (f"{row['benchmark']}: {row['ratio']} = {row['median']:.3g}x ± {row['spread']:.2g} "
           f"({len(row['values'])} reps, {row['better']} is better)")
    if not same:
        return f"{now}; no recorded history for this machine kind"
    past = statistics.median(h["median"] for h in same)
    noise = max(statistics.median(h["spread"] for h in same), row["spread"])
    worse = row["median"] - past if row["better"] == "lower" else past - row["median"]
    where = f"recorded median {past:.3g}x over {len(same)} runs, noise {noise:.2g}"
    if worse > noise:
        return f"WARNING {now} is worse than the {where}"
    return f"{now}; {where}: within noise" if abs(worse) <= noise else f"{now}; better than the {where}"


def history_table(history: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per machine kind and mode, one row per run (commit, date) and one column per ratio."""
    lines: list[str] = []
    kinds = sorted({(h["machine"], h["mode"]) for h in history})
    for machine, mode in kinds:
        rows = [h for h in history if (h["machine"], h["mode"]) == (machine, mode)]
        names = list(dict.fromkeys(f"{h['benchmark']}: {h['ratio']}" for h in rows))
        runs = list(dict.fromkeys((h["commit"], h["date"][:10]) for h in rows))
        lines += [f"**{machine}** ({mode} runs)", "",
                  "| commit | date | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
        for commit, date in runs:
            cells = []
            for name in names:
                got = [h for h in rows if (h["commit"], h["date"][:10]) == (commit, date)
                       and f"{h['benchmark']}: {h['ratio']}" == name]
                cells.append(f"{got[-1]['median']:.3g}x ± {got[-1]['spread']:.2g} (n={len(got[-1]['values'])})"
                             if got else "")
            lines.append(f"| {commit[:7]} | {date} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def plot_history(history: list[dict[str, Any]], out: Path) -> Path | None:
    """A figure of each ratio's median (error bars: spread) over the recorded runs, one panel per machine kind
    and mode; ``None`` when the history is empty."""
    if not history:
        return None
    from agentrl.algos.evaluation.plot import headless_pyplot, save_figure

    plt = headless_pyplot()
    kinds = sorted({(h["machine"], h["mode"]) for h in history})
    fig, axes = plt.subplots(len(kinds), 1, figsize=(9, 3.2 * len(kinds)), squeeze=False)
    for ax, (machine, mode) in zip(axes[:, 0], kinds, strict=True):
        rows = [h for h in history if (h["machine"], h["mode"]) == (machine, mode)]
        runs = list(dict.fromkeys(h["commit"][:7] for h in rows))
        for name in dict.fromkeys(f"{h['benchmark']}: {h['ratio']}" for h in rows):
            pts = [(runs.index(h["commit"][:7]), h["median"], h["spread"]) for h in rows
                   if f"{h['benchmark']}: {h['ratio']}" == name]
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o",
                        capsize=3, label=name)
        ax.set_xticks(range(len(runs)), runs)
        ax.set_yscale("log")  # ratios near 0.1x and near 100x on one axis
        ax.set_ylabel("ratio (x, log scale)")
        ax.set_title(f"{machine} ({mode})", fontsize=9)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return save_figure(fig, out, 110)
