"""The learning page's sections of the pre-declared axes experiment (``AXES``) and of the train-split lr choice
(``LR_CHOICE``), from the pieces ``benchmarks/axes.py`` committed under ``docs/results/data/<experiment>/``.
Whatever pieces exist are shown; the rest say "not run". Comparisons use the tie rule and show each row's seed
spread as the noise floor (:mod:`harness.data`)."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any

from harness.data import TIE_RULE, judged, load_json, read_pieces, read_scores
from harness.experiments import AXES, COLLAPSE_POINTS, COMPARE, LR_CHOICE, LR_EDGE
from harness.record import Comparison, Record
from harness.tables import verdict

COLD = "cold start"
TRAIN = "train"
FORGETTING = "tooluse_axis_forgetting"
CUT = "cut-greedy"  # harness.axes_run.CUT: an evaluation of a cell's equal-updates cut adapter
KS = (1, 2, 4, 8)


def label(arm: str) -> str:
    """An arm's row label: the algorithms comparison's for the axes arms, else the arm's declared name."""
    return COMPARE.label(arm) if arm in AXES.arms else arm


class Axes:
    """The committed pieces of one experiment's data folder."""

    def __init__(self, exp: Record, folder: Path):
        self.exp, self.folder = exp, folder
        self.pieces = read_pieces(folder) if folder.is_dir() else {}
        self.setup = load_json(folder / "setup.json") or {}
        self._scores: dict[str, dict[str, float]] = {}  # read once: the tables, means and comparisons share them

    def models(self, arm: str | None) -> list[tuple[int | None, str]]:
        """``(seed, model)`` of a row: the cold start (``arm`` None) or each declared seed of an arm."""
        return [(None, "cold_start")] if arm is None else [(s, f"{arm}-s{s}") for s in self.exp.seeds]

    def scores(self, model: str, target: str, mode: str = "greedy") -> dict[str, float] | None:
        key = f"{model}/{target}-{mode}"
        if key not in self.pieces:
            return None
        if key not in self._scores:
            self._scores[key] = read_scores(self.folder / f"{key}.jsonl")[0]
        return self._scores[key]

    def row(self, arm: str | None, target: str, mode: str = "greedy") -> list[tuple[int | None, dict[str, float]]]:
        """The finished evaluations of a row: ``(seed, per-task scores)``."""
        return [(seed, s) for seed, m in self.models(arm) if (s := self.scores(m, target, mode)) is not None]

    def report(self, model: str, target: str, mode: str) -> dict[str, Any] | None:
        meta = self.pieces.get(f"{model}/{target}-{mode}")
        return None if meta is None else meta.get("report")


def pct(x: float | None) -> str:
    return "not run" if x is None else f"{100 * x:.1f}"


def mean_score(s: dict[str, float]) -> float:
    return statistics.fmean(s.values())


def per_seed_cell(ax: Axes, arm: str | None, target: str, mode: str = "greedy") -> str:
    done = dict(ax.row(arm, target, mode))
    return " / ".join(pct(mean_score(done[s])) if s in done else "not run" for s, _ in ax.models(arm))


def mean_cell(rows: list[tuple[int | None, dict[str, float]]]) -> str:
    if not rows:
        return "not run"
    seeds = f" ({len(rows)} seed{'s' * (len(rows) != 1)})" if rows[0][0] is not None else ""
    return pct(statistics.fmean(mean_score(s) for _, s in rows)) + seeds


def sampled_cells(ax: Axes, arm: str | None, target: str) -> tuple[str, str]:
    reports = [r for _, m in ax.models(arm) if (r := ax.report(m, target, "sampled"))]
    if not reports:
        return "not run", "not run"

    def avg(key: str, k: int) -> str:
        vals = [r[key][str(k)] for r in reports if str(k) in r.get(key, {})]
        return f"{100 * statistics.fmean(vals):.0f}" if vals else "–"

    return " / ".join(avg("pass_at_k", k) for k in KS), " / ".join(avg("pass_hat_k", k) for k in KS[1:])


