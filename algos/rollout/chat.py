"""Chat rendering with tools, and the token-exact continuation of a multi-turn episode.

The collector never decodes sampled tokens and encodes them again (re-tokenising shifts token boundaries and
breaks the importance ratio). Instead each turn's prompt is the previous one extended::

    turn k prompt  = [ ........ prompt of turn k-1 ........ | completion k-1 (sampled ids, as is) | glue k ]
    glue k         = end-of-turn markup of the assistant turn (minus an end token the model sampled itself)
                     + the observation turn as the template renders it + the next assistant header

``glue`` is found by rendering the chat template around a placeholder standing for the assistant's reply::

    A = render(history,                           add_generation_prompt=True)   "...<|im_start|>assistant\\n"
    B = render(history + [assistant: PH])                                       "...<|im_start|>assistant\\nPH<|im_end|>\\n"
    C = render(history + [assistant: PH, obs],   add_generation_prompt=True)    B + "<|im_start|>tool\\n...<|im_start|>assistant\\n"

    B must equal A + PH + closing, and C must start with B; then glue = tokens(closing + C[len(B):]).

A template that renders earlier turns differently once more messages follow (or whose generation prompt differs
from how it renders an assistant turn) breaks that prefix property; :class:`TemplateError` then names the
template and shows where the two renderings diverge, instead of letting a silently wrong context reach training.

Tools. If the template has a tools section (it mentions ``tools``), tool schemas go to the template through
``tools=`` and the environment must not describe them again (make it with ``tools_in_prompt=False``). Templates
without one (SmolLM2's ChatML) get the tools from the environment's own system prompt, which already lists the
schemas and the call format (``tools_in_prompt=True``, the default of every :class:`~agentrl.envs.core.TextEnv`).
The collector applies that rule (:func:`template_supports_tools` here, the env side in
:func:`agentrl.algos.rollout.envs.make_text_env`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

#: Stands for an assistant reply while rendering; never reaches the model.
PLACEHOLDER = "\u2063AGENTRL-REPLY-8f3a\u2063"


class TemplateError(RuntimeError):
    """The chat template does not render a conversation as a growing prefix (the continuation would be wrong)."""


def template_supports_tools(tokenizer) -> bool:
    """Whether ``tokenizer``'s chat template renders a ``tools=`` list itself."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default one, or a "tool_use" one
        return "tool_use" in template or "tools" in str(template.get("default", ""))
    return isinstance(template, str) and "tools" in template


def template_name(tokenizer) -> str:
    """A short name for error messages: the tokenizer's path or class plus a hash of its template."""
    template = getattr(tokenizer, "chat_template", None) or ""
    digest = hashlib.sha1(str(template).encode()).hexdigest()[:8]
    where = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    return f"{where} (chat template sha1 {digest})"


def divergence(a: str | Sequence, b: str | Sequence, context: int = 40) -> str:
    """A readable description of where ``a`` and ``b`` first differ (strings or token lists)."""
    n = min(len(a), len(b))
    i = next((k for k in range(n) if a[k] != b[k]), n)
    lo = max(0, i - context)
    if isinstance(a, str):
        return (f"first difference at character {i}:\n  expected ...{a[lo:i + context]!r}\n"
                f"  rendered ...{b[lo:i + context]!r}")
    return (f"first difference at token {i}:\n  expected ...{list(a[lo:i + 8])}\n"
            f"  got      ...{list(b[lo:i + 8])}")


def assert_extends(prev: Sequence[int], new: Sequence[int], name: str) -> None:
    """Raise :class:`TemplateError` unless token list ``new`` starts with ``prev`` (the prefix invariant)."""
    if len(new) < len(prev) or list(new[: len(prev)]) != list(prev):
        raise TemplateError(f"turn prompt does not extend the previous one (template {name}); "
                            + divergence(list(prev), list(new)))


