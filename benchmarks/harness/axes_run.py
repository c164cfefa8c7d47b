"""The runner of the pre-declared experiments :data:`harness.experiments.AXES` and ``LR_CHOICE``
(``benchmarks/axes.py``), in resumable pieces that accumulate across sessions.

A *piece* is one unit of work under ``docs/results/data/<experiment>/``, in the one layout of every experiment
(``<arm>-s<seed>/<set>.jsonl`` beside its meta):

* ``cold_start`` — the shared cold start (the main job's SFT stage with the declaration's settings), once: the
  folder ``cold_start/`` with its ``meta.json`` and training ``metrics.jsonl``;
* ``<arm>-s<seed>`` — one (arm, seed) cell: the cold start trained further for the declared wall time (or steps),
  the folder ``<arm>-s<seed>/`` with its ``meta.json`` and ``metrics.jsonl``;
* ``<model>/<set>-<mode>`` — one evaluation of the cold start or a cell's adapter on one declared set, ``greedy``
  (pass@1) or ``sampled`` (N tries: pass@k and pass^k), in its model's folder: ``<set>-<mode>.jsonl`` (per-task
  records) beside ``<set>-<mode>.meta.json``; ``<model>/train-greedy`` is the fixed train-split sample, with the
  mean per-token KL(adapter || base) on those replies (``agentrl.algos.evaluation.kl``);
  ``<model>/<benchmark set>-greedy`` one on a declared public benchmark set (``Record.transfer``), with the
  transfer declaration's tasks and decoding (:mod:`harness.transfer`);
* ``<arm>-s<seed>/<set>-cut-greedy`` — with ``Record.cut_updates`` (the equal-updates cut) only: one
  greedy evaluation of the cell's cut adapter (saved right after its U-th weight-changing update, or its final
  adapter when it made fewer; :func:`is_update`) on the train-split sample and on every declared set, public
  benchmark sets included; the cell's meta records the cut (``cut``: step, training seconds, adapter sha256).

A piece is finished when its meta exists (written last: commit, config, machine, wall time, summary). Finished
pieces are skipped, a piece without its meta (a killed one) is redone whole, and with a budget the runner stops
before a piece whose estimated time (the mean of finished pieces of its kind, else :data:`PRIOR_SECONDS`) does
not fit in what is left. Adapters (about 20 MB each) stay in the work folder (``runs/<experiment>/``, not
committed); a cell's evaluations need its adapter there. A finished cold start whose adapter is missing (a new
checkout) is trained again and used only if it hashes to the recorded adapter."""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import export
from harness.data import load_json, read_pieces
from harness.experiments import RUNNABLE
from harness.layout import cell, meta_file
from harness.record import Record

logger = logging.getLogger("axes")

#: Seconds a piece of each kind is expected to take before any has run on this machine: from the committed runs'
#: timings on the 2-core AMD EPYC without bf16 (fp32): the 48-step cold start of ``tooluse_sft48`` 1150 s; an
#: evaluation of 128 tasks about 80 s greedy (``tooluse_sft48``: 2085 s in all, 1766 s of it training, for 4
#: evaluations); 8 tries at temperature 0.7 about 8 times that; a cell its budget plus loading and saving.
PRIOR_SECONDS = {"cold_start": 1150.0, "eval:greedy": 80.0, "eval:sampled": 640.0, "eval:train": 60.0,
                 "eval:train-sampled": 240.0,  # 4 tries at temperature 1 of the 128 train-split tasks
                 # a public benchmark set: the transfer runs' BFCL simple_python, 400 tasks in 197 s (bf16)
                 "eval:transfer": 200.0,
                 # a learning run's pieces (harness.learning_exec): an evaluation of the 128 tasks, the main job's
                 # 16-step cold start (14.4 min in the committed comparison), its GRPO stage and the SFT control
                 # for the GRPO stage's time (tooluse's full run: 26 min in all on a 2-core Xeon with AMX)
                 "learning:eval": 80.0, "learning:sft": 900.0, "learning:rl": 1200.0, "learning:control": 1200.0,
                 # the algorithms comparison's (harness.compare_exec): its cold start, an evaluation of 128 tasks
                 "compare:cold_start": 900.0, "compare:eval": 80.0}
