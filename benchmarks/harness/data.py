"""The one reader of committed data: every renderer reads ``docs/results/data/``, the fixed sets' sidecars and
the ledger through these functions, and judges comparisons with :func:`judged`. Nothing here reads
``runs/``."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation import ledger
from harness.experiments import COMPARE, LEARNING_ARMS, RL, RUNNABLE, experiment
from harness.heldout import SPECS
from harness.layout import COLD_START_DIR, ROOT, cell, records_file, set_name
from harness.record import Comparison, Record


def load_json(path: Path) -> dict[str, Any] | None:
    """A JSON file's object, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_pieces(folder: Path) -> dict[str, dict[str, Any]]:
    """Key -> meta of every finished piece of an axes runner's data folder (``benchmarks/axes.py``; a piece without
    its meta is unfinished): a training piece's key is its folder (``grpo-s0``, its ``meta.json``), an
    evaluation's its records' path without ``.jsonl`` (``grpo-s0/tooluse_v5-greedy``, its
    ``tooluse_v5-greedy.meta.json``)."""
    found = [(path.parent.relative_to(folder).as_posix(), path) for path in folder.glob("*/meta.json")]
    found += [(path.relative_to(folder).as_posix().removesuffix(".meta.json"), path)
              for path in folder.glob("*/*.meta.json")]
    return {key: meta for key, path in sorted(found) if (meta := load_json(path)) is not None}


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Every row of the ledger file ``path``."""
    return ledger.read(path)


def read_scores(path: Path) -> tuple[dict[str, float], dict[str, str]]:
    """``({task id: score}, {task id: group})`` of a per-task file (group: ``data_source``, else
    ``family``)."""
    rows = read_rows(path)
    return ({r["id"]: r["score"] for r in rows},
            {r["id"]: str(r.get("data_source", r.get("family"))) for r in rows})


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a committed JSONL file (per-task scores, metrics)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def primary_metric(env: str) -> str:
    """The metric goals on ``env``'s fixed set are stated in (the set's declared ``primary_metric``)."""
    return SPECS[experiment(env).heldout].primary_metric


def grpo_metrics(exp_dir: Path) -> list[dict[str, Any]]:
    """The committed GRPO metrics of a learning run (its RL arm's ``rl-s0/metrics.jsonl``), one record per step;
    none without the file."""
    from agentrl.algos.evaluation.run_log import read_metrics

    path = exp_dir / cell(LEARNING_ARMS[RL], 0) / "metrics.jsonl"
    return read_metrics(path) if path.is_file() else []


def variants(data: Path, env: str, quick: bool) -> list[tuple[Path, dict[str, Any]]]:
    """The committed runs of ``env``'s recipe variants (``learning.py --variant``): ``(data dir,
    learning.json)``, by variant name."""
    out = []
    for path in sorted(data.glob("*/learning.json")):
        run = load_json(path)
        if run and run.get("env") == env and run.get("variant") and bool(run.get("quick")) == quick:
            out.append((path.parent, run))
    return sorted(out, key=lambda x: x[1]["variant"])


def baseline(run: dict[str, Any], runs: list[tuple[Path, dict[str, Any]]]
             ) -> tuple[dict[str, Any], Path] | None:
    """What a variant's RL is compared with: the run whose cold start it reused (``cold_start_from``), else
    the plain recipe's run (the first of ``runs``) when it was judged on the same set; None otherwise."""
    same_set = [(d, r) for d, r in runs
                if r is not run and r.get("heldout_sha256") == run.get("heldout_sha256")]
    for d, r in same_set:
        if run.get("cold_start_from") and r.get("run_dir") == run["cold_start_from"]:
            return r, d
    if run.get("cold_start_from"):
        return None
    return next(((r, d) for d, r in same_set if not r.get("variant")), None)


