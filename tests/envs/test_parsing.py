"""The reply parsers: strict Hermes calls, tag and fenced formats, answer extractors, normalisation."""

import copy

import pytest
from helpers import run_with_plugin

from agentrl.envs import parsing
from agentrl.envs.answers import answers_match, exact_match, normalize_answer, parse_number
from agentrl.envs.parsing import (
    ANSWER_FORMATS,
    CALL_FORMATS,
    ActionParser,
    FencedCodeCalls,
    HermesCalls,
    LlamaJsonCalls,
    MistralCalls,
    TagCalls,
    extract_answer_colon,
    extract_answer_tag,
    extract_boxed,
    native_call_format,
    register_answer_format,
    register_call_format,
    strip_think,
)

P = ActionParser()
CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n</tool_call>'


def test_well_formed_call():
    a = P.parse("I will multiply.\n" + CALL)
    assert (a.kind, a.name, a.arguments) == ("tool_call", "multiply", {"a": 3, "b": 4})


def test_trailing_whitespace_after_call_is_fine():
    assert P.parse(CALL + "\n\n  ").kind == "tool_call"


def test_call_without_arguments_key_means_no_arguments():
    a = P.parse('<tool_call>{"name": "now"}</tool_call>')
    assert (a.kind, a.arguments) == ("tool_call", {})


@pytest.mark.parametrize(
    "text, fragment",
    [
        (CALL + " then " + CALL, "text after </tool_call>"),
        (CALL + " and then some text", "text after </tool_call>"),
        ('<tool_call>{"name": "multiply", "arguments": {"a": 3,}}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "multiply", "arguments": [3, 4]}</tool_call>', '"arguments" must be a JSON object'),
        ('<tool_call>{"name": "multiply", "arguments": "{\\"a\\": 3}"}</tool_call>',
         '"arguments" must be a JSON object'),
        ('<tool_call>["multiply"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs a string "name"'),
        ('<tool_call>{"name": "m", "arguments": {}, "id": 1}</tool_call>', "unexpected keys"),
        ('<tool_call>{"name": "multiply", "arguments": {}}', "is not closed"),
        ('{"name": "multiply"}</tool_call>', "without <tool_call>"),
        ("just chatting", "no tool call and no final answer"),
        ("", "no tool call and no final answer"),
    ],
)
def test_invalid_replies(text, fragment):
    a = P.parse(text)
    assert a.kind == "invalid"
    assert fragment in a.error


def test_call_inside_think_is_ignored():
    a = P.parse("<think>maybe " + CALL + "</think>\nAnswer: 12")
    assert (a.kind, a.answer) == ("answer", "12")
    # an unclosed think hides everything after it
    assert P.parse("<think>" + CALL).kind == "invalid"
    assert strip_think("a<think>b</think>c<think>d") == "ac"


def test_call_takes_precedence_over_answer_text_before_it():
    a = P.parse("Answer: 5?\n" + CALL)
    assert a.kind == "tool_call"


def test_tag_format():
    p = ActionParser(TagCalls("search", "search", "query"))
    a = p.parse("<think>hmm</think><search> capital of France </search>")
    assert (a.kind, a.name, a.arguments) == ("tool_call", "search", {"query": "capital of France"})
    assert p.parse("<search>a</search> extra").kind == "invalid"
    assert p.parse("<search></search>").kind == "invalid"
    assert p.parse("Answer: Paris").answer == "Paris"


def test_fenced_code_format():
    p = ActionParser(FencedCodeCalls(), answer="boxed")
    a = p.parse("Let me compute.\n```python\nprint(2**10)\n```\n")
    assert (a.kind, a.name, a.arguments) == ("tool_call", "code_interpreter", {"code": "print(2**10)\n"})
    # code shown before the final answer is not a call
    b = p.parse("```python\nprint(1)\n```\nSo the answer is \\boxed{1}.")
    assert (b.kind, b.answer) == ("answer", "1")


def test_render_round_trips():
    for fmt, args in [(HermesCalls(), {"a": 1, "b": "x"}), (TagCalls("search", "search", "query"), {"query": "q"}),
                      (FencedCodeCalls(), {"code": "print(1)"})]:
        p = ActionParser(fmt)
        name = "multiply" if isinstance(fmt, HermesCalls) else fmt.tool
        a = p.parse(p.render_call(name, args))
        assert a.kind == "tool_call" and a.name == name
        assert {k: v.strip() if isinstance(v, str) else v for k, v in a.arguments.items()} == args
    for fmt in ("answer_colon", "boxed", "answer_tag"):
        p = ActionParser(answer=fmt)
        assert p.parse(p.render_answer("42")).answer == "42"


