"""One experiment record (issue 58, step 1): every experiment of the harness is declared as one :class:`Record` —
its recipe, arms x seeds, sets and decoding, how it is judged, and the notes the pages carry beside its figures —
named by the folder of its committed data (``docs/results/data/<name>/``).

The declarations are :mod:`harness.experiments` (the learning runs, the algorithms comparison, the pre-declared
experiments run in pieces) and :mod:`harness.transfer` (the public-benchmark transfer); ``harness.experiments.RECORDS``
holds them all by name, and ``python benchmarks/experiment.py run|status|page NAME`` looks one up there. A record's
:attr:`Record.kind` names the runner and the page section that serve it until one piece runner replaces them; the
fields a kind does not use keep their defaults.

An arm is a mapping: its settings (config keys, dotted as on the command line) and its notes (:data:`NOTES`:
``algo``, ``label``, ``about``, ...), written with :func:`make_arm`; :meth:`Record.settings` strips the notes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: The runners and page sections a record's kind is served by today.
KINDS = ("learning", "comparison", "axes", "transfer")
#: Keys of an arm that are notes about it, not settings of its training run.
NOTES = ("algo", "about", "label", "former_label", "option", "adapter", "made_by", "requires")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Any:
    return field(default_factory=lambda: _EMPTY)


def make_arm(settings: Mapping[str, Any] | None = None, **notes: Any) -> Mapping[str, Any]:
    """An arm: its notes (:data:`NOTES`; ValueError naming an unknown one), then ``settings``."""
    unknown = sorted(set(notes) - set(NOTES))
    if unknown:
        raise ValueError(f"arm notes {unknown} are not notes (choose from {', '.join(NOTES)}); settings go in "
                         f"the settings mapping")
    return MappingProxyType({**notes, **(settings or {})})


@dataclass(frozen=True)
class Comparison:
    """A judged comparison: row (or arm) ``a`` against ``b`` on the set's primary metric, with the goal
    ``a - b >= goal`` points (``strict``: ``a - b > goal``)."""

    a: str
    b: str
    goal: float
    strict: bool = False

    @property
    def goal_text(self) -> str:
        """The goal as a table cell: ``>= +15``, ``> +0``."""
        return f"> +{self.goal:g}" if self.strict else f">= +{self.goal:g}"

    @property
    def prose(self) -> str:
        """The goal as a sentence part: ``RL (GRPO) >= SFT (cold start) + 15 points``."""
        points = f" + {self.goal:g} points" if self.goal else ""
        return f"{self.a} {'>' if self.strict else '>='} {self.b}{points}"


@dataclass(frozen=True)
class Record:
    """One experiment: what runs, on what, judged how, and what the pages must say beside its figures. Declared
    before it runs; a change to a setting is a new commit of its declaration made before the run it changes."""

    name: str
    """Its folder of committed data under ``docs/results/data/`` and its name on the command line."""
    kind: str
    """Which of :data:`KINDS` runs it and renders its section today."""
    env: str
    arms: Mapping[str, Mapping[str, Any]]
    """Arm -> its settings and notes (:func:`make_arm`). Its folder of records is ``<arm>-s<seed>/``."""
    seeds: tuple[int, ...] = (0,)
    sets: tuple[str, ...] = ()
    """The fixed sets every arm is evaluated on: held-out sets (``benchmarks/heldout/<name>.jsonl``), or a transfer
    record's public benchmark sets (:data:`harness.transfer.SETS`)."""
    env_kwargs: Mapping[str, Any] = _empty()
    cold_start: Mapping[str, Any] = _empty()
    """``MainJobConfig`` settings (dotted keys) of the cold start every arm shares (kind ``axes``)."""
    train_families: tuple[str, ...] = ()
    """What every arm's continued training draws from (empty: every family)."""
    minutes: float = 0.0
    """Training wall time of each (arm, seed), evaluation not counted."""
    steps: int | None = None
    """A step budget per (arm, seed) instead of :attr:`minutes` (None: wall time decides)."""
    greedy: Mapping[str, Any] = _empty()
    """pass@1: one greedy episode per task (a transfer record: its decoding, shared by every set)."""
    sampled: Mapping[str, Any] = _empty()
    """pass@k and pass^k (k = 1 ... n): n episodes per task at this temperature (empty: none)."""
    primary: str = ""
    """The headline comparison of each set; the tie rule and the seed spread are the pages' (harness.data)."""
    judge: str = ""
    """How it decides (stated before it runs), where it decides more than :attr:`primary` says."""
    comparisons: tuple[Comparison, ...] = ()
    """The judged comparisons (row or arm ``a`` against ``b``)."""
    train_sample: int = 32
    """Tasks of the fixed train-split sample (the arms' families, drawn with :attr:`train_sample_seed`): every
    adapter and the cold start are evaluated on it greedily, and the mean per-token KL(adapter || base) on those
    greedy replies is recorded beside it (the forgetting item; ``agentrl.algos.evaluation.kl``)."""
    train_sample_seed: int = 12345
    transfer: tuple[str, ...] = ()
    """Public benchmark sets (:data:`harness.transfer.SETS` names) the cold start and every adapter are also
    evaluated on, with the transfer declaration's tasks and decoding (one greedy episode per task: pass@1 only),
    graded by the benchmark's own checker."""
    train_sampled: bool = False
    """Also evaluate the train-split sample with :attr:`sampled`'s settings (pass@1 at its temperature)."""
    sampled_sets: tuple[str, ...] | None = None
    """The sets evaluated with :attr:`sampled`'s settings too (None: every set but the public benchmark ones)."""
    cut_updates: int | None = None
    """The equal-updates cut: each cell also keeps its adapter after this many weight-changing updates, evaluated
    greedily on every set beside the final one (fewer updates in the cell: its final adapter, said on the page)."""
    pending: str = ""
    """Why it may not run yet (a setting another declared experiment decides, set in a commit before it runs)."""
    # --- a learning run (kind "learning": the main job and its controls, ``benchmarks/learning.py``)
    title: str = ""
    """Its page section's title."""
    full: Mapping[str, Any] = _empty()
    """``MainJobConfig`` overrides of the full run, keys dotted as on the command line (``stages.rl.steps``)."""
    quick: Mapping[str, Any] = _empty()
    """``MainJobConfig`` overrides of ``--quick`` (CI-sized budgets: a smoke test, not a result)."""
    first_set: str = ""
    """The env's first (v1) set: burnt (settings were chosen on it), kept to re-derive old figures."""
    metric: str = ""
    """What the goals' points are of (the set's primary metric, in words)."""
    also: str = ""
    """Parts of the goal no comparison row judges (read from the per-family tables)."""
    variant: str = ""
    """A variant of a learning run's recipe (``learning.py --variant NAME``; its record is ``<plain>_<NAME>``)."""
    overrides: tuple[str, ...] = ()
    """A variant's ``MainJobConfig`` ``key=value`` overrides on top of the plain recipe's (the command line's after)."""
    # --- the algorithms comparison (kind "comparison", ``benchmarks/compare_algorithms.py``)
    quick_tasks: int = 0
    """Tasks of the fixed set a ``--quick`` comparison evaluates."""
    sections: Mapping[str, tuple[str, ...]] = _empty()
    """Section settings every run starts from (the command line's ``ppo.*`` / ``dpo.*`` come after and win)."""
    # --- the notes the pages carry beside its figures
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

    def samples(self, target: str) -> bool:
        """Whether set ``target`` is evaluated with :attr:`sampled`'s settings (pass@k, pass^k) beside greedy."""
        return bool(self.sampled) and target not in self.transfer and (
            self.sampled_sets is None or target in self.sampled_sets)

    def arm(self, name: str) -> Mapping[str, Any]:
        """The declared arm ``name``; ValueError naming the declared ones."""
        if name not in self.arms:
            raise ValueError(f"{self.name}: no arm {name!r} (declared: {', '.join(self.arms)})")
        return self.arms[name]

    def settings(self, arm: str) -> dict[str, Any]:
        """Arm ``arm``'s settings without its notes."""
        return {k: v for k, v in self.arm(arm).items() if k not in NOTES}

    def algo(self, arm: str) -> str:
        """The algorithm that trains ``arm`` (its ``algo`` note, else its name)."""
        return str(self.arm(arm).get("algo", arm))

    def label(self, arm: str) -> str:
        """The row label of an arm (its name when it declares none, or is not declared)."""
        return str(self.arms.get(arm, _EMPTY).get("label", arm))

    def labels_of(self, summary: Mapping[str, Any]) -> dict[str, str]:
        """Row labels of a comparison's ``compare.json``: the ones it recorded, else (written before it recorded
        them) the labels of that time (an arm's ``former_label``)."""
        recorded = summary.get("labels") or {}
        return {a: recorded.get(a) or self.arms.get(a, _EMPTY).get("former_label") or self.label(a)
                for a in summary["runs"]}

    @property
    def algos(self) -> tuple[str, ...]:
        """A comparison's algorithms (its default ``--algos``): the arms that are not options."""
        return tuple(a for a, s in self.arms.items() if not s.get("option"))

    @property
    def options(self) -> tuple[str, ...]:
        """A comparison's options: arms run only when ``--algos`` names them."""
        return tuple(a for a, s in self.arms.items() if s.get("option"))

    @property
    def heldout(self) -> str:
        """A learning run's or comparison's fixed held-out set (its one set)."""
        return self.sets[0]

    @property
    def text_only_baseline(self) -> bool:
        """A learning run that evaluates the base model with the env's tools off (a row of its own)."""
        return "base_text_only" in self.arms and not self.text_only_pipeline

    @property
    def text_only_pipeline(self) -> bool:
        """A learning run that runs the whole pipeline a second time with the tools off (ReTool's comparison)."""
        return "rl_text_only" in self.arms

    @property
    def goal(self) -> str:
        """A learning run's goal in prose, derived from :attr:`comparisons` (and :attr:`also`)."""
        parts = [c.prose + (f" of {self.metric}" if i == 0 else "") for i, c in enumerate(self.comparisons)]
        return "; ".join(parts + ([self.also] if self.also else [])) + "."

    @property
    def evaluated(self) -> tuple[str, ...]:
        """Every set an arm is evaluated on: :attr:`sets`, then (kind ``axes``) the train-split sample and the
        public benchmark sets."""
        return (*self.sets, "train", *self.transfer) if self.kind == "axes" else self.sets
