"""Reading an assistant reply: tool-call formats and final-answer extractors.

An :class:`ActionParser` turns a reply into exactly one :class:`ParsedAction` — tool calls, a final answer or
invalid — with one tool-call format and one answer format:

* native tool-call formats (the registry :data:`CALL_FORMATS`; :func:`native_call_format` picks the one a chat
  template teaches): :class:`HermesCalls` (the default; Hermes/Qwen
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``),
  :class:`LlamaJsonCalls` (Llama 3.x ``{"name": ..., "parameters": {...}}``), :class:`MistralCalls`
  (``[TOOL_CALLS] [{"name": ..., "arguments": {...}}]``); each reads several calls in one reply (parallel calls);
* env-chosen formats: :class:`TagCalls` (``<search>q</search>``), :class:`FencedCodeCalls` (a fenced
  ```` ```python ```` block), one call per reply;
* answer formats (the registry :data:`ANSWER_FORMATS` of :class:`AnswerFormat`): ``"answer_colon"``
  (``Answer: ...``), ``"boxed"`` (the last ``\\boxed{}`` in the last 300 characters), ``"answer_tag"``
  (``<answer>...</answer>``), ``"text"`` (any reply without a call: the whole text).

A third party adds a native call format (a :class:`CallFormat` subclass built with no arguments) with
:func:`register_call_format` or an entry point in the group ``agentrl.call_formats``, and an answer format (an
:class:`AnswerFormat`) with :func:`register_answer_format` or the group ``agentrl.answer_formats``; each
registry checks its contract when an entry is first used (:class:`~agentrl.envs.plugins.Registry`).

Text inside ``<think>...</think>`` is ignored by every format. Parsing is strict: nothing but whitespace after
the last call, arguments a JSON object, no unknown keys. Comparing an answer with the reference is
:mod:`agentrl.envs.answers` (re-exported here).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from agentrl.envs.plugins import Registry

__all__ = ["ANSWER_FORMATS", "CALL_FORMATS", "ActionParser", "AnswerFormat", "CallFormat", "FencedCodeCalls",
           "HermesCalls", "LlamaJsonCalls", "MistralCalls", "ParsedAction", "TagCalls",
           "extract_answer_colon", "extract_answer_tag", "extract_boxed", "extract_text", "native_call_format",
           "register_answer_format", "register_call_format", "strip_think"]

# ---------------------------------------------------------------------------------------------- result


@dataclass
class ParsedAction:
    """How a reply was read. ``kind`` decides which other fields are set.

    A tool call holds every call of the reply in ``calls`` (``{"name", "arguments"}`` each, plus ``"id"`` when
    the model wrote one), in order; ``name`` and ``arguments`` are those of the first.
    """

    kind: Literal["tool_call", "answer", "invalid"]
    name: str | None = None
    arguments: dict[str, Any] | None = None
    answer: str | None = None
    error: str | None = None
    calls: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.kind == "tool_call" and not self.calls:
            self.calls = [{"name": self.name, "arguments": self.arguments or {}}]

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for ``info["parsed"]``; ``arguments`` is always a dict (``{}`` unless a call) and ``calls``
        a list (``[]`` unless a call), so vector envs can batch infos whose kinds differ."""
        d = asdict(self)
        d["arguments"] = d["arguments"] or {}
        d["calls"] = d["calls"] or []
        return d


# ---------------------------------------------------------------------------------------------- think

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_think(text: str) -> str:
    """Remove ``<think>...</think>`` blocks; an unclosed ``<think>`` hides everything after it."""
    if "<think>" not in text:
        return text
    text = _THINK_BLOCK.sub("", text)
    open_at = text.find("<think>")
    return text if open_at < 0 else text[:open_at]


# ---------------------------------------------------------------------------------------------- tool-call formats


class CallFormat(ABC):
    """A tool-call syntax. ``find`` returns ``None`` when the reply holds no call at all."""

    @abstractmethod
    def find(self, text: str) -> ParsedAction | None:
        """The call(s) in ``text`` (already without ``<think>`` blocks), the invalid action that explains a
        broken one, or ``None``: no call at all. Never raises."""

    @abstractmethod
    def instructions(self) -> str:
        """How to call a tool, for the system prompt."""

    @abstractmethod
    def render(self, name: str, arguments: dict[str, Any]) -> str:
        """The text of a call in this format (for demonstrations)."""

    def render_many(self, calls: list[tuple[str, dict[str, Any]]]) -> str:
        """The text of one reply making several calls (parallel calls); default: each call on its own line."""
        return "\n".join(self.render(name, arguments) for name, arguments in calls)


