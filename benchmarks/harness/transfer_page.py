"""``docs/results/transfer.md``: the transfer experiment's page, generated only from the committed per-task records
(``docs/results/data/transfer/<arm>-s0/<set>.jsonl`` and ``.meta.json``, written by ``benchmarks/transfer.py``) and
the declaration (:mod:`harness.transfer`). Regenerating it from the same files gives the same bytes.

Per set and arm: the score (share of tasks the benchmark's own checker counts correct) with its 95% interval (a
bootstrap over tasks, ``agentrl.algos.evaluation.intervals``), and the shares of episodes that called a tool and
whose final reply parsed (why a 0 is a 0). Then the declared comparisons, paired over the same tasks, with the
learning pages' verdict rules (:func:`harness.data.judged`, :data:`harness.data.TIE_RULE`). An arm or set without
records says "not run". The first measurement of an (arm, set) is its figure; a ``--redo`` kept beside it is
listed, not used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.intervals import paired_bootstrap
from harness.data import TIE_RULE, judged, load_json, read_ledger, read_rows
from harness.layout import LEDGER, meta_file, shown
from harness.record import Comparison
from harness.tables import cell, commit_text, verdict
from harness.transfer import (
    ARMS,
    COMPARISONS,
    DECODING,
    PACKAGES,
    SETS,
    TRANSFER,
    TRANSFER_DATA,
    TRANSFER_PAGE,
    TransferSet,
    arm_folder,
)

Measured = dict[str, Any]
"""``{"rows": per-task records, "meta": the meta json}`` of one (arm, set)."""


def measurements(data: Path) -> dict[tuple[str, str], Measured]:
    """(arm, set) -> its first measurement, for each declared pair with records in ``data``."""
    out = {}
    for name in ARMS:
        for s in SETS:
            path = arm_folder(data, name) / f"{s.name}.jsonl"
            if path.is_file():
                out[(name, s.name)] = {"rows": read_rows(path),
                                         "meta": load_json(meta_file(path)) or {}}
    return out


def redos(data: Path) -> list[tuple[str, str, Path, Measured]]:
    """Every later measurement kept beside a first one: ``(arm, set, records file, measurement)``."""
    out = []
    for name in ARMS:
        for s in SETS:
            for path in sorted(arm_folder(data, name).glob(f"{s.name}.redo*.jsonl")):
                if path.name.removeprefix(f"{s.name}.redo").removesuffix(".jsonl").isdigit():
                    meta = load_json(meta_file(path)) or {}
                    out.append((name, s.name, path, {"rows": read_rows(path), "meta": meta}))
    return out


def row(*cells: str) -> str:
    """A Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def share(rows: list[dict[str, Any]], key: str) -> float:
    return sum(float(r[key]) for r in rows) / len(rows) if rows else 0.0


def score_cell(rows: list[dict[str, Any]]) -> str:
    """``12.5% [9.0, 16.3]``: the score and its 95% bootstrap interval over tasks (the project's seeded bootstrap,
    of the score against zero)."""
    scores = [float(r["score"]) for r in rows]
    point, low, high = paired_bootstrap(scores, [0.0] * len(scores))
    return f"{100 * point:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def why_zero(label: str, rows: list[dict[str, Any]]) -> str:
    """What the records say about a score of 0 (empty for a score above 0)."""
    if not rows or share(rows, "score") > 0:
        return ""
    called, parsed = share(rows, "called_tool"), share(rows, "format_ok")
    if called == 0:
        return f"{label} scores 0: no episode called a tool ({100 * parsed:.0f}% of final replies parsed)"
    return (f"{label} scores 0: {100 * called:.0f}% of episodes called a tool, none was graded correct "
            f"({100 * parsed:.0f}% of final replies parsed)")