def set_name(exp: Record, target: str) -> str:
    """A set's name in a table: the train-split sample, a public benchmark set's label, else the set file's stem."""
    if target == TRAIN:
        return "train-split sample"
    if target in exp.transfer:
        from harness.transfer import transfer_set

        return transfer_set(target).label
    return f"`{target}`"


def set_lines(ax: Axes, target: str, rows: list[str | None]) -> list[str]:
    """One set's table (greedy pass@1 per seed, its mean, pass@k and pass^k over 8 tries) and its comparisons."""
    if target in ax.exp.transfer:
        title = (f"{set_name(ax.exp, target)} (`{target}`: greedy only, graded by the benchmark's own checker; "
                 "[the transfer declaration](transfer.md) fixes its tasks and decoding)")
    else:
        title = "the fixed train-split sample" if target == TRAIN else f"`{target}`"
    lines = [f"#### {title}", "", "| Row | greedy pass@1, per seed (%) | mean | pass@1 / 2 / 4 / 8 (8 tries) "
             "| pass^2 / 4 / 8 |", "|---|---|---:|---|---|"]
    sampled = target != TRAIN and ax.exp.samples(target)
    for arm in rows:
        at_k, hat_k = sampled_cells(ax, arm, target) if sampled else ("–", "–")
        lines.append(f"| {COLD if arm is None else label(arm)} | {per_seed_cell(ax, arm, target)} | "
                     f"{mean_cell(ax.row(arm, target))} | {at_k} | {hat_k} |")
    judgements = comparisons(ax, target, rows)
    if ax.exp.cut_updates:  # each arm at the equal-updates cut, and its comparisons: a second reading
        for arm in ax.exp.arms:
            lines.append(f"| {cut_label(ax, arm)} | {per_seed_cell(ax, arm, target, CUT)} | "
                         f"{mean_cell(ax.row(arm, target, CUT))} | – | – |")
        judgements += [(c, j) for c, j in comparisons(ax, target, [None, *ax.exp.arms], CUT) if c.b != COLD]
    if judgements:
        lines += ["", "| A vs B | A | B | A - B [95% interval] | seed SD (points) | verdict |",
                  "|---|---:|---:|---|---|---|"]
        for cmp, j in judgements:
            lines.append(f"| {cmp.a} vs {cmp.b} | {j.a:.1f} | {j.b:.1f} | {j.difference:+.1f} [{j.low:+.1f}, "
                         f"{j.high:+.1f}] | {seed_sd(j)} | {verdict(j)} |")
    return [*lines, ""]


def seed_sd(j: Any) -> str:
    """Each side's standard deviation over its seeds (points): the noise floor beside an interval."""
    return " / ".join(f"{100 * statistics.stdev(s):.1f}" if len(s) >= 2 else "1 seed" for s in j.spread)


def cut_label(ax: Axes, arm: str) -> str:
    return f"{label(arm)} at the cut ({ax.exp.cut_updates} updates)"


def comparisons(ax: Axes, target: str, rows: list[str | None], mode: str = "greedy"
                ) -> list[tuple[Comparison, Any]]:
    """The first arm against each other arm, then each arm against the cold start, on per-task scores averaged
    over each row's finished seeds; the seed spread rides along (the noise floor). ``mode`` :data:`CUT`: the arms
    at the equal-updates cut."""
    seeds: dict[str, list[tuple[int | None, dict[str, float]]]] = {}
    for arm in rows:
        name = COLD if arm is None else label(arm) if mode != CUT else cut_label(ax, arm)
        if done := ax.row(arm, target, "greedy" if arm is None else mode):
            seeds[name] = done
    scores = {name: seed_mean(done) for name, done in seeds.items()}
    arms = [(label(a) if mode != CUT else cut_label(ax, a)) for a in rows if a is not None]
    pairs = [(arms[0], b) for b in arms[1:]] + [(a, COLD) for a in arms]
    out = judged(scores, [Comparison(a, b, 0.0, strict=True) for a, b in pairs])
    return [(c, dataclasses.replace(j, spread=tuple([mean_score(s) for _, s in seeds[n]] for n in (c.a, c.b)),
                                    carried_by=carried_by(c, j, seeds, scores)))
            for c, j in out]