def _json_error(e: ValueError) -> str:
    """Why a call's JSON did not decode: a ``JSONDecodeError``'s message and position, or the text of another
    ``ValueError`` (an integer longer than Python's digit limit)."""
    return f"{e.msg} at char {e.pos}" if isinstance(e, json.JSONDecodeError) else str(e)


def _call_object(obj: Any, args_key: str, allowed: frozenset[str]) -> dict[str, Any] | ParsedAction:
    """One decoded call object as ``{"name", "arguments"[, "id"]}``, or the invalid action that explains why not."""
    if not isinstance(obj, dict):
        return ParsedAction("invalid",
                            error=f'the tool call must be a JSON object {{"name": ..., "{args_key}": {{...}}}}')
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedAction("invalid", error='the tool call needs a string "name"')
    args = obj.get(args_key, {})
    if not isinstance(args, dict):
        return ParsedAction("invalid", name=name, error=f'"{args_key}" must be a JSON object')
    extra = set(obj) - allowed
    if extra:
        return ParsedAction("invalid", name=name, error=f"unexpected keys in the tool call: {sorted(extra)}")
    call = {"name": name, "arguments": args}
    if isinstance(obj.get("id"), str) and obj["id"]:
        call["id"] = obj["id"]
    return call


def _calls_action(calls: list[dict[str, Any] | ParsedAction]) -> ParsedAction:
    """The action of a reply's decoded calls: the first invalid one, else a tool call holding them all."""
    for c in calls:
        if isinstance(c, ParsedAction):
            return c
    good = [c for c in calls if isinstance(c, dict)]  # all of them
    first = good[0]
    return ParsedAction("tool_call", name=first["name"], arguments=first["arguments"], calls=good)


class HermesCalls(CallFormat):
    """``<tool_call>\\n{"name": "...", "arguments": {...}}\\n</tool_call>`` — the Hermes/Qwen native format.

    Several blocks in one reply (separated by whitespace only, nothing after the last) are parallel calls.
    """

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    _KEYS = frozenset({"name", "arguments"})

    def find(self, text: str) -> ParsedAction | None:
        start = text.find(self.OPEN)
        if start < 0:
            if self.CLOSE in text:
                return ParsedAction("invalid", error=f"{self.CLOSE} without {self.OPEN}")
            return None
        calls: list[dict[str, Any] | ParsedAction] = []
        pos = start
        while True:
            end = text.find(self.CLOSE, pos)
            if end < 0:
                return ParsedAction("invalid", error=f"{self.OPEN} is not closed with {self.CLOSE}")
            body = text[pos + len(self.OPEN):end].strip()
            try:
                calls.append(_call_object(json.loads(body), "arguments", self._KEYS))
            except ValueError as e:
                return ParsedAction("invalid", error=f"the tool call is not valid JSON ({_json_error(e)})")
            rest = text[end + len(self.CLOSE):]
            if not rest.strip():
                return _calls_action(calls)
            if not rest.lstrip().startswith(self.OPEN):
                return ParsedAction("invalid", error=f"text after {self.CLOSE}; end the reply with the tool call")
            pos = end + len(self.CLOSE) + rest.index(self.OPEN)

    def instructions(self) -> str:
        return (
            "To call a tool, end your reply with a call in this format (several calls: one block each):\n"
            '<tool_call>\n{"name": "<tool name>", "arguments": {<arguments as JSON>}}\n</tool_call>\n'
            "The result comes back in the next message."
        )

    def render(self, name: str, arguments: dict[str, Any]) -> str:
        return f"{self.OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{self.CLOSE}"