class ChatFormat:
    """Renders an episode's opening prompt and the glue tokens between turns for one tokenizer.

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        name: the template's name in error messages (default: :func:`template_name`).
    """

    def __init__(self, tokenizer, name: str | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; set "
                             "tokenizer.chat_template to a Jinja template first")
        self.tokenizer = tokenizer
        self.name = name or template_name(tokenizer)
        self.supports_tools = template_supports_tools(tokenizer)
        self.stop_token_ids = self._stop_tokens()

    # ---------------------------------------------------------------- rendering
    def render(self, messages: list[dict[str, Any]], tools: list[dict] | None, generation_prompt: bool) -> str:
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                  **kwargs)

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered template text (the template writes its own BOS; none is added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _stop_tokens(self) -> list[int]:
        """End-of-turn ids: the first token the template writes after an assistant reply, plus EOS."""
        msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": PLACEHOLDER}]
        stops: list[int] = []
        try:
            text = self.render(msgs, None, False)
            closing = text[text.index(PLACEHOLDER) + len(PLACEHOLDER):]
            ids = self.encode(closing) if closing else []
            special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
            added = set(getattr(self.tokenizer, "added_tokens_decoder", {}) or {})
            if ids and (ids[0] in special or ids[0] in added):
                stops.append(ids[0])
        except Exception:  # an unusual template; EOS alone then
            pass
        eos = self.tokenizer.eos_token_id
        for e in eos if isinstance(eos, list) else [eos]:
            if e is not None and e not in stops:
                stops.append(e)
        if not stops:
            raise ValueError(f"cannot tell the end-of-turn token of template {self.name}: it writes no special "
                             "token after an assistant reply and the tokenizer has no eos_token")
        return stops

    def start(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> Conversation:
        """Begin an episode from the env's opening messages; ``tools`` only when the template renders them."""
        return Conversation(self, messages, tools if self.supports_tools else None)


class Conversation:
    """One episode's rendering state: the history (assistant replies as placeholders) and the rendered text.

    ``prompt_ids`` is the opening prompt; :meth:`glue` returns the tokens to append after each completion.
    """

    def __init__(self, fmt: ChatFormat, messages: list[dict[str, Any]], tools: list[dict] | None):
        self.fmt = fmt
        self.tools = tools
        self.history = [dict(m) for m in messages]
        self.text = fmt.render(self.history, tools, True)
        self.prompt_ids = fmt.encode(self.text)

    def glue(self, completion_ids: Sequence[int], observation: dict[str, Any]) -> list[int]:
        """Tokens that follow ``completion_ids`` to reach the next assistant header, after ``observation``.

        ``observation`` is the message the env answered with (``{"role": "tool", "content": ...}``). When the
        completion already ends with the template's end-of-turn token, it is not repeated.

        Raises:
            TemplateError: the template does not render the conversation as a growing prefix.
        """
        fmt = self.fmt
        with_reply = self.history + [{"role": "assistant", "content": PLACEHOLDER}]
        b = fmt.render(with_reply, self.tools, False)
        head = self.text + PLACEHOLDER
        if not b.startswith(head):
            raise TemplateError(
                f"chat template {fmt.name}: rendering an assistant turn does not extend the generation prompt "
                "(e.g. the generation prompt adds text the rendered turn lacks, or earlier turns change); "
                + divergence(head, b))
        closing = b[len(head):]
        c = fmt.render(with_reply + [observation], self.tools, True)
        if not c.startswith(b):
            raise TemplateError(
                f"chat template {fmt.name}: adding the {observation.get('role')!r} turn re-renders the earlier "
                "conversation differently; " + divergence(b, c))
        glue = fmt.encode(closing + c[len(b):])
        if completion_ids and glue and completion_ids[-1] == glue[0] and glue[0] in fmt.stop_token_ids:
            glue = glue[1:]  # the model sampled the end-of-turn token itself
        self.history = with_reply + [dict(observation)]
        self.text = c
        return glue