def regraded_text(label: str, meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """What ``benchmarks/transfer.py --regrade-cut`` (:mod:`harness.transfer_regrade`) did to one measurement."""
    r = meta.get("regraded")
    if not r:
        return ""
    if not r.get("regraded"):
        return f"{label} {r['cut']} not re-graded ({r.get('why')}: they stay at 0)"
    before, after = 100 * float((r.get("scores_before") or {}).get("score", 0.0)), 100 * share(rows, "score")
    moved = f", {before:.1f}% -> {after:.1f}%" if r.get("changed") else ""
    return f"{label} {r['regraded']} ({r.get('changed')} changed{moved})"


def regrade_sentence(found: dict[tuple[str, str], Measured]) -> str:
    """The Scores section's one sentence on the re-grade, from the first measurement that records one."""
    r = next((m["meta"]["regraded"] for m in found.values() if (m["meta"].get("regraded") or {}).get("regraded")),
             None)
    if r is None:
        return ""
    return (f" BFCL replies cut by the token budget were scored 0 without grading by the collector up to 070684b; "
            f"at {str(r.get('commit'))[:7]} the stored replies of the single-turn sets were graded again by BFCL's "
            f"checker (`{r.get('command')}`, `benchmarks/harness/transfer_regrade.py`: the same tokens replayed, "
            "nothing sampled again); each set says how many and what changed. Later measurements grade them as "
            "they come.")


def arms_section(found: dict[tuple[str, str], Measured]) -> list[str]:
    lines = ["## Arms", "", "| Arm | Weights | Made by | Measured sets |", "|---|---|---|---|"]
    for name, a in ARMS.items():
        done = [s.name for s in SETS if (name, s.name) in found]
        status = (f"{len(done)} of {len(SETS)}" if done
                  else "not run" + (f" (needs {a['requires']})" if a.get("requires") else ""))
        weights = f"`{a['adapter']}`" if a.get("adapter") else "no adapter"
        lines.append(f"| `{name}`: {cell(a['label'])} | {weights}: {cell(a.get('about', ''))} | "
                     f"{cell('`' + a['made_by'] + '`') if a.get('made_by') else '-'} | {status} |")
    return lines + [""]


def sets_section(found: dict[tuple[str, str], Measured]) -> list[str]:
    lines = ["## Sets", "", "| Set | Env | Tasks | Reply tokens | Replies per episode | Why this subset and budget |",
             "|---|---|---|---:|---:|---|"]
    for s in SETS:
        kwargs = ", ".join(f"{k}={v}" for k, v in s.env_kwargs.items())
        env = f"`{s.env}`" + (f" ({kwargs})" if kwargs else "")
        measured = any(name == s.name for _, name in found)
        needs = f" Runs once the env supports it ({s.requires})." if s.requires and not measured else ""
        lines.append(f"| {cell(s.label)} | {env} | {s.subset} | {s.max_new_tokens} | {s.max_turns} | "
                     f"{cell(s.why)}.{needs} |")
    return lines + [""]


def scores_section(s: TransferSet, found: dict[tuple[str, str], Measured]) -> list[str]:
    lines = [f"### {s.label}", "",
             row("Arm", "Score [95% interval]", "Called a tool", "Final reply parsed", "Tasks", "Measured at"),
             "|---|---|---:|---:|---:|---|"]
    notes: list[str] = []
    regraded: list[str] = []
    for name in ARMS:
        m, label = found.get((name, s.name)), TRANSFER.label(name)
        if m is None:
            lines.append(row(cell(label), "not run", "", "", "", ""))
            continue
        rows, meta = m["rows"], m["meta"]
        limit = f" (**smoke test, first {meta['limit']}: not a result**)" if meta.get("limit") else ""
        lines.append(f"| {cell(label)} | {score_cell(rows)} | {100 * share(rows, 'called_tool'):.1f}% | "
                     f"{100 * share(rows, 'format_ok'):.1f}% | {len(rows)}{limit} | {commit_text(meta)} |")
        if note := why_zero(label, rows):
            notes.append(f"- {note}.")
        if text := regraded_text(label, meta, rows):
            regraded.append(text)
    if regraded:
        notes.append("- Re-graded replies cut by the token budget (scored 0 ungraded when measured; see above): "
                     + "; ".join(regraded) + ".")
    return lines + [""] + (notes + [""] if notes else [])


def judgements(found: dict[tuple[str, str], Measured]) -> list[tuple[Comparison, TransferSet, Any]]:
    """Each declared comparison on each set: its :class:`harness.data.Judgement`, or why there is none (a
    string: "not run", "not comparable (different tasks)")."""
    out: list[tuple[Comparison, TransferSet, Any]] = []
    for c in COMPARISONS:
        for s in SETS:
            a, b = found.get((c.a, s.name)), found.get((c.b, s.name))
            if a is None or b is None:
                out.append((c, s, "not run"))
                continue
            scores = {c.a: {r["id"]: float(r["score"]) for r in a["rows"]},
                      c.b: {r["id"]: float(r["score"]) for r in b["rows"]}}
            if set(scores[c.a]) != set(scores[c.b]):
                out.append((c, s, "not comparable (different tasks)"))
                continue
            [(_, j)] = judged(scores, [c], incomparable=frozenset({c.a}) if cross_run(c) else frozenset())
            out.append((c, s, j))
    return out


def cross_run(c: Comparison) -> bool:
    """Whether the comparison's two arms come from different training runs (other data, another cold start): it is
    shown with no verdict, as the learning pages show such rows."""
    def run(name: str) -> tuple[str, dict[str, Any]]:
        return TRANSFER.arm(name).get("made_by", ""), TRANSFER.settings(name)

    return run(c.a) != run(c.b)


def short_verdict(j: Any) -> str:
    if not j.comparable:
        return "no verdict"
    return "tie" if j.tie else j.verdict


def pair_note(found: dict[tuple[str, str], Measured], c: Comparison) -> str:
    """What the summary says of a comparison's pair: that it crosses runs (no verdict), or what arm ``c.a`` had
    beyond arm ``c.b`` when it is ``c.b`` trained further in the same run (its run's algorithm, steps and lr, from
    the records' ``adapter_run``): such a comparison is not time-matched."""
    if cross_run(c):
        return " (from another run, with other training data and another cold start: no verdict)"
    run = next((m["meta"].get("adapter_run") or {} for (name, _), m in found.items() if name == c.a), {})
    if not run.get("algo") or not run.get("steps"):
        return ""
    lr = f"{run['lr']:.1e}".replace("e-0", "e-")
    return (f" (A is B trained further in the same run: {run['steps']} {run['algo'].upper()} steps at lr {lr}; "
            "more training, not the same time)")


def summary_section(found: dict[tuple[str, str], Measured]) -> list[str]:
    """One line per comparison (every measured set's difference, interval and verdict) and the arms that score 0
    on every set they were measured on."""
    labels = {name: TRANSFER.label(name) for name in ARMS}
    lines = ["## Summary", "", "Computed from the records on this page (A - B in points, 95% interval, verdict; smoke "
             "tests left out):", ""]
    by_pair: dict[Comparison, list[tuple[TransferSet, Any]]] = {}
    for c, s, j in judgements(found):
        smoke = any((found.get((name, s.name)) or {}).get("meta", {}).get("limit") for name in (c.a, c.b))
        by_pair.setdefault(c, []).append((s, "smoke test" if smoke and not isinstance(j, str) else j))
    for c, results in by_pair.items():
        judged_ = [f"{s.label} {j.difference:+.1f} [{j.low:+.1f}, {j.high:+.1f}] {short_verdict(j)}"
                   for s, j in results if not isinstance(j, str)]
        rest = [s.label for s, j in results if isinstance(j, str)]
        text = "; ".join(judged_) if judged_ else "not measured yet"
        if judged_ and rest:
            text += f"; not judged: {', '.join(rest)}"
        further = pair_note(found, c)
        lines.append(f"- **{labels[c.a]} vs {labels[c.b]}**{further}: {text}.")
    for arm_ in ARMS:
        mine = [m for (name, _), m in found.items() if name == arm_ and not m["meta"].get("limit")]
        if mine and all(share(m["rows"], "score") == 0 for m in mine):
            lines.append(f"- **{labels[arm_]}** scores 0 on every set it was measured on ({len(mine)}): the "
                         "call and format columns below say why.")
    return lines + [""]


def comparisons_section(found: dict[tuple[str, str], Measured]) -> list[str]:
    labels = {name: TRANSFER.label(name) for name in ARMS}
    lines = ["## Comparisons", "",
             "Each row pairs two arms over the same tasks of one set: A - B in points with its paired bootstrap 95% "
             "interval over tasks, the tasks where they differ (A right and B wrong, B right and A wrong) and the "
             f"verdict against the goal A > B; {TIE_RULE}.", "",
             "| Set | A | B | A | B | A - B [95% interval] | Tasks A / B | Verdict |",
             "|---|---|---|---:|---:|---|---|---|"]
    for c, s, j in judgements(found):
        head = [cell(s.label), cell(labels[c.a]), cell(labels[c.b])]
        if isinstance(j, str):
            lines.append(row(*head, "", "", j, "", ""))
            continue
        lines.append(row(*head, f"{j.a:.1f}%", f"{j.b:.1f}%", f"{j.difference:+.1f} [{j.low:+.1f}, {j.high:+.1f}]",
                         f"{j.better} / {j.worse}", verdict(j)))
    return lines + [""]


def redos_section(data: Path, found: dict[tuple[str, str], Measured]) -> list[str]:
    later = redos(data)
    if not later:
        return []
    lines = ["## Measured again", "",
             "Each benchmark figure above is its (arm, set)'s first measurement; these later ones were kept beside "
             "it and are not used:", ""]
    for a_name, s_name, path, m in later:
        first = found.get((a_name, s_name))
        was = f" (first: {100 * share(first['rows'], 'score'):.1f}%)" if first else ""
        lines.append(f"- `{a_name}` on `{s_name}`: {100 * share(m['rows'], 'score'):.1f}%{was}, "
                     f"{commit_text(m['meta'])}, `{shown(path)}`.")
    return lines + [""]


def ledger_section(ledger: Path) -> list[str]:
    """Every evaluation of a transfer set the ledger holds (``transfer/<set>`` rows), one line per set, arm and
    adapter: how many times it was evaluated and its scores (more than one: measured again)."""
    rows = [r for r in read_ledger(ledger) if str(r.get("set", "")).startswith("transfer/")]
    lines = ["## The ledger", "",
             f"Every evaluation of these sets recorded in `{shown(ledger)}` (smoke tests are not recorded), in the "
             "order they ran, with the scores as graded when they ran (a re-grade of cut replies, noted under the "
             "set's scores above, adds no row). An arm `axes:<model>` is an adapter of the generalisation-axes "
             "experiment, whose scores are on [the learning page](learning.md) beside its other sets:", ""]
    if not rows:
        return lines + ["None yet.", ""]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["set"].removeprefix("transfer/"), str(r.get("arm")), str(r.get("adapter"))), []).append(r)
    lines += [row("Set", "Arm", "Adapter", "Tasks", "Evaluations", "Scores"), "|---|---|---|---:|---:|---|"]
    for (set_name, arm_name, adapter), rs in groups.items():
        scores = ", ".join(f"{100 * (r.get('scores') or {}).get('average_at_n', 0.0):.1f}%" for r in rs)
        times = f"**{len(rs)}**" if len(rs) > 1 else "1"
        lines.append(row(f"`{set_name}`", f"`{arm_name}`", f"`{adapter}`", str(rs[0].get("tasks")), times, scores))
    return lines + [""]