def seed_mean(done: list[tuple[int | None, dict[str, float]]]) -> dict[str, float]:
    """Per-task scores averaged over a row's seeds."""
    return {t: statistics.fmean(s[t] for _, s in done) for t in done[0][1]}


def carried_by(c: Comparison, j: Any, seeds: dict[str, list[tuple[int | None, dict[str, float]]]],
               scores: dict[str, dict[str, float]]) -> str:
    """The one seed of either row without which a met/missed verdict would be a tie (judged again on the means
    over the other seeds, the other row's ``scores`` as they are), or empty: a verdict that one seed carries says
    so in its cell."""
    if j.tie:
        return ""
    for name in (c.a, c.b):
        if len(seeds[name]) < 2:
            continue
        for k, (seed, _) in enumerate(seeds[name]):
            rest = {c.a: scores[c.a], c.b: scores[c.b], name: seed_mean(seeds[name][:k] + seeds[name][k + 1:])}
            [(_, again)] = judged(rest, [c])
            if again.tie:
                return f"{name} seed {seed}"
    return ""


def kl_cell(ax: Axes, arm: str | None) -> str:
    vals = [m["kl_to_base"]["token_mean"] for _, model in ax.models(arm)
            if (m := ax.pieces.get(f"{model}/{TRAIN}-greedy")) and "kl_to_base" in m]
    if not vals:
        return "not run"
    return f"{statistics.fmean(vals):.4f}" + (f" ({' / '.join(f'{v:.4f}' for v in vals)})" if len(vals) > 1 else "")


def cells_table(ax: Axes) -> list[str]:
    def cell(key: str) -> str:
        m = ax.pieces.get(key)
        if m is None:
            return "not run"
        text = f"{m.get('steps', '?')} steps, {m.get('train_seconds', 0) / 60:.1f} min"
        if cut := m.get("cut"):  # the equal-updates cut: where it fell, or the final adapter when it made fewer
            text += (f"; {cut['cell_updates']} updates, cut = final" if cut["final"] else
                     f"; cut at step {cut['step']} ({cut['train_seconds'] / 60:.1f} min)")
        return text

    lines = ["| Training | " + " | ".join(f"seed {s}" for s in ax.exp.seeds) + " |",
             "|---|" + "---|" * len(ax.exp.seeds), f"| {COLD} (shared) | {cell('cold_start')} |" + " |" *
             (len(ax.exp.seeds) - 1)]
    for arm in ax.exp.arms:
        lines.append(f"| {label(arm)} | " + " | ".join(cell(f"{arm}-s{s}") for s in ax.exp.seeds) + " |")
    return lines


def signal_lines(ax: Axes) -> list[str]:
    """Where each arm's learning signal was: per family, the share of its sampled groups whose rewards were all
    equal (no group-relative signal), summed over the finished cells' steps; and the training reward of the first
    and last quarter of the steps (the cells' ``metrics.jsonl``)."""
    from agentrl.algos.evaluation.run_log import read_metrics

    rows = []
    for arm in ax.exp.arms:
        groups: dict[str, list[float]] = {}
        first, last = [], []
        for _, model in ax.models(arm):
            path = ax.folder / model / "metrics.jsonl"
            if model not in ax.pieces:
                continue
            for r in read_metrics(path) if path.is_file() else []:
                for key, v in r.items():
                    if key.startswith(("family/groups@", "family/signal_groups@")):
                        family = key.split("@", 1)[1]
                        g = groups.setdefault(family, [0.0, 0.0])
                        g[0 if key.startswith("family/groups@") else 1] += float(v)
            d = ax.pieces[model].get("diagnostics", {})
            if "reward_first_quarter" in d:
                first.append(d["reward_first_quarter"])
                last.append(d["reward_last_quarter"])
        if groups or first:
            shares = ", ".join(f"{f} {100 * (1 - sig / n):.0f}%" for f, (n, sig) in sorted(groups.items()) if n)
            reward = (f"{statistics.fmean(first):.2f} -> {statistics.fmean(last):.2f}" if first else "–")
            rows.append(f"| {label(arm)} | {reward} | {shares or '–'} |")
    if not rows:
        return []
    return ["| Arm | training reward, first -> last quarter (mean over seeds) | groups with equal rewards, per "
            "family |", "|---|---|---|", *rows, ""]


