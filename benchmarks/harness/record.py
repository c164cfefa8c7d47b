"""One experiment record (issue 58, step 1): every committed experiment of the harness as the same
:class:`Record` — its recipe, arms x seeds, sets and decoding, how it is judged, and the notes the pages carry
beside its figures — keyed by the folder of its committed data (``docs/results/data/<name>/``).

``python benchmarks/experiment.py run|status|page NAME`` looks a record up here (:func:`record`). The records are
made from today's declarations by one adapter each (:func:`from_learning`, :func:`from_comparison`,
:func:`from_axes`, :func:`from_transfer`); a record's :attr:`Record.kind` names the runner and the page section
that still serve it until the one piece runner and the one page module replace them. The notes that used to be
three tables keyed by folder name (undeclared runs, diagnostics, run notes) are each record's own fields:
:attr:`Record.undeclared`, :attr:`Record.diagnostic`, :attr:`Record.note`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from harness import experiments as ex
from harness import transfer as tr
from harness.experiments import Comparison

#: The runners and page sections a record's kind is served by today.
KINDS = ("learning", "comparison", "axes", "transfer")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Arm:
    """One row of an experiment: a set of weights, or a stage of a learning run, trained with its settings."""

    name: str
    label: str = ""
    settings: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """What it changes on top of the recipe (``MainJobConfig`` keys, dotted; never notes)."""
    algo: str = ""
    """The algorithm that trains it (empty: none, or the recipe's)."""
    about: str = ""
    adapter: str | None = None
    """The adapter folder a stated command makes (public-benchmark arms)."""
    made_by: str = ""
    requires: str = ""
    """What must exist before it runs (empty: runnable now)."""


@dataclass(frozen=True)
class Record:
    """One experiment: what runs, on what, judged how, and what the pages must say beside its figures."""

    name: str
    """Its folder of committed data under ``docs/results/data/`` and its name on the command line."""
    kind: str
    """Which of :data:`KINDS` runs it and renders its section today."""
    env: str
    recipe: Mapping[str, Any]
    """Settings every arm starts from (``MainJobConfig`` keys, dotted as on the command line)."""
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    sets: tuple[str, ...]
    """The fixed sets every arm is evaluated on (``benchmarks/heldout/<name>.jsonl``, ``train`` for the
    train-split sample, or a public benchmark set of :mod:`harness.transfer`)."""
    decoding: Mapping[str, Any]
    judge: tuple[Comparison, ...] = ()
    """The judged comparisons (row or arm ``a`` against ``b``)."""
    rule: str = ""
    """How it is judged, in words (the goal, the primary comparison, the decision rule)."""
    title: str = ""
    page: str = "learning.md"
    """The page under ``docs/results/`` that shows it."""
    undeclared: bool = False
    """Its settings were not declared in a commit before it ran."""
    diagnostic: str = ""
    """Why it is a diagnostic or failed configuration (shows why something broke, not how methods compare)."""
    note: str = ""
    """Selection its own figures do not show, which its section must state."""
    runnable: bool = True
    """False for a run kept for its data whose declaration was replaced (nothing would run it again)."""
    pending: str = ""
    """Why it may not run yet (a setting another declared experiment decides first); empty: it may run."""
    source: Any = field(default=None, compare=False, repr=False)
    """The declaration it was made from, which today's runner reads."""

    def arm(self, name: str) -> Arm:
        """The declared arm ``name``; ValueError naming the declared ones."""
        for a in self.arms:
            if a.name == name:
                return a
        raise ValueError(f"{self.name}: no arm {name!r} (declared: {', '.join(a.name for a in self.arms)})")


# --------------------------------------------------------------------------------------------- the notes
#: Runs whose settings were not declared in a commit before they ran (issue 45; ../shared/RESULTS-AUDIT.md §3-4).
_UNDECLARED = frozenset({"tooluse", "tooluse_guided", "tooluse_v2", "search", "tooluse_relift", "tooluse_credit",
                         "tooluse_vllm", "pythonmath", "compare_algorithms_lr2e-4"})
#: Diagnostics and failed configurations: the pages list them in a section of their own, each with this reason.
_DIAGNOSTIC = MappingProxyType({
    "tooluse_relift": "at lr 2e-4 the demonstration term outweighs each GRPO token by orders of magnitude: the row "
                      "measures SFT on a few chain demonstrations per step, not ReLIFT",
    "tooluse_credit": "the collapse of add_multiply at lr 2e-4 (the same happened without credit in vllm and "
                      "chains); one seed, confounded with the learning rate",
    "tooluse_vllm": "a check of the vLLM engine (sampler and trainer agree), with no SFT control; its loss is the "
                    "lr 2e-4 collapse of add_multiply, and its cold start differs from the plain recipe's",
    "tooluse_chains": "GRPO collapsed on rollouts weighted towards the three-call chain",
    "compare_algorithms_lr2e-4": "the algorithms at the main job's default GRPO lr of 2e-4, which collapsed after "
                                 "one update",
})
#: Notes a section must carry (selection the section's own figures do not show).
_NOTES = MappingProxyType({
    "compare_algorithms": "GRPO's lr 6e-5 here was chosen by looking at tooluse_v3, the set this comparison reports "
                          "on: its GRPO figures are selected, not held-out, figures",
    "tooluse_chains": "designed after reading tooluse_v4's lr2e-5 results, and judged on tooluse_v4",
    "tooluse_sft48": "designed after reading tooluse_v4's lr2e-5 results, and judged on tooluse_v4; its control "
                     "degraded",
})


def _notes(name: str) -> dict[str, Any]:
    return {"undeclared": name in _UNDECLARED, "diagnostic": _DIAGNOSTIC.get(name, ""), "note": _NOTES.get(name, "")}


def _dotted(overrides: tuple[str, ...]) -> dict[str, str]:
    """``("a.b=1", ...)`` -> ``{"a.b": "1"}`` (the command line's overrides, values as written)."""
    return dict(o.split("=", 1) for o in overrides)


# ------------------------------------------------------------------------------------------- the adapters
#: A learning run's row labels -> its arms: the folders of their records (``<arm>-s<seed>/<set>.jsonl``).
LEARNING_ARMS: Mapping[str, str] = MappingProxyType({
    ex.BASE: "base", ex.COLD_START: "sft", ex.RL: "rl", ex.CONTROL: "sft_control",
    **{label: f"{stage}_text_only" for stage, label in ex.TEXT_LABELS.items()}})


def from_learning(exp: ex.Experiment, variant: ex.Variant | None = None) -> Record:
    """A proof-of-learning run (``benchmarks/learning.py``): the main job's stages and its controls are the
    arms, one seed, the experiment's (or the variant's) fixed set."""
    arm = LEARNING_ARMS.__getitem__
    rows = [Arm(arm(ex.BASE), ex.BASE), Arm(arm(ex.COLD_START), ex.COLD_START, algo="sft"),
            Arm(arm(ex.RL), ex.RL, algo="grpo"),
            Arm(arm(ex.CONTROL), ex.CONTROL, algo="sft", about="the cold start trained further with SFT for the "
                                                               "GRPO stage's wall time")]
    if exp.text_only_baseline:
        rows.append(Arm(arm(ex.TEXT_ONLY_BASE), ex.TEXT_ONLY_BASE, {"tools_enabled": False}))
    if exp.text_only_pipeline:
        rows += [Arm(arm(label), label, {"tools_enabled": False}) for label in ex.TEXT_LABELS.values()]
    name = exp.name if variant is None else f"{exp.name}_{variant.name}"
    recipe = {**exp.full, **(_dotted(variant.overrides) if variant else {})}
    heldout = (variant.heldout if variant else None) or exp.heldout
    return Record(
        name=name, kind="learning", env=exp.env, recipe=MappingProxyType(recipe), arms=tuple(rows), seeds=(0,),
        sets=(heldout,), decoding=MappingProxyType({"n": recipe.get("eval_n", 1),
                                                    "temperature": recipe.get("eval_temperature", 0.0)}),
        judge=exp.comparisons, rule=exp.goal,
        title=exp.title if variant is None else f"{exp.title}: {variant.about}", **_notes(name),
        source=(exp, variant))


def from_comparison(cmp: ex.AlgorithmComparison, name: str = "compare_algorithms", runnable: bool = True) -> Record:
    """The algorithms side by side (``benchmarks/compare_algorithms.py``): each algorithm and option an arm."""
    arms = [Arm(a, cmp.label(a), algo=a) for a in cmp.algos]
    arms += [Arm(o.name, o.label, MappingProxyType(dict(o.settings)), algo=o.algo) for o in cmp.options]
    return Record(
        name=name, kind="comparison", env=cmp.env, recipe=MappingProxyType({}), arms=tuple(arms), seeds=(0, 1),
        sets=(cmp.heldout,), decoding=MappingProxyType({"n": 1, "temperature": 0.0}),
        rule="each algorithm against the cold start, for the same training wall time, on the fixed set",
        title="The algorithms side by side", runnable=runnable, **_notes(name), source=cmp)


def from_axes(exp: ex.AxesExperiment) -> Record:
    """A pre-declared experiment run in resumable pieces (``benchmarks/axes.py``): its arms without the notes
    that sat among their settings (``algo``, ``about``)."""
    arms = tuple(Arm(a, settings=MappingProxyType({k: v for k, v in s.items() if k not in ("algo", "about")}),
                     algo=s.get("algo", a), about=s.get("about", "")) for a, s in exp.arms.items())
    sets = (*exp.sets, "train", *exp.transfer)
    budget = {"minutes": exp.minutes} if exp.steps is None else {"steps": exp.steps}
    return Record(
        name=exp.name, kind="axes", env=exp.env,
        recipe=MappingProxyType({"env_kwargs": dict(exp.env_kwargs), **exp.cold_start, **budget}), arms=arms,
        seeds=exp.seeds, sets=sets, decoding=MappingProxyType({"greedy": exp.greedy, "sampled": exp.sampled}),
        rule="; ".join(x for x in (exp.primary, exp.judge) if x), pending=exp.pending, **_notes(exp.name),
        source=exp)


def from_transfer() -> Record:
    """The public-benchmark transfer experiment (``benchmarks/transfer.py``): each set of weights an arm, every
    declared benchmark set evaluated once per arm."""
    arms = tuple(Arm(a.name, a.label, a.settings, about=a.about, adapter=a.adapter, made_by=a.made_by,
                     requires=a.requires) for a in tr.ARMS)
    return Record(
        name=tr.TRANSFER_DATA.name, kind="transfer", env="", recipe=MappingProxyType({}), arms=arms, seeds=(0,),
        sets=tuple(s.name for s in tr.SETS), decoding=tr.DECODING, judge=tr.COMPARISONS,
        rule="each trained arm above the weights it started from, per set (the learning pages' tie rule)",
        title="Transfer to public benchmarks", page=tr.TRANSFER_PAGE.name, **_notes(tr.TRANSFER_DATA.name),
        source=tr)


def _all() -> tuple[Record, ...]:
    out = []
    for exp in ex.EXPERIMENTS:
        out += [from_learning(exp), *(from_learning(exp, v) for v in exp.variants)]
    # the comparison before GRPO's lr became 6e-5, kept for its data (its settings are in its compare.json)
    out += [from_comparison(ex.COMPARE), from_comparison(ex.COMPARE, "compare_algorithms_lr2e-4", runnable=False)]
    out += [from_axes(e) for e in ex.RUNNABLE.values()]
    return (*out, from_transfer())


#: Every experiment, by name (its data folder).
RECORDS: Mapping[str, Record] = MappingProxyType({r.name: r for r in _all()})


def record(name: str) -> Record:
    """The record ``name``; ValueError naming the declared ones."""
    if name not in RECORDS:
        raise ValueError(f"no experiment {name!r}; declared: {', '.join(RECORDS)}")
    return RECORDS[name]


def undeclared(name: str) -> bool:
    """Whether the run in data folder ``name`` was not declared before it ran (a ``_quick`` run's folder names
    no record: it carries no notes)."""
    return name in RECORDS and RECORDS[name].undeclared


def diagnostic(name: str) -> str:
    """Why the run in data folder ``name`` is a diagnostic (empty: it is not one)."""
    return RECORDS[name].diagnostic if name in RECORDS else ""


def note(name: str) -> str:
    """The note the section of the run in data folder ``name`` must carry (empty: none)."""
    return RECORDS[name].note if name in RECORDS else ""
