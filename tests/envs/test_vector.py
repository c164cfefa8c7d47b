"""gymnasium.make_vec with our Text spaces: sync and async modes return the real text."""

import copy
import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

import agentrl.envs
from agentrl.envs import AnyText
from agentrl.envs.tool_use.env import ToolUseEnv

gym.register_envs(agentrl.envs)

STOCK = '<tool_call>\n{"name": "stock", "arguments": {"item_id": "t99"}}\n</tool_call>'


def test_shared_memory_round_trip_of_any_text():
    space = AnyText(max_length=64)
    mem = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, mem, n=3)
    texts = ["Answer: 5\n<tool_call>{}</tool_call>", "ünïcödé 中文 😀", ""]
    for i, t in enumerate(texts):
        write_to_shared_memory(space, i, t, mem)
    assert tuple(view) == tuple(texts)  # a live view: written after it was created
    assert copy.deepcopy(view) == tuple(texts) and isinstance(copy.deepcopy(view), tuple)
    with pytest.raises(ValueError, match="exceeds"):
        write_to_shared_memory(space, 0, "x" * 65, mem)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_returns_real_text(mode):
    envs = gym.make_vec("AgentRL/ToolUse-v0", num_envs=2, vectorization_mode=mode)
    try:
        obs, info = envs.reset(seed=0)
        singles = [ToolUseEnv() for _ in range(2)]
        expected = tuple(e.reset(seed=s)[0] for e, s in zip(singles, [0, 1], strict=True))
        assert tuple(obs) == expected
        assert all("?" in o or "." in o for o in obs)
        obs, reward, term, trunc, info = envs.step(("Answer: 1", STOCK))
        assert tuple(obs) == ("", "100")
        assert term.tolist() == [True, False] and trunc.tolist() == [False, False]
        assert reward.dtype == np.float64 or reward.dtype == np.float32
        assert info["parsed"]["kind"].tolist() == ["answer", "tool_call"]
        assert json.loads(json.dumps(info["metrics"]["tool_calls"].tolist())) == [0, 1]
    finally:
        envs.close()
