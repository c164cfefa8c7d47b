"""The model families the collector must handle, on their published chat templates (tests/data/templates):
Qwen2.5, Qwen3 (thinking; not prefix-preserving as shipped), Llama-3.1 (JSON calls) and Mistral v0.3
(``[TOOL_CALLS]``; not prefix-preserving as shipped), each on the SmolLM2 tokenizer with the family's special
tokens (helpers.make_template_tokenizer).

Also here: the collector's whole-trajectory check (it fails on a broken glue) and SFT rendering a demonstration
token for token as the collector renders the same episode.
"""

from __future__ import annotations

import pytest
from helpers import FAMILIES, EchoEnv, echo_tasks, native_scripted_policy

from agentrl.algos.policy.base import GenerationResult, Policy
from agentrl.algos.rollout.chat import PLACEHOLDER, ChatFormat, Conversation, TemplateError, prompt_tools
from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.algos.rollout.demonstrations import demonstration, render_conversation
from agentrl.envs.tool_use.env import ToolUseEnv, make_tasks

CONFIG = CollectorConfig(max_total_tokens=4096)
NATIVE = {"qwen2_5": "hermes", "qwen3": "hermes", "llama3_1": "llama3_json", "mistral": "mistral"}
TOOL_TURN = {"qwen2_5": "<tool_response>", "qwen3": "<tool_response>", "llama3_1": "ipython<|end_header_id|>",
             "mistral": "[TOOL_RESULTS]"}


def two_call_tasks(n):
    """ToolUse tasks solved with exactly two calls: three assistant turns each."""
    return [t for t in make_tasks(80, "train") if len(t["calls"]) == 2][:n]


def decoded_equals_rendering(tok, fmt, tr):
    """The trajectory decodes to the template's rendering of the same episode (replayed from its demo)."""
    demo = demonstration(ToolUseEnv(), tr.task, fmt)
    messages = [{k: v for k, v in m.items() if k != "tool_calls"} for m in demo["messages"]]
    rendered = fmt.render(messages, prompt_tools(fmt.supports_tools, demo["tools"], demo["tools_in_prompt"]), False)
    decoded = tok.decode(tr.token_ids, skip_special_tokens=False)
    return rendered.startswith(decoded) and rendered[len(decoded):] in ("", "\n")


# ---------------------------------------------------------------------------------------------- templates


@pytest.mark.parametrize("kind", FAMILIES)
def test_family_template_detection(template_tokenizers, kind):
    fmt = ChatFormat(template_tokenizers[kind])
    assert fmt.supports_tools and fmt.call_format == NATIVE[kind]
    shipped = ChatFormat(template_tokenizers[kind], training=False)
    assert shipped.prefix_preserving() == (kind in ("qwen2_5", "llama3_1"))
    assert (fmt.template is not None) == (kind in ("qwen3", "mistral"))  # a training template only where needed
    assert fmt.prefix_preserving()