def header(ax: Axes, command: str) -> list[str]:
    exp = ax.exp
    budget = f"{exp.steps} steps" if exp.steps else f"{exp.minutes:g} minutes of training"
    lines = [f"Declared in `benchmarks/harness/experiments.py` (`{exp.name.upper()}`) before anything ran, run in "
             f"resumable pieces by `{command}` (`python benchmarks/axes.py status --experiment {exp.name}` lists "
             f"them). Arms {', '.join(label(a) for a in exp.arms)}, seeds {', '.join(map(str, exp.seeds))}, "
             f"{budget} per (arm, seed), all from one shared cold start. "
             f"{exp.primary[:1].upper()}{exp.primary[1:]}.", ""]
    if exp.judge:
        lines += [f"Decision rule: {exp.judge}", ""]
    if ax.setup.get("tasks"):
        lines += [f"**A smoke run on the first {ax.setup['tasks']} tasks of each set: not a result.**", ""]
    if not ax.pieces:
        lines += ["**Not run yet**: no piece of it is committed.", ""]
    return lines


def axes_section(folder: Path, exp: Record = AXES) -> list[str]:
    """An axes-kind experiment's section (AXES, EDGE): its cells, every set's pass@1 / pass@k / pass^k with the
    comparisons, and the forgetting table (forgetting set beside the train-split score and the KL to the base)."""
    ax = Axes(exp, folder)
    title = exp.title or "Generalisation axes: " + " vs ".join(label(a) for a in exp.arms)
    command = "python benchmarks/axes.py run" + ("" if exp.name == AXES.name else f" --experiment {exp.name}")
    lines = [f"## {title} (pre-declared)", "", *header(ax, command)]
    if not ax.pieces:
        return lines
    rows: list[str | None] = [None, *exp.arms]
    lines += [*cells_table(ax), "", *signal_lines(ax),
              f"Verdicts: {TIE_RULE}. The seed SD beside each interval is the noise floor: "
              "a difference within the seeds' spread is not read as a difference. A row's per-task scores are "
              "averaged over its finished seeds. A met or missed verdict that becomes a tie when one seed of either "
              "row is left out says \"carried by <that seed> alone\".", ""]
    for target in (*exp.sets, *exp.transfer):
        lines += set_lines(ax, target, rows)
    lines += ["#### Forgetting", "", "The forgetting set holds skills the arms never train on; beside it, the "
              "fixed train-split sample and the mean per-token KL(adapter || base model) on the adapter's own "
              "greedy replies to it (nats per token; the base is the same model with the adapter switched off).",
              "", "| Row | forgetting set, greedy pass@1 (%) | train-split sample, greedy pass@1 (%) | KL to the "
              "base |",
              "|---|---|---|---|"]
    for arm in rows:
        lines.append(f"| {COLD if arm is None else label(arm)} | {mean_cell(ax.row(arm, FORGETTING))} | "
                     f"{mean_cell(ax.row(arm, TRAIN))} | {kl_cell(ax, arm)} |")
    return [*lines, ""]


def readme_sets(exp: Record) -> tuple[str, ...]:
    """The README's rows, at most 8 (issue 45): every declared held-out set, then the public benchmark sets while
    there is room (AXES: BFCL simple_python and multiple); the train-split sample and the rest are on the page."""
    return (*exp.sets, *exp.transfer)[:8]