CELL_OVERHEAD_SECONDS = 60.0
#: A GRPO step of 8 tasks x 8 samples on that machine since the shared-prefix update (d019e38): ``tooluse_chains``
#: 124 s (8 steps in 993 s), ``tooluse_sft48`` 50 s (6 steps in 298 s).
PRIOR_STEP_SECONDS = 120.0
TRAIN = "train"
#: The mode of an evaluation of a cell's equal-updates cut adapter (``<set>-cut-greedy``): greedy only.
CUT = "cut-greedy"


@dataclass(frozen=True)
class Piece:
    key: str
    """Its name under the experiment's data folder: a training piece's folder (``grpo-s0``), an evaluation's
    records without ``.jsonl`` (``grpo-s0/tooluse_v5-greedy``)."""
    kind: str
    """``cold_start``, ``cell:<arm>``, ``eval:greedy``, ``eval:sampled``, ``eval:train`` or ``eval:transfer``;
    an evaluation of a cell's equal-updates cut ``eval:cut-train``, ``eval:cut-greedy`` or ``eval:cut-transfer``."""
    needs: tuple[str, ...] = ()
    """Keys of the pieces it builds on (the adapter it evaluates or starts from)."""


def cell_name(arm: str, seed: int) -> str:
    return cell(arm, seed)


def parse_cells(text: str | None, exp: Record) -> list[tuple[str, int]]:
    """``"grpo:0,sft:1"`` -> ``[("grpo", 0), ("sft", 1)]``; None: every declared (arm, seed), seed by seed.
    ValueError naming the declared arms and seeds."""
    declared = [(a, s) for s in exp.seeds for a in exp.arms]
    if not text:
        return declared
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        arm, _, seed = item.partition(":")
        if arm not in exp.arms or not seed.isdigit() or int(seed) not in exp.seeds:
            raise ValueError(f"--cells: {item!r} is not a declared (arm:seed) of {exp.name}; arms "
                             f"{', '.join(exp.arms)}, seeds {', '.join(map(str, exp.seeds))} (e.g. grpo:0)")
        out.append((arm, int(seed)))
    return out


def modes(exp: Record) -> list[str]:
    return ["greedy"] + (["sampled"] if exp.sampled else [])


def eval_pieces(exp: Record, model: str, needs: tuple[str, ...], sets: Iterable[str]) -> list[Piece]:
    """The train-split sample, then each set in each mode; a public benchmark set (``exp.transfer``) greedy only."""
    pieces = [Piece(f"{model}/{TRAIN}-greedy", "eval:train", needs)]
    if exp.train_sampled:  # pass@1 at the sampled settings' temperature too (LR_EDGE's judge)
        pieces.append(Piece(f"{model}/{TRAIN}-sampled", "eval:train-sampled", needs))
    for s in sets:
        pieces += ([Piece(f"{model}/{s}-greedy", "eval:transfer", needs)] if s in exp.transfer else
                   [Piece(f"{model}/{s}-{m}", f"eval:{m}", needs) for m in modes(exp)
                    if m == "greedy" or exp.samples(s)])
    return pieces


def cut_pieces(exp: Record, model: str, needs: tuple[str, ...], sets: Iterable[str]) -> list[Piece]:
    """The evaluations of a cell's equal-updates cut adapter: the train-split sample, then each set (a public
    benchmark set too), greedy only."""
    def kind(s: str) -> str:
        return "eval:cut-" + ("train" if s == TRAIN else "transfer" if s in exp.transfer else "greedy")

    return [Piece(f"{model}/{s}-{CUT}", kind(s), needs) for s in (TRAIN, *sets)]


def is_update(metrics: dict[str, Any]) -> bool:
    """Whether a trainer step changed the weights: it took an optimizer step (``train/optimizer_steps``; a GRPO
    step whose groups all had equal rewards, or a rejection-sampling step with no correct sample, takes none). Every
    SFT step does."""
    return bool(metrics.get("train/optimizer_steps", 0))


def plan(exp: Record, cells: list[tuple[str, int]] | None = None, sets: list[str] | None = None
         ) -> list[Piece]:
    """Every piece of ``exp`` in running order: the cold start and its evaluations, then each cell followed by
    its evaluations, and those of its equal-updates cut when ``exp.cut_updates`` (``cells`` / ``sets``: a
    selection of the declared ones)."""
    declared = [*exp.sets, *exp.transfer]
    chosen = declared if sets is None else sets
    unknown = sorted(set(chosen) - set(declared))
    if unknown:
        raise ValueError(f"--sets: {', '.join(unknown)} not declared for {exp.name} (declared: "
                         f"{', '.join(declared) or 'none: the train-split sample only'})")
    pieces = [Piece("cold_start", "cold_start"), *eval_pieces(exp, "cold_start", ("cold_start",), chosen)]
    for arm, seed in parse_cells(None, exp) if cells is None else cells:
        key = cell_name(arm, seed)
        pieces += [Piece(key, f"cell:{arm}", ("cold_start",)),
                   *eval_pieces(exp, cell_name(arm, seed), ("cold_start", key), chosen)]
        if exp.cut_updates:
            pieces += cut_pieces(exp, key, ("cold_start", key), chosen)
    return pieces