class LlamaJsonCalls(CallFormat):
    """Llama 3.x JSON calls: ``{"name": "...", "parameters": {...}}`` (``"arguments"`` is read too).

    The call is the end of the reply: from the first ``{"name"`` on, one JSON object or several separated by
    ``;`` or whitespace, nothing after the last. A leading ``<|python_tag|>`` is allowed.
    """

    name = "llama3_json"
    _START = re.compile(r'\{\s*"name"\s*:')
    _KEYS = frozenset({"name", "parameters", "arguments"})

    def find(self, text: str) -> ParsedAction | None:
        m = self._START.search(text)
        if m is None:
            return None
        decoder = json.JSONDecoder()
        calls: list[dict[str, Any] | ParsedAction] = []
        pos = m.start()
        while True:
            try:
                obj, pos = decoder.raw_decode(text, pos)
            except ValueError as e:
                return ParsedAction("invalid", error=f"the tool call is not valid JSON ({_json_error(e)})")
            if isinstance(obj, dict) and "parameters" in obj and "arguments" in obj:
                return ParsedAction("invalid", error='give "parameters" or "arguments", not both')
            key = "arguments" if isinstance(obj, dict) and "arguments" in obj else "parameters"
            calls.append(_call_object(obj, key, self._KEYS))
            rest = text[pos:].lstrip().lstrip(";").lstrip()
            if not rest:
                return _calls_action(calls)
            if not rest.startswith("{"):
                return ParsedAction("invalid", error="text after the tool call; end the reply with the JSON call")
            pos = len(text) - len(rest)

    def instructions(self) -> str:
        return ('To call a tool, end your reply with the call as JSON: {"name": "<tool name>", "parameters": '
                "{<arguments as JSON>}} (several calls: separate them with ;). The result comes back in the next "
                "message.")

    def render(self, name: str, arguments: dict[str, Any]) -> str:
        return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)


class MistralCalls(CallFormat):
    """Mistral calls: ``[TOOL_CALLS] [{"name": "...", "arguments": {...}}, ...]`` (an ``"id"`` is kept)."""

    name = "mistral"
    MARK = "[TOOL_CALLS]"
    _KEYS = frozenset({"name", "arguments", "id"})

    def find(self, text: str) -> ParsedAction | None:
        at = text.find(self.MARK)
        if at < 0:
            return None
        body = text[at + len(self.MARK):]
        try:
            obj, end = json.JSONDecoder().raw_decode(body, len(body) - len(body.lstrip()))
        except ValueError as e:
            return ParsedAction("invalid", error=f"the tool calls are not valid JSON ({_json_error(e)})")
        if body[end:].strip():
            return ParsedAction("invalid", error=f"text after the {self.MARK} list; end the reply with it")
        if isinstance(obj, dict):
            obj = [obj]
        if not isinstance(obj, list) or not obj:
            return ParsedAction("invalid", error=f"{self.MARK} must be followed by a JSON list of calls")
        return _calls_action([_call_object(o, "arguments", self._KEYS) for o in obj])

    def instructions(self) -> str:
        return ('To call tools, end your reply with [TOOL_CALLS] [{"name": "<tool name>", "arguments": '
                "{<arguments as JSON>}}] (one object per call). The results come back in the next messages.")

    def render(self, name: str, arguments: dict[str, Any]) -> str:
        return self.render_many([(name, arguments)])

    def render_many(self, calls: list[tuple[str, dict[str, Any]]]) -> str:
        body = [{"name": name, "arguments": arguments} for name, arguments in calls]
        return f"{self.MARK} {json.dumps(body, ensure_ascii=False)}"


#: The native (JSON) tool-call formats by name -> a :class:`CallFormat` subclass built with no arguments (or
#: its ``"module:Class"`` path); entry-point group ``agentrl.call_formats``; the contract: a
#: :class:`CallFormat` subclass. :func:`native_call_format` picks a built-in one from a chat template.
CALL_FORMATS: Registry[type[CallFormat]] = Registry("call format", "agentrl.call_formats", {
    "hermes": HermesCalls, "llama3_json": LlamaJsonCalls, "mistral": MistralCalls}, contract=CallFormat)


def register_call_format(name: str, call_format: type[CallFormat] | str) -> None:
    """Make ``name`` a native call format (``env.use_call_format(name)``, ``collector.call_format=name``,
    ``ActionParser(name)``): ``call_format`` is a :class:`CallFormat` subclass built with no arguments, or its
    ``"module:Class"`` path."""
    CALL_FORMATS.register(name, call_format)