@pytest.mark.parametrize("kind", ["qwen3", "mistral"])
def test_shipped_templates_that_rewrite_history_fail_without_the_training_template(template_tokenizers, kind):
    fmt = ChatFormat(template_tokenizers[kind], training=False)
    conv = fmt.start([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    with pytest.raises(TemplateError):
        conv.glue([5, fmt.stop_token_ids[0]], {"role": "tool", "name": "f", "tool_call_id": "call00100",
                                               "content": "r"})


def test_qwen3_training_template_keeps_the_thinking_of_earlier_turns(template_tokenizers):
    fmt = ChatFormat(template_tokenizers["qwen3"])
    reply = "<think>\nmultiply first\n</think>\n\n" + '<tool_call>\n{"name": "m", "arguments": {}}\n</tool_call>'
    msgs = [{"role": "user", "content": "u"}, {"role": "assistant", "content": reply},
            {"role": "tool", "name": "m", "content": "6"}]
    text = fmt.render(msgs, None, True)
    assert reply in text and text.endswith("<|im_start|>assistant\n")
    # enable_thinking=False: the assistant turn starts with the empty think block the generation prompt writes
    no_think = fmt.tokenizer.apply_chat_template(msgs[:2], tokenize=False, chat_template=fmt.template,
                                                 enable_thinking=False)
    gen = fmt.tokenizer.apply_chat_template(msgs[:1], tokenize=False, chat_template=fmt.template,
                                            add_generation_prompt=True, enable_thinking=False)
    assert no_think.startswith(gen + reply)


# ---------------------------------------------------------------------------------------------- 3-turn rollouts


@pytest.mark.parametrize("kind", FAMILIES)
def test_three_turn_rollout_per_family(template_tokenizers, kind):
    tok = template_tokenizers[kind]
    fmt = ChatFormat(tok)
    tasks = two_call_tasks(2)
    policy = native_scripted_policy(tok, tasks)
    trajs = collect("AgentRL/ToolUse-v0", policy, tasks, group_size=2, config=CONFIG)
    for tr in trajs:
        assert tr.termination == "answered" and tr.reward == 1.0 and len(tr.turns) == 3
        # native calls parsed: each call turn ran the demonstrated tool
        assert [t.parsed["calls"][0]["name"] for t in tr.turns[:2]] == [c[0] for c in tr.task["calls"]]
        # masks: 1 exactly on the sampled replies
        masked = [i for i, m in enumerate(tr.loss_mask) if m]
        assert masked == [i for t in tr.turns for i in range(t.prompt_len, t.prompt_len + t.completion_len)]
        assert decoded_equals_rendering(tok, fmt, tr)
        opening = tok.decode(tr.token_ids[: tr.prompt_len])
        assert opening.count('"days_between"') + opening.count('"name": "add"') <= 2  # tools listed once


class ParallelPolicy(Policy):
    """Replies with every call of its task in one reply, then the answer."""

    def __init__(self, tokenizer, tasks):
        self.tokenizer = tokenizer
        self.fmt = ChatFormat(tokenizer)
        env = ToolUseEnv()
        env.use_call_format(self.fmt.call_format)
        self.replies = {}
        for t in tasks:
            actions = env.demo_actions(t)
            joined = ("\n" if self.fmt.call_format == "hermes" else "; ").join(actions[:-1])
            if self.fmt.call_format == "mistral":
                calls = [c.split("[TOOL_CALLS] [", 1)[1][:-1] for c in actions[:-1]]
                joined = "[TOOL_CALLS] [" + ", ".join(calls) + "]"
            self.replies[t["query"]] = [joined, actions[-1]]
        self.turn = {}

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            text = self.tokenizer.decode(r.prompt_ids, skip_special_tokens=False)
            query = next(q for q in self.replies if q in text)
            k = int(self.replies[query][0] in text)
            ids = self.tokenizer(self.replies[query][k], add_special_tokens=False)["input_ids"]
            ids = ids + [self.fmt.stop_token_ids[0]]
            out.append(GenerationResult(ids, [-1.0] * len(ids), "stop"))
        return out


@pytest.mark.parametrize("kind", FAMILIES)
def test_parallel_calls_in_one_reply(template_tokenizers, kind):
    tok = template_tokenizers[kind]
    tasks = two_call_tasks(2)
    trajs = collect("AgentRL/ToolUse-v0", ParallelPolicy(tok, tasks), tasks, group_size=1, config=CONFIG)
    for tr in trajs:
        assert tr.termination == "answered" and tr.reward == 1.0 and len(tr.turns) == 2
        assert [c["name"] for c in tr.turns[0].parsed["calls"]] == [c[0] for c in tr.task["calls"]]
        assert tr.metrics["tool_calls"] == 2
        assert tr.turns[0].observation.startswith("Result 1 (")
        t0 = tr.turns[0]
        after = tok.decode(tr.token_ids[t0.prompt_len + t0.completion_len: tr.turns[1].prompt_len],
                           skip_special_tokens=False)
        assert after.count(TOOL_TURN[kind]) == 2  # one tool message per call, rendered by the template


# ---------------------------------------------------------------------------------------------- the trajectory check


@pytest.mark.parametrize("kind", ["chatml", "llama3", "qwen", *FAMILIES])
def test_a_broken_glue_is_caught(template_tokenizers, monkeypatch, kind):
    tok = template_tokenizers[kind]
    tasks = two_call_tasks(1)
    collect("AgentRL/ToolUse-v0", native_scripted_policy(tok, tasks), tasks, 1, config=CONFIG)  # sound: passes
    real_glue = Conversation.glue

    def broken(self, completion_ids, observation):
        return real_glue(self, completion_ids, observation)[:-1]  # loses the last token of the glue

    monkeypatch.setattr(Conversation, "glue", broken)
    with pytest.raises(TemplateError, match="trajectory tokens differ from the rendered conversation"):
        collect("AgentRL/ToolUse-v0", native_scripted_policy(tok, tasks), tasks, 1, config=CONFIG)


def test_check_catches_a_lost_observation(template_tokenizers):
    fmt = ChatFormat(template_tokenizers["qwen2_5"])
    conv = fmt.start([{"role": "user", "content": "u"}])
    ids = list(conv.prompt_ids) + [5, fmt.stop_token_ids[0]]
    glue = conv.glue(ids[len(conv.prompt_ids):], {"role": "tool", "content": "result"})
    conv.check(ids + glue)
    conv.history[-1]["content"] = "another result"  # what the template renders is no longer what was appended
    with pytest.raises(TemplateError):
        conv.check(ids + glue)
    assert PLACEHOLDER not in fmt.tokenizer.decode(ids + glue)


def test_echo_env_rollouts_pass_the_check(template_tokenizers):
    tok = template_tokenizers["llama3_1"]

    class Fixed(Policy):
        def __init__(self):
            self.tokenizer = tok
            self.stop = ChatFormat(tok).stop_token_ids[0]

        def generate(self, requests, sampling):
            return [GenerationResult([17, 18, self.stop], [-1.0] * 3, "stop") for _ in requests]

    trajs = collect(lambda: EchoEnv(turns=3), Fixed(), echo_tasks(2), 1, config=CONFIG)
    assert all(len(t.turns) == 3 and t.termination == "answered" for t in trajs)


# ---------------------------------------------------------------------------------------------- SFT = rollout


@pytest.mark.parametrize("kind", ["chatml", "qwen", *FAMILIES])
def test_sft_demo_tokens_equal_the_collectors_rendering(template_tokenizers, kind):
    tok = template_tokenizers[kind]
    fmt = ChatFormat(tok)
    tasks = two_call_tasks(2)
    trajs = collect("AgentRL/ToolUse-v0", native_scripted_policy(tok, tasks), tasks, 1, config=CONFIG)
    for tr in trajs:
        demo = demonstration(ToolUseEnv(), tr.task, fmt)
        ids, mask = render_conversation(fmt, demo["messages"], demo["tools"], tools_in_prompt=demo["tools_in_prompt"])
        assert ids == tr.token_ids and mask == tr.loss_mask
        opening = tok.decode(ids[: tr.prompt_len])
        assert opening.count('"days_between"') == 1  # the tool schemas once, in the template or in the env prompt