def runs_of(data: Path, exp: Record, quick: bool) -> tuple[tuple[Path, dict[str, Any] | None],
                                                               list[tuple[Path, dict[str, Any]]]]:
    """``((plain data dir, its learning.json or None), [(variant data dir, learning.json), ...])`` of
    ``exp``."""
    plain_dir = data / f"{exp.name}{'_quick' if quick else ''}"
    return (plain_dir, load_json(plain_dir / "learning.json")), variants(data, exp.env, quick)


def earlier_name(data_dir: Path) -> str | None:
    """``<name>`` of an earlier algorithms comparison kept beside the current one
    (``compare_algorithms_<name>/``, see docs/evaluation.md); None for the current one
    (``compare_algorithms[_quick]/``)."""
    name = data_dir.name.removesuffix("_quick")
    return None if name == "compare_algorithms" else name.removeprefix("compare_algorithms_")


def comparison_dirs(data: Path, quick: bool) -> list[Path]:
    """The algorithms comparisons' data dirs: ``compare_algorithms[_quick]`` (the current one, written by
    ``compare_algorithms.py``), then, outside ``--quick``, each earlier one kept beside it with its data
    (``compare_algorithms_<name>``, moved there by hand when a rerun replaced it)."""
    current = data / f"compare_algorithms{'_quick' if quick else ''}"
    kept = sorted(data.glob("compare_algorithms_*"))
    earlier = [] if quick else [p for p in kept if p.is_dir() and earlier_name(p)]
    return [current, *earlier]


