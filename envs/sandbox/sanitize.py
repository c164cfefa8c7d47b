"""Neutralising chat-template special tokens in program output, so code cannot smuggle them into a chat."""

from __future__ import annotations

import re

#: Chat-template control strings (ChatML, Hermes/Qwen tool calls, Llama 3, Mistral) that model-written code
#: must not be able to print into the conversation. ``<|...|>`` tokens are matched generically as well.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<answer>", "</answer>", "<code>", "</code>", "<interpreter>", "</interpreter>", "<s>", "</s>",
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
)
_PIPE_TOKEN = re.compile(r"<\|[A-Za-z0-9_\-.: ]{1,64}\|>|<｜[^｜<>\n]{1,64}｜>")
_GUILLEMET = "\u2039"  # ‹ replaces the opening bracket, so the text stays readable but is no longer a token
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def sanitize_output(text: str, extra_tokens: tuple[str, ...] = ()) -> str:
    """Neutralise special tokens in program output: ``<|im_start|>`` becomes ``‹|im_start|>``, etc.

    Each token's first character is *replaced* (never deleted), so no new token can form from the pieces
    around a removed one. NUL and other C0 control characters (except tab, newline, carriage return) go too.
    """
    text = _CONTROL.sub("", text)
    text = _PIPE_TOKEN.sub(lambda m: _GUILLEMET + m.group(0)[1:], text)
    for tok in SPECIAL_TOKENS + tuple(extra_tokens):
        if tok in text:
            text = text.replace(tok, _GUILLEMET + tok[1:])
    return text
