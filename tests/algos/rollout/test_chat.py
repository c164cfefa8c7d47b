"""Chat rendering and the token-exact continuation on three template families (ChatML, Llama-3-style, Qwen-style).

The Llama-3-style and Qwen-style templates below are written here (Jinja) and set on copies of the real SmolLM2
tokenizer; the Llama-3 one also gets its header/end tokens as new special tokens, as a real tokenizer would.
The templates, ``TEMPLATES`` and ``make_template_tokenizer`` are in helpers.py, the tokenizer
fixtures in conftest.py.
"""

from __future__ import annotations

import copy

import pytest
from helpers import TEMPLATES

from agentrl.algos.rollout.chat import (
    PLACEHOLDER,
    ChatFormat,
    TemplateError,
    assert_extends,
    template_supports_tools,
)

TOOLS = [{"type": "function", "function": {"name": "multiply", "description": "Multiply two integers.",
                                           "parameters": {"type": "object",
                                                          "properties": {"a": {"type": "integer"},
                                                                         "b": {"type": "integer"}},
                                                          "required": ["a", "b"]}}}]
OPENING = [{"role": "system", "content": "Answer with tools."}, {"role": "user", "content": "What is 12 times 34?"}]
REPLIES = ['<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n</tool_call>', "Answer: 408"]
OBSERVATIONS = [{"role": "tool", "name": "multiply", "content": "408"}]


# ---------------------------------------------------------------------------------------------- tests


def test_tool_support_detection(template_tokenizers):
    assert not template_supports_tools(template_tokenizers["chatml"])  # SmolLM2: plain ChatML, no tools section
    assert template_supports_tools(template_tokenizers["llama3"])
    assert template_supports_tools(template_tokenizers["qwen"])


def test_stop_tokens_are_the_templates_end_of_turn(template_tokenizers):
    chatml, llama = template_tokenizers["chatml"], template_tokenizers["llama3"]
    im_end = chatml.convert_tokens_to_ids("<|im_end|>")
    assert ChatFormat(chatml).stop_token_ids == [im_end]  # SmolLM2's eos is <|im_end|> too
    stops = ChatFormat(llama).stop_token_ids
    assert stops[0] == llama.convert_tokens_to_ids("<|eot_id|>")
    assert llama.eos_token_id in stops


@pytest.mark.parametrize("kind", TEMPLATES)
@pytest.mark.parametrize("sampled_end", [True, False])
def test_incremental_tokens_equal_the_full_rendering(template_tokenizers, kind, sampled_end):
    """prompt + reply + glue + reply ... decodes to exactly the template's rendering of the whole conversation."""
    tok = template_tokenizers[kind]
    fmt = ChatFormat(tok)
    tools = TOOLS if fmt.supports_tools else None
    conv = fmt.start(OPENING, TOOLS)
    ids = list(conv.prompt_ids)
    end = fmt.stop_token_ids[0]
    messages = list(OPENING)
    for reply, obs in zip(REPLIES[:-1], OBSERVATIONS, strict=True):
        completion = tok(reply, add_special_tokens=False)["input_ids"] + ([end] if sampled_end else [])
        before = list(ids)
        ids += completion
        glue = conv.glue(completion, obs)
        assert_extends(before, ids + glue, fmt.name)
        ids += glue
        messages += [{"role": "assistant", "content": reply}, obs]
    expected = fmt.render(messages, tools, True)
    assert tok.decode(ids, skip_special_tokens=False) == expected
    # The end-of-turn token appears once per finished assistant turn, sampled or not.
    assert ids.count(end) == expected.count(tok.convert_ids_to_tokens(end))


@pytest.mark.parametrize("kind", TEMPLATES)
def test_tools_rendered_by_the_template_only_when_it_supports_them(template_tokenizers, kind):
    fmt = ChatFormat(template_tokenizers[kind])
    text = fmt.start(OPENING, TOOLS).text
    assert ('"multiply"' in text) == fmt.supports_tools


def test_glue_does_not_duplicate_a_sampled_end_token(template_tokenizers):
    tok = template_tokenizers["chatml"]
    fmt = ChatFormat(tok)
    end = fmt.stop_token_ids[0]
    with_end = fmt.start(OPENING).glue([5, 6, end], OBSERVATIONS[0])
    without_end = fmt.start(OPENING).glue([5, 6], OBSERVATIONS[0])
    assert without_end[0] == end and with_end == without_end[1:]


def test_generation_prompt_that_differs_from_the_rendered_turn_is_a_loud_error(tokenizer):
    tok = copy.deepcopy(tokenizer)
    # Like some "thinking" templates: the generation prompt opens an empty think block the history never shows.
    tok.chat_template = (
        r"{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        r"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' }}{% endif %}")
    fmt = ChatFormat(tok, name="thinking-test-template")
    conv = fmt.start(OPENING)
    with pytest.raises(TemplateError) as e:
        conv.glue([5, 6], OBSERVATIONS[0])
    msg = str(e.value)
    assert "thinking-test-template" in msg and "first difference at character" in msg and "<think>" in msg


def test_template_that_rewrites_history_is_a_loud_error(tokenizer):
    tok = copy.deepcopy(tokenizer)
    # The system turn counts the messages, so every new message changes the beginning of the rendering.
    tok.chat_template = (
        r"{{ '<|im_start|>system\n' + (messages | length | string) + ' messages<|im_end|>\n' }}"
        r"{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        r"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    fmt = ChatFormat(tok)
    with pytest.raises(TemplateError, match="chat template sha1"):
        fmt.start(OPENING).glue([5], OBSERVATIONS[0])


def test_assert_extends_shows_the_divergence():
    assert_extends([1, 2, 3], [1, 2, 3, 4], "t")
    with pytest.raises(TemplateError, match="first difference at token 2"):
        assert_extends([1, 2, 3], [1, 2, 9, 4], "t")
    with pytest.raises(TemplateError):
        assert_extends([1, 2, 3], [1, 2], "t")


def test_placeholder_never_reaches_the_tokens(template_tokenizers):
    tok = template_tokenizers["qwen"]
    fmt = ChatFormat(tok)
    conv = fmt.start(OPENING, TOOLS)
    glue = conv.glue([5], OBSERVATIONS[0])
    assert PLACEHOLDER not in tok.decode(conv.prompt_ids + glue)


def test_template_without_chat_template_is_rejected(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        ChatFormat(tok)
