"""Drive any agentrl env with an OpenAI-compatible chat server (vLLM, SGLang, llama.cpp, OpenAI, ...) — plain Gymnasium.

    python docs/examples/openai_policy.py --base-url http://127.0.0.1:8000 --model Qwen/Qwen2.5-1.5B-Instruct
    OPENAI_API_KEY=... python docs/examples/openai_policy.py --base-url https://api.openai.com --model gpt-4o-mini

Only ``requests`` is needed. The env's system prompt describes its tools and reply format, so any chat model can
play; tool results go back as user turns (``role: "tool"`` messages need a ``tool_call_id`` on many servers).
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import requests

import agentrl.envs  # noqa: F401  (registers the AgentRL/* ids)


def chat(base_url: str, model: str, messages: list[dict], api_key: str | None = None) -> str:
    """One reply from ``POST {base_url}/v1/chat/completions``."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    turns = [m if m["role"] != "tool" else {"role": "user", "content": f"Tool result:\n{m['content']}"}
             for m in messages]
    r = requests.post(f"{base_url.rstrip('/')}/v1/chat/completions", headers=headers, timeout=300,
                      json={"model": model, "messages": [{"role": m["role"], "content": m["content"]} for m in turns]})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def play(env_id: str, base_url: str, model: str, *, seed: int | None = None, api_key: str | None = None,
         env_kwargs: dict | None = None) -> tuple[float, dict]:
    """Play one episode; returns ``(total reward, final info)``."""
    env = gym.make(env_id, **(env_kwargs or {}))
    _obs, info = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        reply = chat(base_url, model, info["messages"], api_key)
        _obs, reward, terminated, truncated, info = env.step(reply)
        total, done = total + float(reward), terminated or truncated
    env.close()
    return total, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="AgentRL/ToolUse-v0")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True)
    ap.add_argument("--episodes", type=int, default=3)
    ap.error = lambda message: ap.exit(2, f"{ap.prog}: error: {message}\n")  # one line, no usage block
    args = ap.parse_args()
    try:
        gym.make(args.env).close()
    except gym.error.Error as e:  # an unknown id: gymnasium's message names the close ones
        ap.error(f"--env: {e}")
    for seed in range(args.episodes):
        try:
            reward, info = play(args.env, args.base_url, args.model, seed=seed,
                                api_key=os.environ.get("OPENAI_API_KEY"))
        except requests.RequestException as e:  # unreachable server, HTTP error: one line, not a traceback
            ap.exit(1, f"{ap.prog}: error: the chat server at {args.base_url} failed: {e}\n")
        except (KeyError, IndexError, ValueError) as e:
            ap.exit(1, f"{ap.prog}: error: {args.base_url} sent no OpenAI-style chat reply ({e!r})\n")
        print(f"episode {seed}: reward {reward:+.2f}  {info.get('termination')}  answer={info.get('answer')!r}")


if __name__ == "__main__":
    main()