def readme_rows(folder: Path, exp: Record = AXES) -> list[str]:
    """The README's results rows: one per set of :func:`readme_sets`, with the greedy pass@1 of the cold start and
    of each arm (the mean over its finished seeds) and the first arm against each other arm: its interval, each
    side's seed SD (the noise floor) and verdict; then a line saying how many cells are in, their steps, and which
    sets only the page shows. Empty when nothing of the experiment is committed."""
    ax = Axes(exp, folder)
    if not ax.pieces:
        return []
    rows: list[str | None] = [None, *exp.arms]
    shown_sets = readme_sets(exp)
    first, others = label(next(iter(exp.arms))), [label(a) for a in list(exp.arms)[1:]]

    def short(name: str) -> str:  # "GRPO (Dr. GRPO)" -> "GRPO": the page's table names each arm in full
        return name.split(" (")[0]

    lines = ["| Set: greedy pass@1 (%) | " + " | ".join([COLD, *(short(label(a)) for a in exp.arms)]) + " | "
             + " | ".join(f"{short(first)} - {short(o)}: 95% interval; seed SD (points); verdict" for o in others)
             + " |",
             "|---|" + "---:|" * (len(rows)) + "---|" * len(others)]
    for target in shown_sets:
        judged = {(c.a, c.b): j for c, j in comparisons(ax, target, rows)}
        versus = []
        for other in others:
            j = judged.get((first, other))
            versus.append("not run" if j is None else
                          f"{j.difference:+.1f} [{j.low:+.1f}, {j.high:+.1f}]; {seed_sd(j)}; {verdict(j)}")
        means = [mean_cell(ax.row(arm, target)) for arm in rows]
        lines.append(f"| {set_name(exp, target)} | " + " | ".join([*means, *versus]) + " |")

    def trained(arm: str) -> str:
        steps = [str(m.get("steps", "?")) for _, model in ax.models(arm) if (m := ax.pieces.get(model))]
        return f"{short(label(arm))} {len(steps)} of {len(exp.seeds)}" + (f" ({' / '.join(steps)} steps)" if steps
                                                                            else "")

    budget = f"{exp.steps} steps" if exp.steps else f"{exp.minutes:g} minutes"
    left = [set_name(exp, t) for t in (TRAIN, *exp.sets, *exp.transfer) if t not in shown_sets]
    return [*lines, "", f"Cells trained ({budget} each, from one shared cold start): "
            + ", ".join(trained(a) for a in exp.arms) + f". On the learning page also: {', '.join(left)}."]


def lr_choice_section(folder: Path, exp: Record = LR_CHOICE) -> list[str]:
    """The train-split lr choice: each rate's seeds against the cold start on the train-split sample, the
    collapse rule, the last quarter's training reward and the decision once every cell is in."""
    ax = Axes(exp, folder)
    lines = ["## The main job's RL learning rate, chosen on the train split (pre-declared)", "",
             *header(ax, f"python benchmarks/axes.py run --experiment {exp.name}")]
    if not ax.pieces:
        return lines
    cold = ax.scores("cold_start", TRAIN)
    lines += [f"Cold start on the train-split sample: {pct(None if cold is None else mean_score(cold))}%.", "",
              "| Rate | seed | steps | train-split greedy (%) | vs cold start (points) | collapsed | reward, last "
              "quarter |", "|---|---|---:|---:|---:|---|---:|"]
    outcome: dict[str, list[tuple[bool, float]]] = {}
    for arm in exp.arms:
        for seed, model in ax.models(arm):
            cell, score = ax.pieces.get(model), ax.scores(model, TRAIN)
            if cell is None or score is None or cold is None:
                lines.append(f"| {arm} | {seed} | not run | | | | |")
                continue
            delta = 100 * (mean_score(score) - mean_score(cold))
            reward = cell.get("diagnostics", {}).get("reward_last_quarter", float("nan"))
            outcome.setdefault(arm, []).append((delta < -COLLAPSE_POINTS, reward))
            lines.append(f"| {arm} | {seed} | {cell.get('steps')} | {pct(mean_score(score))} | {delta:+.1f} | "
                         f"{'**yes**' if delta < -COLLAPSE_POINTS else 'no'} | {reward:.3f} |")
    return [*lines, "", decision(exp, outcome), ""]