def selections(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Ledger row id -> K for each row that is the best of K >= 2 configurations judged on the same whole set
    with the same N and temperature (a configuration: the weights, else the adapter, plus the eval
    settings). Rows of the pre-declared experiments ``benchmarks/axes.py`` runs (stage ``<experiment>:<model>``)
    take no part: every arm of them is reported."""
    groups: dict[tuple, dict[tuple, dict[str, Any]]] = {}
    for r in rows:
        if r.get("tasks") != r.get("set_tasks") or str(r.get("stage", "")).split(":")[0] in RUNNABLE:
            continue  # a pre-declared experiment's rows are all reported: none was chosen by looking at the set
        value = (r.get("scores") or {}).get(r.get("primary_metric", "average_at_n"))
        if value is None:
            continue
        config = (r.get("weights") or r.get("adapter") or r["id"], r.get("config_sha256"))
        best = groups.setdefault((r["set"], r.get("set_sha256"), r.get("n"), r.get("temperature")), {})
        if config not in best or value > best[config]["_value"]:
            best[config] = {**r, "_value": value}
    out = {}
    for configs in groups.values():
        if len(configs) >= 2:
            top = max(c["_value"] for c in configs.values())
            out.update({c["id"]: len(configs) for c in configs.values() if c["_value"] == top})
    return out


def heldout_status(file: str, sha: str | None, used: int | None = None) -> str:
    """Whether a run was judged on a committed fixed set (by content: the file's hash against the sidecars;
    all of it, unchanged since)."""
    for name, spec in SPECS.items():
        meta = load_json(spec.meta_path) or {}
        path = (ROOT / file) if not Path(file).is_absolute() else Path(file)
        if sha is not None and sha == meta.get("sha256"):
            if used is not None and used < meta["tasks"]:
                return f"**only the first {used} of the committed fixed set's {meta['tasks']} tasks**"
            return f"the committed fixed set `{name}`"
        if path.resolve() == spec.path.resolve():
            return "**a different version of the fixed set**"
    return "**not a committed fixed set** (a subset or another file: not a held-out result)"


#: The tie rule (issue 45): a comparison is a **tie** when its 95% interval holds 0, or when an exact two-sided
#: sign test on the tasks the two rows score differently (McNemar's exact test for 0/1 scores) gives p >= TIE_P.
#: With 5 or fewer such tasks no split reaches p < 0.05, so a one-task difference is always a tie.
TIE_P = 0.05
TIE_RULE = ("*tie*: the 95% interval holds 0, or an exact two-sided sign test on the tasks the two rows score "
            f"differently (McNemar's exact test) gives p >= {TIE_P} (always so with 5 or fewer such tasks)")


def sign_test_p(better: int, worse: int) -> float:
    """Exact two-sided sign-test p-value of ``better`` against ``worse`` discordant tasks (1.0 when none)."""
    n = better + worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(better, worse) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Judgement:
    """A comparison's interval and verdict (``agentrl.algos.evaluation.intervals.Comparison``, whose fields it
    passes through) with the discordant tasks (A above B, B above A) and the tie rule (:data:`TIE_RULE`)."""

    c: Any
    better: int
    worse: int
    comparable: bool = True
    """False when the two rows come from runs whose cold starts differ (a cross-run row): no verdict."""
    spread: tuple[list[float], list[float]] | None = None
    """Each row's score per seed (fractions), where the rows are means over seeds: the noise floor."""
    carried_by: str = ""
    """Where the rows are means over seeds: the one seed (``"rejection sampling seed 2"``) without which this
    verdict would be a tie, so that one seed carries it (empty: none does, or it is a tie)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.c, name)

    @property
    def p(self) -> float:
        return sign_test_p(self.better, self.worse)

    @property
    def tie(self) -> bool:
        return self.c.low <= 0 <= self.c.high or self.p >= TIE_P


def judged(scores: dict[str, dict[str, float]], comparisons: list[Comparison], metric: str = "average_at_n",
           groups: dict[str, str] | None = None, incomparable: frozenset[str] = frozenset()
           ) -> list[tuple[Comparison, Judgement]]:
    """Each comparison whose two rows have per-task ``scores`` (row label -> {task id: score}), with its
    paired bootstrap interval and verdict (``agentrl.algos.evaluation.intervals.compare``) against its
    goal, its discordant tasks and whether it is a tie; a comparison with a row in ``incomparable`` (another
    cold start) gets no verdict."""
    from agentrl.algos.evaluation.intervals import compare

    out = []
    for c in comparisons:
        if c.a not in scores or c.b not in scores:
            continue
        a, b = scores[c.a], scores[c.b]
        res = compare(a, b, goal_points=c.goal, metric=metric, groups=groups, strict=c.strict)
        better = sum(a[t] > b[t] for t in a if t in b)
        worse = sum(a[t] < b[t] for t in a if t in b)
        out.append((c, Judgement(res, better, worse, comparable=not {c.a, c.b} & incomparable)))
    return out


def learning_judged(env: str, run: dict[str, Any], exp_dir: Path,
                    plain: tuple[dict[str, Any], Path] | None = None) -> list[tuple[Comparison, Any]]:
    """The comparisons of a learning run's section (its experiment's, in order) from its committed per-task
    files; for a variant with ``plain`` (the run and data dir it is compared with) also its RL against that
    run's."""
    evals = run.get("evals", {})
    comparisons = list(experiment(env).comparisons)
    scores = {label: read_scores(exp_dir / evals[label])[0] for c in comparisons for label in (c.a, c.b)
              if label in evals}
    groups = read_scores(exp_dir / evals[RL])[1] if RL in evals else None
    incomparable: set[str] = set()
    if plain is not None and RL in evals and RL in plain[0].get("evals", {}):
        other = f"variant {plain[0]['variant']}" if plain[0].get("variant") else "the plain recipe"
        scores[f"{other}'s {RL}"] = read_scores(plain[1] / plain[0]["evals"][RL])[0]
        comparisons.append(Comparison(RL, f"{other}'s {RL}", 0.0, strict=True))
        if not same_cold_start(run, exp_dir, plain[0], plain[1]):
            incomparable.add(f"{other}'s {RL}")
    return judged(scores, comparisons, primary_metric(env), groups, frozenset(incomparable))


COLD_START = "SFT (cold start)"


def same_cold_start(run: dict[str, Any], exp_dir: Path, other: dict[str, Any], other_dir: Path) -> bool:
    """Whether two runs start RL from the same cold start, as their committed data shows it: the cold start's
    per-task scores on the set are equal (a cold start trained again, even with the same recipe, scores
    differently: 74.2-78.1 % over five 16-step cold starts on ``tooluse_v3``)."""
    a, b = run.get("evals", {}).get(COLD_START), other.get("evals", {}).get(COLD_START)
    if a is None or b is None or not (exp_dir / a).is_file() or not (other_dir / b).is_file():
        return False
    return read_scores(exp_dir / a)[0] == read_scores(other_dir / b)[0]


