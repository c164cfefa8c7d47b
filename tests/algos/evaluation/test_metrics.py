"""MetricsLogger / read_metrics, the rollout aggregates on hand-made trajectories, and the memory probes."""

from __future__ import annotations

import json
import math

import pytest

from agentrl.algos.evaluation.metrics import aggregate_rollout_metrics, mean, tool_call_counts
from agentrl.algos.evaluation.run_log import METRICS_FILE, MetricsLogger, read_metrics
from agentrl.algos.rollout.trajectory import Trajectory, Turn, all_equal, group_indices


def turn(kind: str | None) -> Turn:
    return Turn(prompt_len=0, completion_len=1, completion="x", parsed={} if kind is None else {"kind": kind})


def traj(group: int, reward: float, *, kinds=("answer",), action_tokens=3, extra_tokens=2, termination="answered",
         **metrics) -> Trajectory:
    n = action_tokens + extra_tokens
    mask = [0] * extra_tokens + [1] * action_tokens
    return Trajectory(token_ids=list(range(n)), loss_mask=mask, logprobs=[0.0] * n, prompt_len=extra_tokens,
                      reward=reward, group_id=group, task={"id": str(group)}, turns=[turn(k) for k in kinds],
                      termination=termination, metrics=metrics)


# ---------------------------------------------------------------------------------------------- logger


def test_logger_appends_flushed_lines_and_reads_back(tmp_path):
    log = MetricsLogger(tmp_path, report_to="none")
    log.log(1, {"train/loss": 0.5, "reward/mean": 1})
    # flushed: readable before close
    assert read_metrics(tmp_path)[0]["train/loss"] == 0.5
    log.log(2, {"train/loss": 0.25, "note": "hello"})
    log.close()
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [1, 2]
    assert recs[1]["note"] == "hello" and recs[1]["train/loss"] == 0.25
    assert "wall_time" in recs[0]


def test_resumed_run_appends_and_read_keeps_one_record_per_step(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as log:
        for step in range(1, 6):
            log.log(step, {"train/loss": float(step)})
    # the run is killed after step 5 but its last checkpoint was step 3: the resumed run redoes 4 and 5
    with MetricsLogger(tmp_path, report_to="none") as log:
        for step in range(4, 8):
            log.log(step, {"train/loss": 100.0 + step})
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert len(lines) == 9  # appended, nothing overwritten on disk
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6, 7]
    assert [r["train/loss"] for r in recs] == [1, 2, 3, 104, 105, 106, 107]