def decision(exp: Record, outcome: dict[str, list[tuple[bool, float]]]) -> str:
    """The declared rule applied (LR_CHOICE.judge), or how many cells are still missing."""
    n = sum(len(v) for v in outcome.values())
    total = len(exp.arms) * len(exp.seeds)
    if n < total:
        return f"**Not decided yet**: {n} of {total} cells trained and evaluated."
    rate = {a: float(exp.arms[a].get("stages.rl.lr", 0.0)) for a in exp.arms}
    chosen, stable, reward = choose(list(exp.arms), rate, outcome)
    if not stable:
        return f"**Decision**: every rate collapsed on some seed; by the rule, the lowest, {chosen}: none passed."
    return (f"**Decision**: {chosen} (rl_lr {rate[chosen]:g}); did not collapse: {', '.join(stable)}; mean "
            "last-quarter reward " + ", ".join(f"{a} {reward[a]:.3f}" for a in stable) + ".")


def choose(arms: list[str], rate: dict[str, float], outcome: dict[str, list[tuple[bool, float]]]
           ) -> tuple[str, list[str], dict[str, float]]:
    """The lr rules' shared core: ``(chosen, rates where no seed collapsed, their mean score)``: the best mean score
    among those, within 0.02 of it the lower rate; if every rate collapsed, the lowest (``stable`` empty)."""
    stable = [a for a in arms if not any(c for c, _ in outcome.get(a, []))]
    if not stable:
        return min(arms, key=rate.__getitem__), [], {}
    score = {a: statistics.fmean(s for _, s in outcome[a]) for a in stable}
    best = max(score.values())
    return min((a for a in stable if score[a] >= best - 0.02), key=rate.__getitem__), stable, score