def native_call_format(chat_template: Any) -> str:
    """The name (in :data:`CALL_FORMATS`) of the call format a chat template teaches its model.

    ``[TOOL_CALLS]`` in the template: ``"mistral"``; ``<tool_call>``: ``"hermes"``; a Llama-3 template (header
    tokens) that asks for ``"parameters"``: ``"llama3_json"``; anything else (no tools section, e.g. SmolLM2's
    ChatML): ``"hermes"``. A dict of named templates is read as their concatenation.
    """
    text = " ".join(map(str, chat_template.values())) if isinstance(chat_template, dict) else str(chat_template or "")
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if "<tool_call>" in text:
        return "hermes"
    if "<|start_header_id|>" in text and '"parameters"' in text:
        return "llama3_json"
    return "hermes"


class TagCalls(CallFormat):
    """``<tag>content</tag>`` calls one tool with one string argument (e.g. Search-R1's ``<search>``)."""

    def __init__(self, tag: str, tool: str, argument: str):
        self.tag, self.tool, self.argument = tag, tool, argument
        self.open, self.close = f"<{tag}>", f"</{tag}>"

    def find(self, text: str) -> ParsedAction | None:
        start = text.find(self.open)
        if start < 0:
            return None
        end = text.find(self.close, start)
        if end < 0:
            return ParsedAction("invalid", error=f"{self.open} is not closed with {self.close}")
        rest = text[end + len(self.close):]
        if self.open in rest:
            return ParsedAction("invalid", error=f"more than one {self.open} in one reply")
        if rest.strip():
            return ParsedAction("invalid", error=f"text after {self.close}; end the reply with it")
        content = text[start + len(self.open):end].strip()
        if not content:
            return ParsedAction("invalid", error=f"empty {self.open}")
        return ParsedAction("tool_call", name=self.tool, arguments={self.argument: content})

    def instructions(self) -> str:
        return f"To call {self.tool}, end your reply with {self.open}your {self.argument}{self.close}."

    def render(self, name: str, arguments: dict[str, Any]) -> str:
        return f"{self.open}{arguments[self.argument]}{self.close}"


class FencedCodeCalls(CallFormat):
    """A reply that ends with a fenced code block (```` ```python ... ``` ````) runs it with one tool."""

    def __init__(self, tool: str = "code_interpreter", argument: str = "code", lang: str = "python"):
        self.tool, self.argument, self.lang = tool, argument, lang
        self._block = re.compile(r"```" + re.escape(lang) + r"[ \t]*\n(.*?)```", re.DOTALL)

    def find(self, text: str) -> ParsedAction | None:
        blocks = list(self._block.finditer(text))
        if not blocks:
            return None
        last = blocks[-1]
        if text[last.end():].strip():
            return None  # code shown earlier in a reply that goes on is not a call
        code = last.group(1)
        if not code.strip():
            return ParsedAction("invalid", error="empty code block")
        return ParsedAction("tool_call", name=self.tool, arguments={self.argument: code})

    def instructions(self) -> str:
        return f"To run code, end your reply with a fenced block: ```{self.lang}\\n<code>\\n```."

    def render(self, name: str, arguments: dict[str, Any]) -> str:
        return f"```{self.lang}\n{arguments[self.argument].rstrip()}\n```"


# ---------------------------------------------------------------------------------------------- answers