def render(data: Path = TRANSFER_DATA, ledger: Path = LEDGER) -> str:
    """The page's Markdown from the records in ``data`` and the ledger ``ledger``."""
    found = measurements(data)
    packages = ", ".join(f"{k} {v}" for k, v in PACKAGES.items())
    lines = ["# Transfer: training here, measured on public benchmarks", "",
             "Does training on this project's envs carry over to tools and tasks nobody here wrote? Each arm (a set "
             "of weights) is scored on BFCL, tau2-bench and HumanEval by each benchmark's own data and checker "
             f"({packages}). Generated by `python benchmarks/transfer.py --page` from the committed records in "
             f"`{shown(data)}/` only. The arms, sets, task subsets and decoding were declared in "
             "`benchmarks/harness/transfer.py` before anything was evaluated; nothing was tuned on these benchmarks "
             "and each figure is measured once per configuration.", "",
             f"Decoding: one greedy episode per task (temperature {DECODING['temperature']:g}, seed "
             f"{DECODING['seed']}), tool calls in the format the chat template teaches; a task's score is 1 when "
             "the benchmark's checker counts it correct. The score interval is a bootstrap over tasks; with few "
             "tasks (tau2-bench mock has 6) it is wide.", ""]
    lines += summary_section(found) + arms_section(found) + sets_section(found)
    lines += ["## Scores", "",
              "Per set: the score, the share of episodes that called a tool and the share whose final reply parsed "
              "in the expected format (a 0 with no tool call is a model that never called; a 0 with calls is one "
              "whose calls the checker rejected)." + regrade_sentence(found), ""]
    for s in SETS:
        lines += scores_section(s, found)
    lines += comparisons_section(found) + redos_section(data, found) + ledger_section(ledger)
    return "\n".join(lines).rstrip("\n") + "\n"


def write_page(data: Path = TRANSFER_DATA, page: Path = TRANSFER_PAGE, ledger: Path = LEDGER) -> Path:
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(data, ledger), encoding="utf-8")
    return page
