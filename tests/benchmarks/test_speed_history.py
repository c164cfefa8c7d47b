"""The speed history (harness/speed.py, ``run_all.py --track / --check``): every tracked ratio is read from the
scripts' real printed output, a regression beyond the spread is warned about, and the history and its page section
are written only by ``--track``."""

from __future__ import annotations

import json

import harness.speed as speed
import harness.suite as run_all
import pytest


@pytest.mark.parametrize("name", sorted(speed.TRACKED))
def test_every_tracked_ratio_was_read_from_its_benchmarks_real_output_into_the_committed_history(name):
    rows = speed.read_history(speed.HISTORY)
    for ratio in speed.TRACKED[name]:
        got = [r for r in rows if (r["benchmark"], r["ratio"]) == (name, ratio.name)]
        assert got and all(v > 0 for r in got for v in r["values"]), (name, ratio.name)
        assert all(r["median"] == sorted(r["values"])[len(r["values"]) // 2] for r in got if len(r["values"]) % 2)


def test_the_trl_ratios_are_the_columns_of_the_ratio_row_and_the_update_share_a_fraction():
    out = ("| ratio agentrl / TRL | 0.58x | 0.42x | 0.78x | | | 1.28x |\n"
           "goal: our step <= 0.5x TRL's -> 0.58x; our training >= 1,000 tokens/s -> 210 tokens/s; "
           "our update >= 50% of the matmul rate -> 31%")
    got = [r.read(out) for r in speed.TRACKED["train_vs_trl"]]
    assert got == [0.58, 0.42, 0.78, 0.31]


def _row(commit, median, spread=0.01, better="lower", machine="cpu A, 2 cores, avx512_bf16", values=None):
    return {"date": "2026-12-05T00:00Z", "commit": commit, "machine": machine, "mode": "quick",
            "benchmark": "train_vs_trl", "ratio": "step ours / TRL", "better": better,
            "values": values or [median], "median": median, "spread": spread}


def test_verdict_warns_only_beyond_the_spread_and_only_against_the_same_machine_kind():
    history = [_row("a" * 40, 0.60, 0.02), _row("b" * 40, 0.62, 0.02), _row("c" * 40, 0.30, machine="other")]
    assert speed.verdict(_row("d" * 40, 0.625, 0.01), history).endswith("within noise")
    assert speed.verdict(_row("d" * 40, 0.66, 0.01), history).startswith("WARNING")
    assert "better than" in speed.verdict(_row("d" * 40, 0.50, 0.01), history)
    # a wide spread of the new run itself is noise too
    assert not speed.verdict(_row("d" * 40, 0.66, 0.1), history).startswith("WARNING")
    # higher-is-better ratios warn when they fall
    up = [_row("a" * 40, 3.0, 0.1, better="higher")]
    assert speed.verdict(_row("d" * 40, 2.5, 0.1, better="higher"), up).startswith("WARNING")
    assert not speed.verdict(_row("d" * 40, 3.5, 0.1, better="higher"), up).startswith("WARNING")
    # rows of the same commit are not its own baseline; no history says so
    assert "no recorded history" in speed.verdict(_row("a" * 40, 0.9), [_row("a" * 40, 0.6)])


def test_measure_takes_the_median_and_half_range_of_the_repetitions_and_skips_missing_ratios():
    outs = [f"| ratio agentrl / TRL | {v}x | 0.4x | 0.7x | | | 1.2x |" for v in (0.50, 0.60, 0.56)]
    rows = speed.measure("train_vs_trl", outs + ["TRL is not installed"], commit="abc", machine="m", mode="quick")
    step = rows[0]
    assert step["ratio"] == "step ours / TRL" and step["values"] == [0.50, 0.60, 0.56]
    assert step["median"] == 0.56 and step["spread"] == pytest.approx(0.05)
    assert speed.measure("train_vs_trl", ["nothing"], commit="abc", machine="m", mode="quick") == []


def test_read_history_names_the_file_and_line_of_a_malformed_row(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(_row("a", 0.5)) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"h\.jsonl:2: not a JSON row"):
        speed.read_history(path)


def test_check_prints_and_writes_nothing_track_appends_and_writes_the_page_section(tmp_path, monkeypatch, capsys):
    history = tmp_path / "speed_history.jsonl"
    history.write_text(json.dumps(_row("0" * 40, 0.50, 0.01, machine=speed.this_machine())) + "\n", encoding="utf-8")
    monkeypatch.setattr(speed, "HISTORY", history)
    monkeypatch.setattr(run_all, "HISTORY", history)
    page = tmp_path / "results.md"
    page.write_text("# Benchmark results\n\n## Benchmarks\n\nrows\n\n## Proof of learning\n\nlearned\n",
                    encoding="utf-8")
    calls = []

    def fake_run(name, args, timeout, checkout=None, python=None):
        calls.append((name, args))
        return {"name": name, "command": name, "rc": 0, "wall": 1.0,
                "text": "| ratio agentrl / TRL | 0.80x | 0.4x | 0.7x | | | 1.2x |\n"
                        "goal: ...; our update >= 50% of the matmul rate -> 30%"}

    monkeypatch.setattr(run_all, "run", fake_run)
    before = history.read_text(encoding="utf-8")
    assert run_all.main(["--quick", "--check", "--only", "train_vs_trl", "env_throughput", "--repeat", "2",
                         "--out", str(page)]) == 0
    assert calls == [("train_vs_trl", ["--quick"])] * 2  # only tracked scripts, --repeat times
    out = capsys.readouterr().out
    assert "WARNING train_vs_trl: step ours / TRL = 0.8x" in out
    assert history.read_text(encoding="utf-8") == before and "Speed history" not in page.read_text()

    assert run_all.main(["--quick", "--track", "--only", "train_vs_trl", "--repeat", "1", "--out", str(page)]) == 0
    rows = speed.read_history(history)
    assert len(rows) == 1 + 4 and {r["ratio"] for r in rows[1:]} == {r.name for r in speed.TRACKED["train_vs_trl"]}
    text = page.read_text(encoding="utf-8")
    assert text.index("rows") < text.index("## Speed history") < text.index("## Proof of learning")
    assert "| 0000000 |" in text and "0.8x ± 0 (n=1)" in text
    assert (tmp_path / run_all.SPEED_FIGURE).stat().st_size > 0


def test_repeat_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        run_all.main(["--check", "--repeat", "0"])
    assert "--repeat must be >= 1" in capsys.readouterr().err
