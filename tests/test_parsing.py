"""The reply parsers: strict Hermes calls, tag and fenced formats, answer extractors, normalisation."""

import pytest

from agentrl.envs.parsing import (
    ActionParser,
    FencedCodeCalls,
    HermesCalls,
    TagCalls,
    answers_match,
    exact_match,
    extract_answer_colon,
    extract_answer_tag,
    extract_boxed,
    normalize_answer,
    parse_number,
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
        (CALL + "\n" + CALL, "more than one tool call"),
        (CALL + " and then some text", "text after </tool_call>"),
        ('<tool_call>{"name": "multiply", "arguments": {"a": 3,}}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "multiply", "arguments": [3, 4]}</tool_call>', '"arguments" must be a JSON object'),
        ('<tool_call>{"name": "multiply", "arguments": "{\\"a\\": 3}"}</tool_call>', '"arguments" must be a JSON object'),
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