def test_answer_extractors():
    assert extract_answer_colon("reasoning\nAnswer: Paris\n") == "Paris"
    assert extract_answer_colon("**Answer:** 12") == "12"
    assert extract_answer_colon("Answer: 1\nAnswer: 2") == "2"
    assert extract_answer_colon("The answer is 5") is None
    assert extract_boxed(r"so \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert extract_boxed(r"\boxed{1} then \boxed{2}") == "2"
    assert extract_boxed(r"\boxed{3}" + "x" * 400) is None  # not in the last 300 characters
    assert extract_boxed(r"\boxed{7} and \boxed{unclosed") == "7"
    assert extract_answer_tag("<answer>a</answer> <answer> b </answer>") == "b"
    assert extract_answer_tag("<answer>open") is None


def test_normalisation_and_matching():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a day") == "apple day"
    assert exact_match("the Beatles", ["Beatles", "Fab Four"])
    assert not exact_match("Stones", ["Beatles"])
    assert parse_number("1,776") == 1776 and parse_number("$12.50") == 12.5 and parse_number("42.") == 42
    assert parse_number("12 apples") is None and parse_number("inf") is None
    assert answers_match("1,776", "1776") and answers_match("1776.0", 1776)
    assert not answers_match("1777", "1776")
    assert answers_match("0.62137", "0.621")  is False
    assert answers_match("Paris", ["London", "paris"])


# ---------------------------------------------------------------------------------------------- native formats


def test_several_hermes_calls_in_one_reply_are_parallel_calls_in_order():
    two = CALL + "\n" + CALL.replace("multiply", "add").replace('"a": 3', '"a": 5')
    a = P.parse("Both at once.\n" + two)
    assert a.kind == "tool_call"
    assert [(c["name"], c["arguments"]) for c in a.calls] == [("multiply", {"a": 3, "b": 4}), ("add", {"a": 5, "b": 4})]
    assert (a.name, a.arguments) == ("multiply", {"a": 3, "b": 4})
    assert a.as_dict()["calls"] == a.calls


def test_one_bad_call_among_several_makes_the_reply_invalid():
    a = P.parse(CALL + '\n<tool_call>{"name": "add", "arguments": [1]}</tool_call>')
    assert a.kind == "invalid" and '"arguments" must be a JSON object' in a.error


LLAMA = ActionParser(LlamaJsonCalls())


@pytest.mark.parametrize("text, calls", [
    ('{"name": "multiply", "parameters": {"a": 3, "b": 4}}', [("multiply", {"a": 3, "b": 4})]),
    ('<|python_tag|>{"name": "multiply", "parameters": {"a": 3, "b": 4}}', [("multiply", {"a": 3, "b": 4})]),
    ('I need the product.\n{"name": "multiply", "arguments": {"a": 3}}', [("multiply", {"a": 3})]),
    ('{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}\n', [("a", {"x": 1}), ("b", {})]),
])
def test_llama_json_calls(text, calls):
    a = LLAMA.parse(text)
    assert a.kind == "tool_call", a.error
    assert [(c["name"], c["arguments"]) for c in a.calls] == calls


@pytest.mark.parametrize("text, fragment", [
    ('{"name": "multiply", "parameters": {"a": 3}} and more', "text after the tool call"),
    ('{"name": "multiply", "parameters": {"a": 3,}}', "not valid JSON"),
    ('{"name": "multiply", "parameters": [3]}', '"parameters" must be a JSON object'),
    ('{"name": "m", "parameters": {}, "arguments": {}}', "not both"),
    ('{"name": "m", "parameters": {}, "foo": 1}', "unexpected keys"),
])
def test_llama_json_invalid(text, fragment):
    a = LLAMA.parse(text)
    assert a.kind == "invalid" and fragment in a.error


def test_llama_json_without_a_name_object_is_no_call():
    assert LLAMA.parse('The dict {"a": 1} has one key.\nAnswer: 1').kind == "answer"


MISTRAL = ActionParser(MistralCalls())


def test_mistral_calls_keep_the_model_ids():
    a = MISTRAL.parse('[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abc123XYZ"}, '
                      '{"name": "now", "arguments": {}}]')
    assert a.kind == "tool_call"
    assert a.calls == [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abc123XYZ"},
                       {"name": "now", "arguments": {}}]


@pytest.mark.parametrize("text, fragment", [
    ('[TOOL_CALLS] [{"name": "add", "arguments": {}}] trailing', "text after the [TOOL_CALLS] list"),
    ("[TOOL_CALLS] [", "not valid JSON"),
    ("[TOOL_CALLS] []", "JSON list of calls"),
    ('[TOOL_CALLS] [{"arguments": {}}]', 'needs a string "name"'),
])
def test_mistral_invalid(text, fragment):
    a = MISTRAL.parse(text)
    assert a.kind == "invalid" and fragment in a.error


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral"])
def test_a_number_past_pythons_digit_limit_is_an_invalid_call_not_an_exception(name):
    """json raises a plain ValueError (no .msg/.pos) for an integer of more than 4300 digits."""
    parser = ActionParser(name)
    a = parser.parse(parser.render_call("add", {"a": 1}).replace('"a": 1', '"a": ' + "9" * 5000))
    assert a.kind == "invalid" and "not valid JSON" in a.error and "4300 digits" in a.error


@pytest.mark.parametrize("name", sorted(CALL_FORMATS))
def test_each_native_format_reads_what_it_renders(name):
    parser = ActionParser(name)
    a = parser.parse("Let me call.\n" + parser.render_call("multiply", {"a": 3, "b": [1, "x"]}))
    assert (a.kind, a.name, a.arguments) == ("tool_call", "multiply", {"a": 3, "b": [1, "x"]})
    assert parser.parse("<think>" + parser.render_call("m", {}) + "</think>Answer: 4").kind == "answer"


def test_unknown_call_format_name_is_refused():
    with pytest.raises(ValueError, match="call format must be one of"):
        ActionParser("pythonic")


@pytest.mark.parametrize("template, name", [
    ("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS]' }}", "mistral"),
    ("{{ '<tool_call>' }}{{ tools }}", "hermes"),
    ("{{ '<|start_header_id|>' }} {\"name\": function name, \"parameters\": ...}", "llama3_json"),
    ("{{ '<|im_start|>' }}", "hermes"),
    ({"default": "x", "tool_use": "[TOOL_CALLS]"}, "mistral"),
    (None, "hermes"),
])
def test_native_call_format_from_template(template, name):
    assert native_call_format(template) == name


# ---------------------------------------------------------------------------------------------- the format registries


def test_the_format_registries_hold_the_builtins():
    assert {"hermes", "llama3_json", "mistral"} <= set(CALL_FORMATS.names())
    assert {"answer_colon", "boxed", "answer_tag"} <= set(ANSWER_FORMATS.names())
    assert isinstance(ANSWER_FORMATS.get("boxed"), parsing.AnswerFormat)


def test_a_format_that_breaks_its_contract_is_refused(monkeypatch):
    monkeypatch.setattr(parsing, "CALL_FORMATS", copy.deepcopy(parsing.CALL_FORMATS))
    monkeypatch.setattr(parsing, "ANSWER_FORMATS", copy.deepcopy(parsing.ANSWER_FORMATS))
    with pytest.raises(TypeError, match=r"'not_calls' \(registered at run time: .*breaks the call format contract"):
        register_call_format("not_calls", dict)  # not a CallFormat subclass
    with pytest.raises(TypeError, match=r"'not_answers' \(registered at run time: .*breaks the answer format"):
        register_answer_format("not_answers", len)  # not an AnswerFormat
    assert "not_calls" not in parsing.CALL_FORMATS and "not_answers" not in parsing.ANSWER_FORMATS


PIPE_PLUGIN = """
import json
import re

from agentrl.envs.parsing import AnswerFormat, CallFormat, ParsedAction


class PipeCalls(CallFormat):
    def find(self, text):
        m = re.search(r"CALL\\|(\\w+)\\|(.*)", text)
        if m is None:
            return None
        try:
            args = json.loads(m.group(2))
        except ValueError:
            return ParsedAction("invalid", error="the arguments are not JSON")
        call = {"name": m.group(1), "arguments": args}
        return ParsedAction("tool_call", name=call["name"], arguments=args, calls=[call])

    def instructions(self):
        return "Call a tool with a line CALL|name|{json arguments}."

    def render(self, name, arguments):
        return f"CALL|{name}|{json.dumps(arguments)}"


def _final(text):
    m = re.search(r"FINAL=(\\S+)", text)
    return m.group(1) if m else None


FINAL = AnswerFormat(_final, "Reply with FINAL=<answer>.", "FINAL={answer}")
"""


def test_a_third_partys_call_format_through_an_entry_point(tmp_path, monkeypatch):
    code = ("import gymnasium as gym, agentrl.envs\n"
            "from agentrl.envs.parsing import ActionParser\n"
            "a = ActionParser('pipe').parse('Let me add.\\nCALL|add|{\"a\": 1}')\n"
            "env = gym.make('AgentRL/ToolUse-v0').unwrapped\n"
            "print(a.kind, a.name, a.arguments, env.use_call_format('pipe'), env.parser.parse('CALL|x|{}').kind)")
    out = run_with_plugin(tmp_path, "agentrl.call_formats", "pipe = pipe_formats:PipeCalls",
                          "pipe_formats", PIPE_PLUGIN, code)
    assert out.split() == ["tool_call", "add", "{'a':", "1}", "True", "tool_call"]  # ToolUse-v0 switched to it


def test_a_third_partys_answer_format_through_an_entry_point(tmp_path, monkeypatch):
    code = ("from agentrl.envs.parsing import ActionParser\n"
            "p = ActionParser(answer='final')\n"
            "a = p.parse('So it is FINAL=42')\n"
            "print(a.kind, a.answer, p.parse('Answer: 42').kind)")
    out = run_with_plugin(tmp_path, "agentrl.answer_formats", "final = pipe_formats:FINAL",
                          "pipe_formats", PIPE_PLUGIN, code)
    assert out.split() == ["answer", "42", "invalid"]
