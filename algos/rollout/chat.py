"""Chat rendering with tools, and the token-exact continuation of a multi-turn episode.

The collector never decodes sampled tokens and encodes them again (re-tokenising shifts token boundaries and
breaks the importance ratio). Instead each turn's prompt is the previous one extended::

    turn k prompt  = [ ........ prompt of turn k-1 ........ | completion k-1 (sampled ids, as is) | glue k ]
    glue k         = end-of-turn markup of the assistant turn (minus an end token the model sampled itself)
                     + the observation turn as the template renders it + the next assistant header

``glue`` is found by rendering the chat template around a placeholder standing for the assistant's reply::

    A = render(history, add_generation_prompt=True)              "...<|im_start|>assistant\\n"
    B = render(history + [assistant: PH])                        "...<|im_start|>assistant\\nPH<|im_end|>\\n"
    C = render(history + [assistant: PH, obs], add_generation_prompt=True)
                                                                 B + "<|im_start|>tool\\n...<|im_start|>assistant\\n"

    B must equal A + PH + closing, and C must start with B; then glue = tokens(closing + C[len(B):]).

A template that renders earlier turns differently once more messages follow (or whose generation prompt differs
from how it renders an assistant turn) breaks that prefix property. Two families ship such templates and get a
**training template** instead, chosen automatically (:func:`training_template`) when a probe conversation
(:meth:`ChatFormat.prefix_preserving`) shows the shipped one is not prefix-preserving:

* Qwen3-style thinking templates (they drop ``<think>`` from earlier assistant turns and write an empty think
  block into the last one): the assistant turn is rendered as the model wrote it, after the same text the
  generation prompt writes (``<think>\n\n</think>\n\n`` with ``enable_thinking=False``, nothing otherwise);
* Mistral ``[INST]`` tool templates (the system message moves to the last user turn, replies get a leading space
  and are trimmed): the system message stays in the first user turn, replies are rendered as written, tool
  results carry their ``call_id`` when there is one.

Any other template that is not prefix-preserving is used as it is and :class:`TemplateError` names it and shows
where two renderings diverge, instead of letting a silently wrong context reach training.

After every turn the collector checks the whole trajectory (:meth:`Conversation.check`): its token ids must be
the tokens of the template's rendering of the whole conversation so far, with each reply's sampled ids in place
of the reply, so a wrong glue, a lost observation or a bookkeeping slip fails loudly.

Tools. If the template has a tools section (it mentions ``tools``), tool schemas go to the template through
``tools=`` and the environment must not describe them again (make it with ``tools_in_prompt=False``). Templates
without one (SmolLM2's ChatML) get the tools from the environment's own system prompt, which already lists the
schemas and the call format (``tools_in_prompt=True``, the default of every
:class:`~agentrl.envs.core.TextEnv`). The collector and the SFT renderer apply that rule
(:func:`template_supports_tools` and :func:`prompt_tools` here, the env side in
:func:`agentrl.algos.rollout.env_factory.make_chat_env`). The tool-call format the template teaches
(:attr:`ChatFormat.call_format`) is the one the env reads.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from agentrl.envs.parsing import native_call_format

logger = logging.getLogger(__name__)

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


def prompt_tools(supports_tools: bool, tools: list[dict] | None, tools_in_prompt: bool) -> list[dict] | None:
    """The tool schemas the chat template renders: ``tools`` when the template has a tools section and the env's
    own prompt does not list them already (``tools_in_prompt``), else ``None``. The one rule the collector and the
    SFT renderer share."""
    return (tools or None) if supports_tools and not tools_in_prompt else None


_QWEN3_ASSISTANT = (
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n\\n</think>\\n\\n' + content }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}\n"
)

MISTRAL_TRAINING_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}{%- set ns = namespace(first=true) %}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if ns.first and tools %}{{- '[AVAILABLE_TOOLS] ' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{%- if ns.first and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}{%- set ns.first = false %}"
    "{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}"
    "{%- elif message['role'] == 'tool' or message['role'] == 'tool_results' %}"
    "{{- '[TOOL_RESULTS] {\"content\": ' + message['content']|tojson }}"
    "{%- if message.tool_call_id %}{{- ', \"call_id\": ' + message.tool_call_id|tojson }}{%- endif %}"
    "{{- '}[/TOOL_RESULTS]' }}"
    "{%- endif %}{%- endfor %}"
)
"""The Mistral ``[INST]`` tool template made prefix-preserving (see the module docstring)."""


def training_template(template: str) -> str | None:
    """A prefix-preserving replacement for a chat template of a known family that is not prefix-preserving, or
    ``None`` when the family is not known (see the module docstring for the families and what changes)."""
    if "last_query_index" in template and "</think>" in template:  # Qwen3-style thinking templates
        start = template.find('{%- elif message.role == "assistant" %}')
        end = template.find("{%- if message.tool_calls %}", start)
        if start < 0 or end < 0:
            return None
        head = '{%- elif message.role == "assistant" %}\n'
        return template[:start] + head + _QWEN3_ASSISTANT + template[end:]
    if "[TOOL_CALLS]" in template and "[INST]" in template:
        return MISTRAL_TRAINING_TEMPLATE
    return None


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

    Attributes:
        template: the Jinja template it renders with: the tokenizer's own, or its :func:`training_template` when
            the tokenizer's is not prefix-preserving and its family is known.
        call_format: the tool-call format the tokenizer's template teaches (a key of
            :data:`~agentrl.envs.parsing.CALL_FORMATS`).

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        name: the template's name in error messages (default: :func:`template_name`).
        training: swap in a :func:`training_template` when the tokenizer's template is not prefix-preserving
            (``False``: always render with the tokenizer's own).
    """

    def __init__(self, tokenizer, name: str | None = None, *, training: bool = True):
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; set "
                             "tokenizer.chat_template to a Jinja template first")
        self.tokenizer = tokenizer
        self.name = name or template_name(tokenizer)
        self.supports_tools = template_supports_tools(tokenizer)
        self.call_format = native_call_format(template)
        self.template: str | None = None
        if training and isinstance(template, str) and not self.prefix_preserving():
            patched = training_template(template)
            if patched is not None:
                self.template = patched
                logger.info("chat template %s is not prefix-preserving; rendering with its training template",
                            self.name)
        self.stop_token_ids = self._stop_tokens()

    # ---------------------------------------------------------------- rendering
    def render(self, messages: list[dict[str, Any]], tools: list[dict] | None, generation_prompt: bool) -> str:
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        if self.template is not None:
            kwargs["chat_template"] = self.template
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                  **kwargs)

    def prefix_preserving(self) -> bool:
        """Whether two tool rounds of a probe conversation render as a growing prefix (the property the glue needs);
        a template that raises on the probe counts as not."""
        tools = [{"type": "function", "function": {"name": "probe", "description": "d", "parameters": {
            "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}]
        tools = tools if self.supports_tools else None
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        try:
            text = self.render(msgs, tools, True)
            for k in range(2):
                msgs = msgs + [{"role": "assistant", "content": PLACEHOLDER}]
                with_reply = self.render(msgs, tools, False)
                if not with_reply.startswith(text + PLACEHOLDER):
                    return False
                msgs = msgs + [{"role": "tool", "name": "probe", "tool_call_id": f"call00{k}00", "content": "r"}]
                text = self.render(msgs, tools, True)
                if not text.startswith(with_reply):
                    return False
        except Exception:  # noqa: BLE001 - a template that refuses the probe conversation
            return False
        return True

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

    ``prompt_ids`` is the opening prompt; :meth:`glue` returns the tokens to append after each completion and
    :meth:`check` verifies a whole trajectory against the rendering of the conversation.
    """

    def __init__(self, fmt: ChatFormat, messages: list[dict[str, Any]], tools: list[dict] | None):
        self.fmt = fmt
        self.tools = tools
        self.history = [dict(m) for m in messages]
        self.text = fmt.render(self.history, tools, True)
        self.prompt_ids = fmt.encode(self.text)
        self._replies: list[tuple[list[int], bool]] = []

    def glue(self, completion_ids: Sequence[int], observation: dict[str, Any] | list[dict[str, Any]]) -> list[int]:
        """Tokens that follow ``completion_ids`` to reach the next assistant header, after ``observation``.

        ``observation`` is the message the env answered with (``{"role": "tool", "content": ...}``), or the list
        of them (one tool message per call of a reply with several). When the completion already ends with the
        template's end-of-turn token, it is not repeated.

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
        observations = [dict(m) for m in (observation if isinstance(observation, list) else [observation])]
        c = fmt.render(with_reply + observations, self.tools, True)
        if not c.startswith(b):
            raise TemplateError(
                f"chat template {fmt.name}: adding the {observations[0].get('role')!r} turn re-renders the earlier "
                "conversation differently; " + divergence(b, c))
        glue = fmt.encode(closing + c[len(b):])
        sampled_end = bool(completion_ids and glue and completion_ids[-1] == glue[0] and glue[0] in fmt.stop_token_ids)
        if sampled_end:
            glue = glue[1:]  # the model sampled the end-of-turn token itself
        self.history = with_reply + observations
        self.text = c
        self._replies.append((list(completion_ids), sampled_end))
        return glue

    def check(self, token_ids: Sequence[int]) -> None:
        """Raise :class:`TemplateError` unless ``token_ids`` (a trajectory after its latest glue) are the tokens of
        the template's rendering of the whole conversation, each reply's sampled ids standing in for the reply.

        The rendering is split at the replies; each template-written piece is tokenised on its own (as the glue
        is), the piece after a reply without its end-of-turn token when the model sampled it.
        """
        fmt = self.fmt
        pieces = fmt.render(self.history, self.tools, True).split(PLACEHOLDER)
        if len(pieces) != len(self._replies) + 1:
            raise TemplateError(f"chat template {fmt.name}: the conversation renders {len(pieces) - 1} assistant "
                                f"turns for {len(self._replies)} replies")
        expected = fmt.encode(pieces[0])
        for (reply, sampled_end), piece in zip(self._replies, pieces[1:], strict=True):
            ids = fmt.encode(piece)
            expected += reply + (ids[1:] if sampled_end else ids)
        if list(token_ids) != expected:
            raise TemplateError(f"trajectory tokens differ from the rendered conversation (template {fmt.name}); "
                                + divergence(expected, list(token_ids)))