def compare_judged(summary: dict[str, Any], data_dir: Path) -> list[tuple[Comparison, Any]]:
    """Each algorithm against the cold start, each RL algorithm against SFT-continued and each option against
    its plain algorithm, on the final evaluations' per-task scores (``<algo>-s<seed>/<set>.jsonl`` in
    ``data_dir``; a task's score is its mean over seeds), goal: above B. Empty when the files are not there."""
    seed_scores: dict[str, list[float]] = {}
    name = set_name(summary["heldout_file"])
    cold_start = data_dir / COLD_START_DIR / f"{name}.jsonl"

    def final(algo: str) -> dict[str, float] | None:
        paths = [records_file(data_dir, algo, r["seed"], name) for r in summary["runs"][algo]]
        if not paths or not all(p.is_file() for p in paths):
            return None
        per_seed = [read_scores(p)[0] for p in paths]
        seed_scores[label(algo)] = [statistics.fmean(s.values()) for s in per_seed]
        return {task: statistics.fmean(s[task] for s in per_seed) for task in per_seed[0]}

    if not cold_start.is_file():
        return []
    label = COMPARE.labels_of(summary).__getitem__
    scores = {"cold start": read_scores(cold_start)[0]}
    scores.update({label(a): s for a in summary["runs"] if (s := final(a)) is not None})
    pairs = [(label(a), "cold start") for a in summary["runs"]]
    if "sft" in summary["runs"]:
        pairs += [(label(a), label("sft")) for a in summary["runs"] if a != "sft"]
    if "rft" in summary["runs"]:  # the rejection-sampling control: on-policy data without the failures
        pairs += [(label(a), label("rft")) for a in summary["runs"] if a not in ("sft", "rft")]
    pairs += [(label(a), label(algo)) for a in summary["runs"]
              if a in COMPARE.options and (algo := COMPARE.algo(a)) != a and algo in summary["runs"]]
    out = judged(scores, [Comparison(a, b, 0.0, strict=True) for a, b in pairs])
    return [(cmp, dataclasses.replace(j, spread=(seed_scores.get(cmp.a, [1.0]), seed_scores.get(cmp.b, [1.0]))))
            for cmp, j in out]


#: A learning run's stages in the order its per-family tables list them: (row label, its arm).
FAMILY_ROWS = tuple(LEARNING_ARMS.items())


def family_table(run: dict[str, Any], exp_dir: Path, key: str = "family") -> str | None:
    """Average@N per task ``key`` (``family``, ``tier``) of each stage, from the run's committed per-task
    scores (a task's score is its mean over its N episodes); None when the tasks have no such field. A family
    that is only the task's ``data_source`` (Search-v0) is left out: the results table's EM per source shows
    it."""
    evals = run.get("evals", {})
    reports: dict[str, dict[str, float]] = {}
    for label, _ in FAMILY_ROWS:
        if label not in evals or not (exp_dir / evals[label]).is_file():
            continue
        by: dict[Any, list[float]] = {}
        for r in read_rows(exp_dir / evals[label]):
            if key in r and not (key == "family" and r.get("data_source") == r["family"]):
                by.setdefault(r[key], []).append(r["score"])
        reports[label] = {g: sum(v) / len(v) for g, v in by.items()}
    groups = sorted({g for r in reports.values() for g in r}, key=str)
    if not groups:
        return None
    head = [f"{key} {g}" if key == "tier" else str(g) for g in groups]
    lines = ["| Model | " + " | ".join(head) + " |", "|---|" + "---:|" * len(groups)]
    for label, r in reports.items():
        lines.append(f"| {label} | " + " | ".join(f"{100 * r.get(g, 0.0):.0f}%" for g in groups) + " |")
    return "\n".join(lines)