def finished(data: Path) -> dict[str, dict[str, Any]]:
    """Key -> meta of every finished piece under ``data``."""
    return read_pieces(data)


def estimate(piece: Piece, done: dict[str, dict[str, Any]], exp: Record, minutes: float | None = None
             ) -> float:
    """Expected seconds of ``piece``: the mean wall time of the finished pieces of its kind; for a cell whose arm
    has none yet, of the finished cells of arms with the same algorithm (a learning rate does not change a step's
    time); else the prior. An evaluation of a cut with none of its kind finished: as one of the final adapter's
    (a cut that is its cell's final adapter copies that one's records, ``same_as``, and counts for no kind)."""
    seen = [m["wall_seconds"] for m in done.values() if m.get("kind") == piece.kind and "wall_seconds" in m
            and "same_as" not in m]
    if seen:
        return statistics.fmean(seen)
    if piece.kind.startswith("eval:cut-"):
        return estimate(Piece(piece.key, piece.kind.replace("cut-", "", 1)), done, exp, minutes)
    if piece.kind.startswith("cell:"):
        def algo(kind: Any) -> Any:
            arm = str(kind).removeprefix("cell:")
            return (exp.arms.get(arm) or {}).get("algo", arm)

        like = [m["wall_seconds"] for m in done.values() if "wall_seconds" in m
                and str(m.get("kind")).startswith("cell:") and algo(m["kind"]) == algo(piece.kind)]
        if like:
            return statistics.fmean(like)
        budget = exp.steps * PRIOR_STEP_SECONDS if exp.steps else 60 * (exp.minutes if minutes is None else minutes)
        return budget + CELL_OVERHEAD_SECONDS
    return PRIOR_SECONDS[piece.kind]


def is_eval(piece: Piece) -> bool:
    return piece.kind.startswith("eval:")


def meta_path(data: Path, piece: Piece) -> Path:
    """Where a piece's meta lies: a training piece's ``<folder>/meta.json``, an evaluation's beside its records."""
    return meta_file(data / f"{piece.key}.jsonl") if is_eval(piece) else data / piece.key / "meta.json"


@dataclass
class Outcome:
    ran: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    blocked: list[str] = dataclasses.field(default_factory=list)
    stopped_before: str | None = None
    """The piece the budget stopped at (None: nothing left that could run)."""


class DataStore:
    """Where the pieces of a pre-declared experiment lie: its folder of committed data. A piece is made in an empty
    scratch folder and placed there, its meta (with the wall time, kind and key added) written last
    (:mod:`harness.export`, the one writer); a piece without its meta (a killed one) is redone whole."""

    def __init__(self, data: Path):
        self.data = data

    def finished(self) -> dict[str, dict[str, Any]]:
        return finished(self.data)

    def run(self, piece: Piece, execute: Callable[[Piece, Path], dict[str, Any]]) -> dict[str, Any]:
        # a killed piece is redone whole: its records, or its folder (nothing evaluated its unfinished adapter)
        export.remove(self.data / f"{piece.key}.jsonl" if is_eval(piece) else self.data / piece.key)
        with tempfile.TemporaryDirectory() as scratch:
            meta = execute(piece, Path(scratch))
            export.place_piece(Path(scratch), self.data, piece.key, is_eval(piece))
        return meta

    def finish(self, piece: Piece, meta: dict[str, Any]) -> None:
        export.write_meta(meta_path(self.data, piece), meta)


