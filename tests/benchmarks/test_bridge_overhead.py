"""``benchmarks/bridge_overhead.py``: every bridge row plays the same episodes with the same rewards as gym.make."""

from __future__ import annotations

from helpers import load_benchmark


def test_every_bridge_row_steps_the_same_episodes_with_the_same_rewards(capsys):
    rows = load_benchmark("bridge_overhead").main(["--episodes", "4"])
    assert [r["name"] for r in rows] == ["gymnasium.make", "SkyRL-gym", "OpenEnv"]
    assert len({r["steps"] for r in rows}) == 1 and rows[0]["steps"] >= 8
    assert all(r["rewards"] == [1.0] * 4 for r in rows)
    assert "| OpenEnv |" in capsys.readouterr().out