def test_same_step_logged_in_parts_is_merged(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as log:
        log.log(3, {"train/loss": 1.0})
        log.log(3, {"eval/average_at_n": 0.5})
    (rec,) = read_metrics(tmp_path)
    assert rec["train/loss"] == 1.0 and rec["eval/average_at_n"] == 0.5


def test_non_finite_and_odd_values_are_valid_json(tmp_path):
    import numpy as np

    with MetricsLogger(tmp_path, report_to="none") as log:
        log.log(0, {"a": float("nan"), "b": np.float32(2.5), "c": True, "d": [1, 2], "e": None})
    line = (tmp_path / METRICS_FILE).read_text().strip()
    rec = json.loads(line)  # strict JSON: no NaN tokens
    assert "NaN" not in line
    assert rec["a"] is None and rec["b"] == 2.5 and rec["c"] == 1.0 and rec["d"] == "[1, 2]" and rec["e"] is None


def test_truncated_last_line_is_skipped(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as log:
        log.log(1, {"x": 1})
    with open(tmp_path / METRICS_FILE, "a") as f:
        f.write('{"step": 2, "x"')  # killed mid-write
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]


def test_read_metrics_missing_file_says_where(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        read_metrics(tmp_path)


def test_log_after_close_raises(tmp_path):
    log = MetricsLogger(tmp_path, report_to="none")
    log.close()
    log.close()  # idempotent
    with pytest.raises(RuntimeError):
        log.log(1, {"x": 1})


def test_tensorboard_scalars_written(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsLogger(tmp_path) as log:
        log.log(1, {"train/loss": 0.5, "note": "text is not a scalar"})
        log.log(2, {"train/loss": 0.25})
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["train/loss"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(1, 0.5), (2, 0.25)]


# ---------------------------------------------------------------------------------------------- aggregates


def test_tool_call_counts():
    # two well-formed calls, one of them to an unknown tool (invalid_calls=1), then an answer
    t = traj(0, 1.0, kinds=("tool_call", "tool_call", "answer"), invalid_calls=1, tool_calls=2)
    assert tool_call_counts(t) == (1, 2)
    # a malformed reply ends the episode: the env counts it in invalid_calls too
    t = traj(0, -0.1, kinds=("tool_call", "invalid"), invalid_calls=1, tool_calls=1, termination="invalid")
    assert tool_call_counts(t) == (1, 2)
    # the token budget ran out mid-reply: no parsed kind, an attempt that is not valid
    t = traj(0, -0.1, kinds=("tool_call", None), tool_calls=1, termination="truncated")
    assert tool_call_counts(t) == (1, 2)
    assert tool_call_counts(traj(0, 0.0, kinds=("answer",))) == (0, 0)


def test_aggregate_rollout_metrics_hand_computed():
    trajs = [
        # group 0: rewards 1, 0 -> not degenerate
        traj(0, 1.0, kinds=("tool_call", "answer"), action_tokens=4, correct=1, format_ok=1, tool_calls=1,
             invalid_calls=0, tool_latency_s=0.5, search_calls=2),
        traj(0, 0.0, kinds=("answer",), action_tokens=2, correct=0, format_ok=1, tool_calls=0, invalid_calls=0,
             tool_latency_s=0.0),
        # group 1: rewards -0.1, -0.1 -> degenerate
        traj(1, -0.1, kinds=("invalid",), action_tokens=6, termination="invalid", correct=0, format_ok=0,
             tool_calls=0, invalid_calls=1, tool_latency_s=0.0),
        traj(1, -0.1, kinds=("tool_call", "tool_call"), action_tokens=8, termination="truncated", correct=0,
             format_ok=0, tool_calls=2, invalid_calls=1, tool_latency_s=1.5),
    ]
    m = aggregate_rollout_metrics(trajs)
    assert m["reward/mean"] == pytest.approx((1.0 + 0.0 - 0.1 - 0.1) / 4)
    mean = 0.2
    assert m["reward/std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in (1, 0, -0.1, -0.1)) / 4))
    assert m["reward/correct"] == 0.25
    assert m["reward/format"] == 0.5
    assert m["rollout/turns"] == pytest.approx((2 + 1 + 1 + 2) / 4)
    assert m["rollout/tool_calls"] == pytest.approx(3 / 4)
    # attempts: 1 + 0 + 1 + 2 = 4; valid: 1 + 0 + 0 + (2 - 1) = 2
    assert m["rollout/valid_tool_call_rate"] == pytest.approx(2 / 4)
    assert m["rollout/degenerate_group_rate"] == 0.5
    assert m["rollout/truncated_rate"] == 0.25
    assert m["rollout/invalid_rate"] == 0.25
    assert m["rollout/response_length"] == pytest.approx((4 + 2 + 6 + 8) / 4)
    assert m["rollout/response_length_max"] == 8
    assert m["rollout/num_groups"] == 2 and m["rollout/num_trajectories"] == 4
    assert m["env/tool_latency_s"] == pytest.approx(0.5)
    assert m["env/search_calls"] == 2.0  # averaged over the trajectories that report it
    assert "env/correct" not in m and "env/format_ok" not in m


def test_family_metrics_count_each_familys_groups_and_those_with_a_signal():
    def fam(group, family, reward, correct):
        t = traj(group, reward, correct=correct)
        t.task = {"id": str(group), "family": family}
        return t

    trajs = [fam(0, "add", 1.0, 1), fam(0, "add", 0.0, 0),          # a signal
             fam(1, "add", 1.0, 1), fam(1, "add", 1.0, 1),          # all solved: none
             fam(2, "chain", 0.0, 0), fam(2, "chain", 0.0, 0)]      # never solved: none
    m = aggregate_rollout_metrics(trajs)
    assert {k: v for k, v in m.items() if k.startswith("family/")} == {
        "family/groups@add": 2, "family/signal_groups@add": 1, "family/correct@add": 0.75,
        "family/zero_variance_share@add": 0.5,  # one of its two groups had no signal
        "family/groups@chain": 1, "family/signal_groups@chain": 0, "family/correct@chain": 0.0,
        "family/zero_variance_share@chain": 1.0}
    sources = [fam(0, "x", 1.0, 1), fam(0, "x", 0.0, 0)]
    for t in sources:  # Search's tasks name their data source instead
        t.task = {"id": "0", "data_source": "nq"}
    assert aggregate_rollout_metrics(sources)["family/signal_groups@nq"] == 1
    assert not any(k.startswith("family/") for k in aggregate_rollout_metrics([traj(0, 1.0)]))  # no family named


def test_aggregate_empty_batch():
    assert aggregate_rollout_metrics([]) == {}


def test_no_attempts_gives_zero_rate_not_error():
    m = aggregate_rollout_metrics([traj(0, 1.0, correct=1, format_ok=1)])
    assert m["rollout/valid_tool_call_rate"] == 0.0
    assert m["rollout/degenerate_group_rate"] == 1.0  # a lone trajectory's group has no contrast


def test_process_memory_reports_resident_and_peak_memory_that_follow_an_allocation():
    import sys

    from agentrl.algos.evaluation.process_memory import process_memory

    before = process_memory()
    assert before["perf/peak_rss_gib"] > 0.01  # a Python process with numpy loaded holds more than 10 MiB
    block = bytearray(256 * 2**20)  # 256 MiB, touched
    block[:: 4096] = b"x" * len(block[:: 4096])
    after = process_memory()
    assert after["perf/peak_rss_gib"] >= before["perf/peak_rss_gib"]
    if sys.platform.startswith("linux"):
        assert after["perf/rss_gib"] - before["perf/rss_gib"] > 0.2
        assert after["perf/peak_rss_gib"] >= after["perf/rss_gib"] - 0.01  # two kernel counters; ~MiB apart
    del block


def test_group_indices_in_first_seen_order():
    assert group_indices([3, 1, 3, 0, 1]) == [[0, 2], [1, 4], [3]]
    assert group_indices(t.group_id for t in [traj(5, 1.0), traj(2, 0.0), traj(5, 0.0)]) == [[0, 2], [1]]
    assert group_indices([]) == []


def test_all_equal_and_mean():
    assert all_equal([1.0]) and all_equal([0.5, 0.5]) and not all_equal([0.0, 1.0])
    assert mean([]) == 0.0 and mean([0.1] * 10) == pytest.approx(0.1)