_ANSWER_COLON = re.compile(r"(?:^|\n)\s*\**answer\**\s*:\s*\**(.*)", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer_colon(text: str) -> str | None:
    """The rest of the line after the last ``Answer:`` at a line start (``**Answer:**`` too)."""
    matches = _ANSWER_COLON.findall(text)
    if not matches:
        return None
    ans = matches[-1].strip().strip("*").strip()
    return ans or None


def extract_boxed(text: str, window: int = 300) -> str | None:
    """The content of the last ``\\boxed{...}`` (nested braces respected) that starts in the last ``window`` chars."""
    tail_start = max(0, len(text) - window)
    pos = text.rfind("\\boxed{")
    while pos >= tail_start:
        i, depth = pos + len("\\boxed{"), 1
        while i < len(text) and depth:
            depth += (text[i] == "{") - (text[i] == "}")
            i += 1
        if depth == 0:
            return text[pos + len("\\boxed{"): i - 1].strip() or None
        pos = text.rfind("\\boxed{", 0, pos)
    return None


def extract_answer_tag(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>``."""
    matches = _ANSWER_TAG.findall(text)
    return matches[-1].strip() or None if matches else None


def extract_text(text: str) -> str | None:
    """The whole reply, stripped (``None`` when empty): any text reply is the final answer."""
    return text.strip() or None


@dataclass(frozen=True)
class AnswerFormat:
    """How a final answer is written and read (an entry of :data:`ANSWER_FORMATS`).

    Args:
        extract: the answer in a reply (without ``<think>`` blocks), or ``None`` when it holds none. Never
            raises.
        instructions: how to give the answer, one sentence for the system prompt.
        template: an answer written in this format, ``{answer}`` where the answer goes (for demonstrations).
    """

    extract: Callable[[str], str | None]
    instructions: str
    template: str

    def render(self, answer: str) -> str:
        """``answer`` written in this format."""
        return self.template.replace("{answer}", answer)


#: Answer formats by name -> an :class:`AnswerFormat` (or its ``"module:NAME"`` path); entry-point group
#: ``agentrl.answer_formats``; the contract: an :class:`AnswerFormat` instance.
ANSWER_FORMATS: Registry[AnswerFormat] = Registry("answer format", "agentrl.answer_formats", {
    "answer_colon": AnswerFormat(extract_answer_colon,
                                 "When you know the final answer, reply with a line 'Answer: <answer>'.",
                                 "Answer: {answer}"),
    "boxed": AnswerFormat(extract_boxed, "Put your final answer in \\boxed{} at the end of your reply.",
                          "\\boxed{{answer}}"),
    "answer_tag": AnswerFormat(extract_answer_tag, "Put your final answer inside <answer></answer>.",
                               "<answer>{answer}</answer>"),
    "text": AnswerFormat(extract_text, "When no tool fits, reply in plain text without a tool call.", "{answer}"),
}, contract=AnswerFormat)


def register_answer_format(name: str, answer_format: AnswerFormat | str) -> None:
    """Make ``name`` an answer format (``ActionParser(answer=name)``, the ``answer=`` of an env's parser):
    ``answer_format`` is an :class:`AnswerFormat` or its ``"module:NAME"`` path."""
    ANSWER_FORMATS.register(name, answer_format)


# ---------------------------------------------------------------------------------------------- the parser


class ActionParser:
    """Reads one reply as a tool call, a final answer, or invalid.

    A reply that contains a call (or a broken one) is a tool call (or invalid) — any answer text before the
    call is ignored. Otherwise a found answer is the final answer; otherwise the reply is invalid.
    """

    def __init__(self, calls: CallFormat | str | None = None, answer: str = "answer_colon"):
        if answer not in ANSWER_FORMATS:
            raise ValueError(f"answer format must be one of {sorted(ANSWER_FORMATS)}, got {answer!r}")
        if isinstance(calls, str):
            if calls not in CALL_FORMATS:
                raise ValueError(f"call format must be one of {sorted(CALL_FORMATS)}, got {calls!r}")
            calls = CALL_FORMATS.get(calls)()
        self.calls = calls if calls is not None else HermesCalls()
        self.answer_format = answer
        self._answer = ANSWER_FORMATS.get(answer)

    def parse(self, text: str) -> ParsedAction:
        visible = strip_think(text)
        call = self.calls.find(visible)
        if call is not None:
            return call
        answer = self._answer.extract(visible)
        if answer is not None:
            return ParsedAction("answer", answer=answer)
        return ParsedAction("invalid", error="no tool call and no final answer found")

    def format_instructions(self) -> str:
        """How to call a tool and how to answer, for the system prompt."""
        return f"{self.calls.instructions()}\n{self.answer_instructions()}"

    def answer_instructions(self) -> str:
        """How to give the final answer in this parser's answer format (one sentence)."""
        return self._answer.instructions

    def describe_tools(self, schemas: list[dict[str, Any]]) -> str:
        lines = "\n".join(json.dumps(s["function"], ensure_ascii=False) for s in schemas)
        return f"Available tools (JSON schemas):\n{lines}"

    def render_call(self, name: str, arguments: dict[str, Any]) -> str:
        return self.calls.render(name, arguments)

    def render_calls(self, calls: list[tuple[str, dict[str, Any]]]) -> str:
        """One reply making every call of ``calls`` (``(name, arguments)`` pairs) in this parser's call format."""
        return self.calls.render_many(calls)

    def render_answer(self, answer: str) -> str:
        """``answer`` written in this parser's answer format (for demonstrations)."""
        return self._answer.render(answer)