def lr_edge_section(folder: Path, exp: Record = LR_EDGE) -> list[str]:
    """EDGE's two rates chosen on the train split (LR_EDGE.judge): per algorithm, each rate's seeds against the cold
    start, greedy (the collapse rule) and pass@1 of 4 tries at temperature 1 (the score), GRPO's updates and signal
    share, and the decision once every cell of that algorithm is in."""
    ax = Axes(exp, folder)
    lines = ["## EDGE's learning rates, chosen on the train split (pre-declared)", "",
             *header(ax, f"python benchmarks/axes.py run --experiment {exp.name}")]
    if not ax.pieces:
        return lines
    cold, cold_t1 = ax.scores("cold_start", TRAIN), ax.scores("cold_start", TRAIN, "sampled")
    lines += [f"Cold start on the train-split sample: greedy {pct(None if cold is None else mean_score(cold))}%, "
              f"pass@1 at temperature 1 {pct(None if cold_t1 is None else mean_score(cold_t1))}%.", "",
              "| Rate | seed | updates | greedy (%) | vs cold start (points) | collapsed | pass@1 at T=1 (%) | vs cold "
              "start (points) | GRPO groups with signal | rollouts per update |",
              "|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    outcome: dict[str, list[tuple[bool, float]]] = {}
    for arm in exp.arms:
        for seed, model in ax.models(arm):
            cell, greedy, t1 = ax.pieces.get(model), ax.scores(model, TRAIN), ax.scores(model, TRAIN, "sampled")
            if cell is None or greedy is None or t1 is None or cold is None or cold_t1 is None:
                lines.append(f"| {arm} | {seed} | not run | | | | | | | |")
                continue
            delta = 100 * (mean_score(greedy) - mean_score(cold))
            collapsed = delta < -COLLAPSE_POINTS
            outcome.setdefault(arm, []).append((collapsed, mean_score(t1)))
            updates, signal, per_update = cell_signal(ax, model, cell)
            lines.append(f"| {arm} | {seed} | {updates} | {pct(mean_score(greedy))} | {delta:+.1f} | "
                         f"{'**yes**' if collapsed else 'no'} | {pct(mean_score(t1))} | "
                         f"{100 * (mean_score(t1) - mean_score(cold_t1)):+.1f} | {signal} | {per_update} |")
    lines.append("")
    for algo in ("grpo", "sft"):
        lines += [edge_decision(exp, algo, outcome), ""]
    return [*lines, "GRPO's rate is chosen at EDGE's batch (4 groups of 8 per update); where the main job (8 groups "
            "of 8) uses it, it is a candidate carried over, not a rate chosen at that batch.", ""]


def cell_signal(ax: Axes, model: str, cell: dict[str, Any]) -> tuple[str, str, str]:
    """A cell's weight updates, and for a sampled RL cell its share of rolled-out groups with unequal rewards and
    the rollouts it spent per update (``metrics.jsonl``); SFT: its steps, and dashes."""
    from agentrl.algos.evaluation.run_log import read_metrics

    path = ax.folder / model / "metrics.jsonl"
    rows = read_metrics(path) if path.is_file() else []
    updates = sum(float(r.get("train/optimizer_steps", 0.0)) for r in rows)
    groups = sum(float(r.get("signal/groups", 0.0)) for r in rows)
    if not groups:
        return str(cell.get("steps", "?")) if cell.get("algo") == "sft" else f"{updates:g}", "–", "–"
    with_signal = sum(float(r.get("signal/groups_with_signal", 0.0)) for r in rows)
    rollouts = sum(float(r.get("signal/rollouts", 0.0)) for r in rows)
    return (f"{updates:g}", f"{100 * with_signal / groups:.0f}%",
            f"{rollouts / updates:.0f}" if updates else "no update")


def edge_decision(exp: Record, algo: str, outcome: dict[str, list[tuple[bool, float]]]) -> str:
    """LR_EDGE.judge for one algorithm: among rates where no seed collapsed, the highest mean pass@1 at temperature
    1; within 2 points of it, the lower rate; if every rate collapsed, the lowest (said so). A rate with a collapsed
    seed is out whatever its other seeds do, so the rule is decided once every other rate has all its seeds in."""
    arms = [a for a in exp.arms if exp.arms[a]["algo"] == algo]
    n, total = sum(len(outcome.get(a, [])) for a in arms), len(arms) * len(exp.seeds)
    name = {"grpo": "GRPO", "sft": "SFT-continued"}.get(algo, algo)
    out = [a for a in arms if any(c for c, _ in outcome.get(a, []))]
    said = f" Out by the collapse rule already: {', '.join(out)}." if out else ""
    if any(a not in out and len(outcome.get(a, [])) < len(exp.seeds) for a in arms):
        return f"**{name}: not decided yet**: {n} of {total} cells trained and evaluated.{said}"
    rate = {a: float(next(v for k, v in exp.arms[a].items() if k.endswith(".lr"))) for a in arms}
    chosen, stable, score = choose(arms, rate, outcome)
    cells = "1 cell" if total - n == 1 else f"{total - n} cells"
    unrun = f" ({cells} of collapsed rates not run: the rule does not need them)" if n < total else ""
    if not stable:
        return (f"**{name}: {chosen}** (lr {rate[chosen]:g}): every rate collapsed on some seed; by the rule, the "
                f"lowest: none passed{unrun}.")
    return (f"**{name}: {chosen}** (lr {rate[chosen]:g}); did not collapse: {', '.join(stable)}; mean pass@1 at "
            "temperature 1: " + ", ".join(f"{a} {100 * score[a]:.1f}%" for a in stable) + f"{unrun}.")