class RunStore:
    """Where a learning run's or a comparison's pieces lie (:func:`schedule`'s ``store``): its run folder (not
    committed), a piece finished when the file ``output(out, piece)`` names is there (the last one it writes: a
    killed training piece continues from its checkpoints or starts over, as its work decides), its meta in
    ``pieces/<key>.json``."""

    def __init__(self, out: Path, pieces: list[Piece], output: Callable[[Path, Piece], Path]):
        self.out, self.pieces, self.output = out, pieces, output

    def meta_file(self, key: str) -> Path:
        return self.out / "pieces" / f"{key.replace('/', '__')}.json"

    def finished(self) -> dict[str, dict[str, Any]]:
        return {p.key: load_json(self.meta_file(p.key)) or {"key": p.key, "kind": p.kind}
                for p in self.pieces if self.output(self.out, p).is_file()}

    def run(self, piece: Piece, execute) -> dict[str, Any]:
        return execute(piece, self.out)

    def finish(self, piece: Piece, meta: dict[str, Any]) -> None:
        path = self.meta_file(piece.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(meta, indent=1, default=str) + "\n", encoding="utf-8")


def schedule(pieces: list[Piece], data: Path, execute: Callable[[Piece, Path], dict[str, Any]], exp: Record,
             budget_seconds: float | None = None, minutes: float | None = None,
             clock: Callable[[], float] = time.perf_counter, store: Any = None) -> Outcome:
    """The one piece runner: run each unfinished piece whose needs are finished, in order, through ``store``
    (default :class:`DataStore` of ``data``; a learning run's or a comparison's:
    :class:`RunStore`, its run folder): ``store.run(piece, execute)`` does the work and
    returns its meta, ``store.finish`` records it with the wall time, kind and key added. Stops before a piece whose
    estimate exceeds what is left of ``budget_seconds``."""
    store = DataStore(data) if store is None else store
    start, out = clock(), Outcome()
    for piece in pieces:
        done = store.finished()
        if piece.key in done:
            out.skipped.append(piece.key)
            continue
        if any(n not in done for n in piece.needs):
            out.blocked.append(piece.key)
            continue
        need = estimate(piece, done, exp, minutes)
        left = None if budget_seconds is None else budget_seconds - (clock() - start)
        if left is not None and need > left:
            logger.info("stopping before %s: about %.1f min, %.1f min of the budget left", piece.key, need / 60,
                        left / 60)
            out.stopped_before = piece.key
            break
        logger.info("running %s (about %.1f min)", piece.key, need / 60)
        t0 = clock()
        meta = store.run(piece, execute)
        store.finish(piece, {"key": piece.key, "kind": piece.kind, **meta, "wall_seconds": clock() - t0})
        out.ran.append(piece.key)
    return out


def check_setup(out: Path, setup: dict[str, Any], flag: str = "--out") -> None:
    """Record the settings every run of ``out`` shares in ``<out>/setup.json``; refuse to mix runs made with
    other settings (finished runs are read back, so they must be comparable). Algorithms and seeds may be
    added."""
    path = out / "setup.json"
    setup = json.loads(json.dumps(setup, default=str))
    if path.is_file():
        old = json.loads(path.read_text())
        changed = sorted(k for k in set(old) | set(setup) if old.get(k) != setup.get(k))
        if changed:
            raise SystemExit(f"{out} holds runs made with other settings ({', '.join(changed)} differ); "
                             f"use another {flag}, or the same settings")
    else:  # (the axes runner's --data is committed data: written by its one writer)
        export.write_new(path, json.dumps(setup, indent=1) + "\n")


def status_lines(exp: Record, data: Path, minutes: float | None = None) -> list[str]:
    """What ``benchmarks/axes.py status`` prints: each piece, finished (its wall time) or not, and the estimated
    time of what is left; the equal-updates cut's evaluations among them."""
    done = finished(data)
    lines, left = [f"{exp.name}: {data}"], 0.0
    for piece in plan(exp):
        if piece.key in done:
            same = done[piece.key].get("same_as")  # a cut that is its cell's final adapter: that one's records
            lines.append(f"  done     {piece.key} ({done[piece.key].get('wall_seconds', 0) / 60:.1f} min"
                         + (f"; the final adapter's: {same}" if same else "") + ")")
        else:
            need = estimate(piece, done, exp, minutes)
            left += need
            lines.append(f"  not run  {piece.key} (about {need / 60:.1f} min)")
    n = len(plan(exp))
    lines.append(f"{sum(p.key in done for p in plan(exp))} of {n} pieces done; about {left / 60:.0f} min left on "
                 "this machine")
    return lines


def experiment_named(name: str) -> Record:
    if name not in RUNNABLE:
        raise ValueError(f"--experiment {name!r}: declared ones are {', '.join(RUNNABLE)}")
    return RUNNABLE[name]
