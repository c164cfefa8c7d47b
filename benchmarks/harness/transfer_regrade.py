"""Grade the stored BFCL replies again under the env's current rule, without sampling anything new
(``python benchmarks/transfer.py --regrade-cut``).

Up to 070684b the collector ended a reply cut by the token budget as ``truncated`` with reward 0 and never showed
it to BFCL's checker; since then ``BFCLBase.grades_cut_replies`` makes it step the env with such a reply, as BFCL
grades whatever the model wrote. This module replays each stored episode that ended that way through today's
collector: :class:`ReplayPolicy` answers each prompt with the very tokens (and log-probabilities) sampled then, so
the model's output is unchanged and only the grading can differ. A single-turn set is re-graded exactly. In a
multi-turn episode the grading of a cut reply leads to later turns nobody sampled: those are counted, left as they
are and named on the page.

Per measurement it rewrites the records of the replayed tasks (the rest stay byte-for-byte), recomputes the meta's
``scores`` and adds ``regraded`` (commit, command, counts, the scores before); the stored episodes file gets the
replayed trajectories, its earlier version kept beside it (``.before-regrade``). A measurement whose meta already
has ``regraded`` is skipped, and so is one with no cut reply: running it again changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.algos.policy.base import GenerationResult, Policy
from harness import export
from harness.data import load_json, read_rows
from harness.layout import ROOT, meta_file, shown
from harness.transfer import ARMS, SETS, TRANSFER_DATA, arm_folder
from harness.transfer_exec import records, scores

RULE = ("a reply cut by the token budget is graded by BFCL's checker (BFCLBase.grades_cut_replies), as BFCL grades "
        "whatever the model wrote; before, the collector scored it 0 without grading")


class ReplayPolicy(Policy):
    """Answers each prompt with the completion stored for it: ``{prompt token ids: GenerationResult}`` from the
    turns of stored trajectories."""

    def __init__(self, tokenizer, trajectories: Sequence[Any]):
        self.tokenizer = tokenizer
        self.replies: dict[tuple[int, ...], GenerationResult] = {}
        for t in trajectories:
            for turn in t.turns:
                end = turn.prompt_len + turn.completion_len
                self.replies[tuple(t.token_ids[: turn.prompt_len])] = GenerationResult(
                    list(t.token_ids[turn.prompt_len: end]), list(t.logprobs[turn.prompt_len: end]),
                    turn.finish_reason)

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            reply = self.replies.get(tuple(r.prompt_ids))
            if reply is None:
                raise RuntimeError("ReplayPolicy: a prompt no stored episode reached (replaying it needs new "
                                   "samples); re-grade single-turn episodes only")
            out.append(reply)
        return out


def cut_episodes(trajectories: Sequence[Any]) -> list[Any]:
    """The episodes the collector ended at a reply cut by the token budget without grading it."""
    return [t for t in trajectories if t.termination == "truncated" and t.turns
            and t.turns[-1].finish_reason == "length"]


def regrade_cut(data: Path = TRANSFER_DATA, out: Path = ROOT / "runs" / "transfer", command: str = "",
                model: str | None = None) -> dict[str, str]:
    """Re-grade every BFCL measurement in ``data`` (episodes under ``out``); returns ``{file: what happened}``."""
    from agentrl.algos.evaluation.ledger import git_state
    from agentrl.algos.models import DEFAULT_MODEL, load_tokenizer
    from agentrl.algos.rollout.collector import CollectorConfig, collect
    from agentrl.algos.rollout.trajectory import load_trajectories

    state = git_state(ROOT)
    tokenizer = None
    outcome: dict[str, str] = {}
    for name in ARMS:
        for s in SETS:
            if s.env != "AgentRL/BFCL-v0":
                continue
            folder = arm_folder(data, name)
            for rec_path in sorted(folder.glob(f"{s.name}.jsonl")) + sorted(folder.glob(f"{s.name}.redo*.jsonl")):
                meta_path = meta_file(rec_path)
                meta = load_json(meta_path) or {}
                if meta.get("regraded"):
                    continue
                episodes = out / name / rec_path.name.replace(".jsonl", ".episodes.jsonl")
                if not episodes.is_file():
                    outcome[shown(rec_path)] = f"not re-graded: its episodes ({shown(episodes)}) are not here"
                    continue
                trajectories = load_trajectories(episodes)
                cut = cut_episodes(trajectories)
                if not cut:
                    continue
                before = dict(meta.get("scores") or {})
                entry: dict[str, Any] = {**state, "command": command, "rule": RULE, "cut": len(cut),
                                         "scores_before": before}
                if s.max_turns > 1:
                    entry.update(regraded=0, why="multi-turn: grading a cut reply leads to turns nobody sampled")
                else:
                    tokenizer = tokenizer or load_tokenizer(model or meta.get("model") or DEFAULT_MODEL)
                    config = CollectorConfig(**meta["collector"])
                    again = collect(s.env, ReplayPolicy(tokenizer, cut), [t.task for t in cut], group_size=1,
                                    env_kwargs=dict(s.env_kwargs), config=config, progress=False)
                    new = {r["id"]: r for r in records(again)}
                    rows = [new.get(r["id"], r) for r in read_rows(rec_path)]
                    meta["scores"] = scores(rows)
                    old = {str((t.task or {}).get("id")): t for t in cut}
                    entry.update(regraded=len(again), changed=sum(
                        1 for t in again if t.reward != old[str(t.task["id"])].reward))
                    export.rewrite(rec_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
                    by_id = {str(t.task["id"]): t for t in again}
                    kept = episodes.with_name(episodes.name.replace(".jsonl", ".before-regrade.jsonl"))
                    episodes.replace(kept)
                    episodes.write_text("".join(
                        json.dumps(by_id.get(str((t.task or {}).get("id")), t).to_dict(), ensure_ascii=False) + "\n"
                        for t in trajectories), encoding="utf-8")
                meta["regraded"] = entry
                export.rewrite(meta_path, json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
                outcome[shown(rec_path)] = (f"{entry['regraded']} of {len(cut)} cut replies re-graded; score "
                                            f"{100 * before.get('score', 0):.1f}% -> "
                                            f"{100 * meta['scores']['score']:.1f}%")
    return outcome
